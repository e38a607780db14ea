"""``libero-oracle``: a scripted reference policy that reads privileged simulator state.

It proves LIBERO's whole path through wamcore (OSC_POSE frame and scaling, gripper sign,
success read at the right step, the stop logic) the way a trained model would use it: its
chunks are ordinary ``libero.osc_pose.delta.v1`` actions, validated and executed like any
model's. What it reads is not: object poses and the task's BDDL goal come from the
platform's privileged state (``wam_libero.privileged``), which the core hands only to a
model declaring the ``privileged_state`` capability; the capability is part of the model
identity, so its success rates are never a model's.

Conventions used (robosuite 1.4, ARISE-Initiative/robosuite ``robosuite/controllers/osc.py``
and ``controllers/config/osc_pose.json``; ``models/grippers/panda_gripper.py``): a delta of
1 moves the end-effector goal 0.05 m in the world frame from where it is now; a zero rotation
keeps the previous orientation goal; the gripper integrates the sign of its command (-1 opens,
+1 closes) over about eight control steps. In LIBERO's scenes the fingers close along the
world y axis.

Skills, chosen from the BDDL goal: ``on``/``in`` (pick and place: approach, descend, grasp,
lift, carry, lower, release, then retreat and retry while the goal is not met; a bowl or
a plate by its rim, on a side clear of neighbours, or across the front of the drawer it is in), ``open`` (a drawer: hold its handle from the front with the hand
level, pull; also first, when the goal puts something into a closed drawer), and ``turnon``
(the stove: take the knob's grip ridge and turn the hand).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction
from wamcore.specs import Option

from .scripted import DEFAULT_CHUNK, _configure  # the chunk option: the same deployment rule
from .spec import ACTION_SPACE, PLATFORM, STATE_SIZES

NAME = "libero-oracle"
OPEN, CLOSE = -1.0, 1.0
#: OSC_POSE translation per unit of action (osc_pose.json output_max)
STEP_M = 0.05
GRIPPER_STEPS = 10  # a full close or open (0.25 of the command per control step, plus settling)


def encode(request):
    if request.privileged is None:
        from wamcore.errors import CapabilityError

        raise CapabilityError(f"{NAME} needs the platform's privileged state; this request carries none "
                              "(wam_act sends it to models that declare privileged_state)")
    obs = request.observation
    return {"eef": np.asarray(obs.state["eef_position"], dtype=np.float64),
            "hand": _quat_mat(obs.state["eef_quaternion_xyzw"]),
            "gripper": np.asarray(obs.state["gripper_qpos"], dtype=np.float64),
            "privileged": request.privileged}


def decode(native, request):
    actions, phase = native
    return Prediction(actions=np.asarray(actions, dtype=np.float32), info={"phase": phase})


#: OSC_POSE rotation per unit of action (osc_pose.json output_max)
STEP_RAD = 0.5
#: the handle of a LIBERO wooden cabinet's drawer in the drawer body's frame (measured from
#: the handle geoms of ``wooden_cabinet``: LIBERO ``assets/articulated_objects/wooden_cabinet``)
CABINET_HANDLE = {"top": (-0.003, -0.102, 0.184), "middle": (-0.003, -0.102, 0.110), "bottom": (-0.003, -0.102, 0.041)}
#: the inside of a LIBERO wooden cabinet's drawer, x (across the front) and y (depth) in the
#: drawer body's frame, between its walls (measured like ``CABINET_HANDLE``)
DRAWER_INSIDE = ((-0.099, 0.106), (-0.065, 0.087))
#: a drawer counts as open below this slide position (LIBERO ``WoodenCabinet`` default_open_ranges)
DRAWER_OPEN = -0.14
#: the stove counts as on from this knob angle (LIBERO ``FlatStove`` default_turnon_ranges)
STOVE_ON = 0.5


def _toward(eef, target, gain=1.0):
    return np.clip((np.asarray(target) - eef) * gain / STEP_M, -1.0, 1.0)


def _quat_mat(q):
    """Rotation matrix of a unit quaternion in robosuite's x, y, z, w order."""
    x, y, z, w = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def _axis_angle(r):
    """The rotation vector of a rotation matrix (its angle below pi)."""
    angle = np.arccos(np.clip((np.trace(r) - 1) / 2, -1.0, 1.0))
    if angle < 1e-6:
        return np.zeros(3)
    axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]]) / (2 * np.sin(angle))
    return axis * angle


