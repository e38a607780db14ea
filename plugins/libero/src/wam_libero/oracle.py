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
lift, carry, lower, release, then retreat and retry while the goal is not met), ``open``
(a drawer: hook its handle from the front, pull), ``turnon`` (the stove: push a fin of its
knob around), and ``on ... region`` for an object too flat to grasp (the plate: push it).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from wamcore import Adapter, AdapterContract, Capabilities, ModelSpec, Prediction
from wamcore.specs import Option

from .spec import ACTION_SPACE, PLATFORM, STATE_SIZES

NAME = "libero-oracle"
DEFAULT_CHUNK = 4
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
            "gripper": np.asarray(obs.state["gripper_qpos"], dtype=np.float64),
            "privileged": request.privileged}


def decode(native, request):
    actions, phase = native
    return Prediction(actions=np.asarray(actions, dtype=np.float32), info={"phase": phase})


def _toward(eef, target, gain=1.0):
    return np.clip((np.asarray(target) - eef) * gain / STEP_M, -1.0, 1.0)


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
        goal = state["goal"][0]
        kind = goal[0]
        if kind in ("on", "in"):
            action = self._pick_place(ep, eef, native["gripper"], state, goal[1], goal[2])
        else:
            raise NotImplementedError(f"{NAME} has no skill for the goal {goal}")
        ep.count += 1
        return np.tile(action, (self.chunk, 1)), ep.phase

    # ------------------------------------------------------------------ pick and place

    def _pick_place(self, ep, eef, gripper, state, obj, target):
        ext = np.asarray(state["extents"][obj])
        centre = (ext[:3] + ext[3:]) / 2
        size = ext[3:] - ext[:3]
        grasp = centre.copy()
        if size[1] > 0.075:  # wider than the open gripper along its closing axis: take the rim
            grasp[1] = ext[1] + 0.02 if eef[1] < centre[1] else ext[4] - 0.02
            grasp[2] = ext[5] - 0.015
        else:
            grasp[2] = max(ext[2] + 0.015, ext[5] - 0.03)
        place = self._place_point(state, target)
        g = OPEN
        if ep.phase == "start":
            ep.go("approach")
        if ep.phase == "approach":
            aim = grasp + [0, 0, 0.10]
            if np.linalg.norm((aim - eef)[:2]) < 0.01 and abs(aim[2] - eef[2]) < 0.02:
                ep.go("descend")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, OPEN]
        if ep.phase == "descend":
            if np.linalg.norm(grasp - eef) < 0.006 or (ep.still >= 2 and eef[2] - grasp[2] < 0.03):
                ep.go("grasp")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, OPEN]
        if ep.phase == "grasp":
            if ep.count * self.chunk >= GRIPPER_STEPS:
                ep.memo["lift_z"] = max(0.25 + ext[2], place[2] + size[2] + 0.12)
                ep.go("lift")
            else:
                return np.r_[_toward(eef, grasp), 0, 0, 0, CLOSE]
        g = CLOSE
        if ep.phase == "lift":
            aim = np.r_[eef[:2], ep.memo["lift_z"]]
            if eef[2] > ep.memo["lift_z"] - 0.03:
                ep.go("carry")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, g]
        offset = centre[:2] - eef[:2]  # where the object hangs under the hand
        if ep.phase == "carry":
            aim = np.r_[place[:2] - offset, ep.memo["lift_z"]]
            if np.linalg.norm(aim[:2] - eef[:2]) < 0.01:
                ep.go("lower")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, g]
        if ep.phase == "lower":
            drop = place[2] + 0.02 + (eef[2] - ext[2])
            aim = np.r_[place[:2] - offset, drop]
            if eef[2] - drop < 0.01 or ep.still >= 2:
                ep.go("release")
            else:
                return np.r_[_toward(eef, aim), 0, 0, 0, g]
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

    @staticmethod
    def _place_point(state, target):
        """The point the object's centre goes above: a site's centre, or an object's top centre."""
        if target in state["sites"]:
            return np.asarray(state["sites"][target][:3])
        ext = np.asarray(state["extents"][target])
        return np.r_[(ext[:2] + ext[3:5]) / 2, ext[5]]


def load(config):
    return OraclePolicy(int(config.options.get("chunk") or DEFAULT_CHUNK))


def _configure(spec, config):
    import attrs

    chunk = int(config.options.get("chunk") or DEFAULT_CHUNK)
    adapter = attrs.evolve(spec.adapters[0], contract=attrs.evolve(spec.adapters[0].contract, chunk_size=chunk))
    return attrs.evolve(spec, adapters=(adapter,), configure=None)


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
                state={k: STATE_SIZES[k] for k in ("eef_position", "gripper_qpos")},
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