def _rot(axis, angle):
    k = np.asarray(axis, dtype=np.float64)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * kx + (1 - np.cos(angle)) * kx @ kx


def _turn(current, wanted):
    """The world-frame rotation input that turns the hand from ``current`` towards ``wanted``."""
    error = _axis_angle(wanted @ current.T)
    if np.linalg.norm(error) < 0.03:
        return np.zeros(3), 0.0
    return np.clip(error / STEP_RAD, -1.0, 1.0), float(np.linalg.norm(error))


class Episode:
    """One episode's plan: the skill's phase and its counters."""

    def __init__(self):
        self.phase = "start"
        self.count = 0
        self.last_eef: Optional[np.ndarray] = None
        self.still = 0
        self.attempts = 0
        self.memo: Dict[str, Any] = {}

    def go(self, phase):
        self.phase, self.count, self.still = phase, 0, 0


class OraclePolicy:
    """Per-session plans; ``predict_native`` returns ``(chunk [T, 7], phase)``."""

    checkpoint = "scripted-oracle"
    uses_sessions = True

    def __init__(self, chunk: int = DEFAULT_CHUNK):
        self.chunk = int(chunk)
        self.episodes: Dict[str, Episode] = {}
        self.details = {"reads": "privileged simulator state (object poses, BDDL goal); no images"}

    def reset(self, session="default"):
        self.episodes[session] = Episode()

    def predict_native(self, native, request, session="default"):
        ep = self.episodes.setdefault(session, Episode())
        eef = native["eef"]
        if ep.last_eef is not None:
            ep.still = ep.still + 1 if np.linalg.norm(eef - ep.last_eef) < 0.002 else 0
        ep.last_eef = eef.copy()
        state = native["privileged"]
        hand = native["hand"]
        if "down" not in ep.memo:  # the hand's orientation at the start: pointing down
            ep.memo["down"] = hand
        goal = state["goal"][0]
        kind = goal[0]
        ep.memo["wanted"] = ep.memo["down"]
        if kind == "open":
            action = self._open(ep, eef, state, goal[1])
        elif kind == "turnon":
            action = self._turn_on(ep, eef, state, goal[1])
        elif kind in ("on", "in") and (ep.memo.get("skill") == "open" or self._closed_drawer(state, goal[2])):
            action = self._open(ep, eef, state, goal[2], then="release")
        elif kind in ("on", "in"):
            if ep.memo.pop("skill", "pick") != "pick":
                ep.go("start")
            action = self._pick_place(ep, eef, state, goal[1], goal[2])
            ep.memo["skill"] = "pick"
        else:
            raise NotImplementedError(f"{NAME} has no skill for the goal {goal}")
        action = np.asarray(action, dtype=np.float64)
        action[3:6], ep.memo["turn_error"] = _turn(hand, ep.memo["wanted"])
        ep.count += 1
        return np.tile(action, (self.chunk, 1)), ep.phase

    # ------------------------------------------------------------------ pick and place

    def _pick_place(self, ep, eef, state, obj, target):
        ext = np.asarray(state["extents"][obj])
        centre = (ext[:3] + ext[3:]) / 2
        size = ext[3:] - ext[:3]
        grasp = centre.copy()
        if ep.phase in ("start", "approach"):  # kept for the attempt, the object once out of the drawer
            ep.memo["across"] = self._drawer_across(state, centre)
        across = ep.memo["across"]
        if across is not None:  # in a drawer: its walls leave room only at the sides, across the front
            ep.memo["wanted"] = _rot([0, 0, 1], self._grip_turn(ep.memo["down"], across[0])) @ ep.memo["down"]
        rim = size[0] > 0.1 and size[1] > 0.1
        if rim:  # a bowl or a plate: wider than the open hand, take its rim
            if across is not None:
                side = -across[1] if ep.attempts % 2 else across[1]  # the roomier side first
                grasp[:2] += side * (size[:2].mean() / 2 - 0.012) * across[0][:2]
            else:
                if "near" not in ep.memo:  # the side facing the hand, unless a neighbour stands there
                    near = eef[1] < centre[1]
                    if self._finger_blocked(state, obj, ext, near) and not self._finger_blocked(state, obj, ext, not near):
                        near = not near
                    ep.memo["near"] = near
                near = ep.memo["near"] != bool(ep.attempts % 2)  # the other side after a miss
                grasp[1] = ext[1] + 0.012 if near else ext[4] - 0.012
            grasp[2] = max(ext[5] - 0.02, ext[2] + 0.008)
        else:
            grasp[2] = max(ext[2] + 0.015, ext[5] - 0.03)
        place = self._place_point(state, target)
        if ep.phase == "start":
            ep.go("approach")
        if ep.phase == "approach":
            aim = grasp + [0, 0, 0.10]
            off = np.linalg.norm((aim - eef)[:2])
            turned = ep.memo.get("turn_error", 1.0) < 0.1 or ep.count * self.chunk >= 60
            if turned and ((off < 0.01 and abs(aim[2] - eef[2]) < 0.02) or (ep.still >= 3 and off < 0.03)):
                ep.go("descend")  # there, or as near as the arm gets (at the edge of its reach)
            else:
                if ep.still >= 3:  # blocked on the way (an open drawer, a shelf): pass higher
                    ep.memo["clear"] = ep.memo.get("clear", 0.0) + 0.05
                    ep.still = 0
                if off > 0.02:  # over there first, then down
                    aim[2] = max(aim[2], eef[2]) + ep.memo.get("clear", 0.0)
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "descend":
            sinking = eef[2] < ep.memo.get("z", np.inf) - 0.003
            ep.memo["z"], ep.memo["stuck"] = eef[2], 0 if sinking else ep.memo.get("stuck", 0) + 1
            if ep.memo["stuck"] >= 3 and eef[2] - grasp[2] > 0.04:  # something above the object: the other side
                ep.memo.pop("z")
                return self._retry(ep)
            if (np.linalg.norm(grasp - eef) < 0.008 or (ep.still >= 2 and eef[2] - grasp[2] < 0.03)
                    or ep.count * self.chunk >= 40):
                ep.go("grasp")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, OPEN]
        if ep.phase == "grasp":
            grasp = ep.memo.setdefault("grasp_at", grasp)  # held still: the fingers may push the object
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.memo.pop("grasp_at")
                # off a raised surface (not out of a drawer), down to the target: less
                rise = 0.08 if ext[2] > place[2] + 0.1 and across is None else 0.15
                ep.memo.update(lift_z=max(eef[2] + rise, place[2] + size[2] + 0.12), bottom=ext[2])
                ep.go("lift")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, CLOSE]
        if ep.phase == "lift":
            aim = np.r_[eef[:2], ep.memo["lift_z"]]
            if eef[2] > ep.memo["lift_z"] - 0.02 or ep.still >= 2:
                if ext[2] < ep.memo["bottom"] + 0.02:  # the object did not come up with the hand
                    return self._retry(ep)
                ep.memo["hang"] = eef[2] - ext[2]  # how far under the hand it hangs
                ep.go("carry")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, CLOSE]
        if ep.phase in ("carry", "lower") and eef[2] - ext[2] > ep.memo["hang"] + 0.03:  # it fell
            return self._retry(ep)
        # what lands on the target: a bowl's or plate's foot (its body's origin) when it hangs tilted
        base = np.asarray(state["objects"][obj][:2]) if rim else centre[:2]
        if ep.phase == "carry":
            aim = np.r_[eef[:2] + place[:2] - base, ep.memo["lift_z"]]  # as the object hangs now
            off = np.linalg.norm(place[:2] - base)
            if off < 0.012 or (ep.still >= 3 and off < 0.03):
                ep.go("lower")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, CLOSE]
        if ep.phase == "lower":
            drop = place[2] + 0.02 + (eef[2] - ext[2])
            aim = np.r_[eef[:2] + place[:2] - base, drop]
            if eef[2] - drop < 0.01 or ep.still >= 2:
                ep.go("release")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, CLOSE]
        if ep.phase == "release":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("retreat")
            else:
                return np.r_[0, 0, 0, 0, 0, 0, OPEN]
        if ep.phase == "retreat":
            if ep.count * self.chunk >= 12:
                ep.attempts += 1
                ep.go("approach")
            return np.r_[0, 0, 0.5, 0, 0, 0, OPEN]
        raise AssertionError(ep.phase)

    # ------------------------------------------------------------------ drawers

    @staticmethod
    def _drawer(state, region):
        """(body, joint, level) of a cabinet region such as ``wooden_cabinet_1_middle_region``."""
        for level in CABINET_HANDLE:
            suffix = f"_{level}_region"
            if region.endswith(suffix):
                cabinet = region[: -len(suffix)]
                body, joint = f"{cabinet}_cabinet_{level}", f"{cabinet}_{level}_level"
                if body in state["bodies"] and joint in state["joints"]:
                    return body, joint, level
        return None

    @staticmethod
    def _drawer_across(state, point):
        """``(axis, side)`` when ``point`` lies inside a cabinet drawer: the world direction
        across the drawer's front and the sign (-1 or +1) of the side with more room."""
        for body, pose in state["bodies"].items():
            level = body.rsplit("_", 1)[-1]
            if "_cabinet_" not in body or level not in CABINET_HANDLE:
                continue
            r = _quat_mat(pose[3:])
            local = r.T @ (np.asarray(point) - pose[:3])
            (x0, x1), (y0, y1) = DRAWER_INSIDE
            if x0 < local[0] < x1 and y0 < local[1] < y1 and abs(local[2] - CABINET_HANDLE[level][2]) < 0.06:
                return r[:, 0], (1.0 if x1 - local[0] > local[0] - x0 else -1.0)
        return None

    @staticmethod
    def _grip_turn(down, axis):
        """The turn about the vertical (within a quarter turn) that lines the fingers' closing
        axis (the hand's y) up with ``axis``."""
        fingers = down[:, 1]
        turn = np.arctan2(axis[1], axis[0]) - np.arctan2(fingers[1], fingers[0])
        return (turn + np.pi / 2) % np.pi - np.pi / 2

    def _closed_drawer(self, state, region):
        drawer = self._drawer(state, region)
        return drawer is not None and state["joints"][drawer[1]] > DRAWER_OPEN

    def _open(self, ep, eef, state, region, then=None):
        """Hold the handle from the front with the hand level (fingers above and below the
        bar), then pull the drawer out along the cabinet's front direction."""
        drawer = self._drawer(state, region)
        if drawer is None:
            raise NotImplementedError(f"{NAME} cannot open {region!r} (not a wooden cabinet drawer)")
        body, joint, level = drawer
        if ep.memo.get("skill") != "open":
            ep.memo["skill"] = "open"
            ep.go("start")
        pose = np.asarray(state["bodies"][body])
        r_body = _quat_mat(pose[3:])
        handle = pose[:3] + r_body @ np.asarray(CABINET_HANDLE[level])
        front = r_body @ np.array([0.0, -1.0, 0.0])  # the handle's side of the cabinet
        yaw = np.arctan2(-front[0], front[1])
        # level hand: the down-pointing hand pitched a quarter turn about the axis across the front
        level_hand = _rot([0, 0, 1], yaw) @ _rot([1, 0, 0], -np.pi / 2) @ _rot([0, 0, 1], -yaw) @ ep.memo["down"]
        if ep.phase == "start":
            ep.go("raise")
        if ep.phase == "raise":  # clear of the table before turning the hand
            aim = np.r_[eef[:2], max(eef[2], handle[2] + 0.10)]
            if abs(aim[2] - eef[2]) < 0.02:
                ep.go("face")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        ep.memo["wanted"] = level_hand
        if ep.phase == "face":
            aim = handle + front * 0.12
            turned = ep.memo.get("turn_error", 1.0) < 0.1 or ep.count * self.chunk >= 60
            if (np.linalg.norm(aim - eef) < 0.02 or ep.still >= 3) and turned:
                ep.go("insert")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "insert":
            aim = handle - front * 0.005
            if np.linalg.norm(aim - eef) < 0.008 or ep.still >= 2:
                ep.go("grip")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "grip":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("pull")
            else:
                return np.r_[_toward(eef, handle - front * 0.005), 0, 0, 0, CLOSE]
        if ep.phase == "pull":
            if state["joints"][joint] <= DRAWER_OPEN - 0.01 and then == "release":
                ep.go("let go")
            elif np.linalg.norm(eef - handle) > 0.03:  # slipped off the handle: take it again
                ep.go("reopen")
            else:
                return np.r_[_toward(eef, handle + front * 0.04, gain=0.6), 0, 0, 0, CLOSE]
        if ep.phase == "reopen":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("face")
            return np.r_[0, 0, 0, 0, 0, 0, OPEN]
        if ep.phase == "let go":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("back off")
            else:
                return np.r_[0, 0, 0, 0, 0, 0, OPEN]
        if ep.phase == "back off":  # away and above, clear of the open drawer
            aim = handle + front * 0.20 + [0, 0, 0.12]
            if np.linalg.norm(aim - eef) < 0.02 or ep.still >= 3:
                ep.go("hand down")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "hand down":  # turn the hand back there, then the next skill starts
            ep.memo["wanted"] = ep.memo["down"]
            if ep.memo.get("turn_error", 1.0) < 0.1 or ep.count * self.chunk >= 40:
                ep.memo["skill"] = "done"
            return np.r_[0, 0, 0, 0, 0, 0, OPEN]
        raise AssertionError(ep.phase)

    # ------------------------------------------------------------------ stove

    def _turn_on(self, ep, eef, state, stove):
        """Take the knob's grip ridge with the hand turned a quarter (fingers closing across
        the ridge), then turn the hand about the knob's vertical axis."""
        knob = np.asarray(state["bodies"][f"{stove}_button"][:3])
        grasp = knob + [0.0, 0.0, 0.035]
        across = _rot([0, 0, 1], np.pi / 2) @ ep.memo["down"]
        ep.memo["wanted"] = across
        if ep.phase == "start":
            ep.go("above")
        if ep.phase == "above":
            aim = grasp + [0, 0, 0.08]
            if np.linalg.norm(aim - eef) < 0.012 and ep.memo.get("turn_error", 1.0) < 0.1:
                ep.go("down")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "down":
            if np.linalg.norm(grasp - eef) < 0.008 or ep.still >= 2:
                ep.go("grip")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, OPEN]
        if ep.phase == "grip":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("twist")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, CLOSE]
        if ep.phase == "twist":
            ep.memo["wanted"] = _rot([0, 0, 1], STOVE_ON + 0.4) @ across
            if ep.count * self.chunk >= 40:  # the knob slipped: take it again
                ep.go("let go")
            return np.r_[_toward(eef, grasp), 0, 0, 0, CLOSE]
        if ep.phase == "let go":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.go("above")
            return np.r_[0, 0, 0.3, 0, 0, 0, OPEN]
        raise AssertionError(ep.phase)

    @staticmethod
    def _finger_blocked(state, obj, ext, near):
        """Whether another object or fixture stands where the outer finger goes down beside the
        rim of ``obj`` (the fingers open 0.08 m apart, along world y)."""
        y = ext[1] - 0.028 if near else ext[4] + 0.028
        x = (ext[0] + ext[3]) / 2
        for name, other in state["extents"].items():
            if name != obj and other[5] > ext[5] - 0.03 and other[0] < x + 0.02 and other[3] > x - 0.02 \
                    and other[1] < y + 0.015 and other[4] > y - 0.015:
                return True
        return False

    def _retry(self, ep):
        """The object is not in the hand: open it, go up, start over (the retreat counts the attempt)."""
        ep.go("retreat")
        return np.r_[0, 0, 0.5, 0, 0, 0, OPEN]

    @staticmethod
    def _place_point(state, target):
        """The point the object's centre goes above: a site's centre, or an object's top centre."""
        if target in state["sites"]:
            return np.asarray(state["sites"][target][:3])
        ext = np.asarray(state["extents"][target])
        return np.r_[(ext[:2] + ext[3:5]) / 2, ext[5]]


def load(config):
    return OraclePolicy(int(config.options.get("chunk") or DEFAULT_CHUNK))


ORACLE_MODEL = ModelSpec(
    name=NAME,
    load=load,
    adapters=[
        Adapter(
            contract=AdapterContract(
                platform=PLATFORM,
                action_space=ACTION_SPACE,
                action_dim=7,
                cameras={},
                state={k: STATE_SIZES[k] for k in ("eef_position", "eef_quaternion_xyzw", "gripper_qpos")},
                chunk_size=DEFAULT_CHUNK,
            ),
            encode=encode,
            decode=decode,
        )
    ],
    capabilities=Capabilities(actions=True, privileged_state=True),
    configure=_configure,
    options=(Option("chunk", "int", DEFAULT_CHUNK, help="Actions per chunk (the policy replans after each)."),),
    description="scripted reference policy (not a model): reads privileged simulator state (object poses, "
                "the BDDL goal), no images; solves pick-and-place, drawer, stove and push tasks",
)
