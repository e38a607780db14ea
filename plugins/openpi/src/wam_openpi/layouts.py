"""openpi's request keys for LIBERO and RoboTwin (ALOHA), both ways.

Each layout turns our physical observation into the request openpi's clients send for
that robot (``request``: what ``openpi-remote`` sends to a policy server) and back
(``observation``: what ``wam serve --protocol openpi`` does with such a request;
:func:`layout_for` finds these, and those other plugins register).

LIBERO, as openpi's ``examples/libero/main.py`` builds it (policy side:
``src/openpi/policies/libero_policy.py``): ``observation/image`` (agentview) and
``observation/wrist_image`` rotated 180 degrees from robosuite's bottom-up render
(``[::-1, ::-1]``; our images are already flipped vertically, so one more left-right flip)
and resized with padding to 224x224; ``observation/state`` the 8 numbers eef position,
axis-angle of the eef quaternion (robosuite's ``quat2axisangle``), gripper qpos;
``prompt``. Actions: ``[T, 7]`` LIBERO OSC deltas, as ``LiberoOutputs`` returns them.

RoboTwin, as RoboTwin 2.0's own openpi policy builds it (``policy/pi0/pi_model.py``,
``deploy_policy.py`` of RoboTwin-Platform/RoboTwin) in openpi's ALOHA keys
(``src/openpi/policies/aloha_policy.py``): ``images`` a map ``cam_high`` (head),
``cam_left_wrist``, ``cam_right_wrist`` of CHW uint8 images, ``state`` the 14-D
``joint_action.vector``, ``prompt``. Actions: ``[T, 14]`` qpos, the first 14 of
``AlohaOutputs``. Served (``wam serve --protocol openpi``), the layout takes what openpi's
``AlohaInputs`` takes: any of ``cam_high``, ``cam_low``, ``cam_left_wrist``,
``cam_right_wrist`` (``EXPECTED_CAMERAS``; another name is refused), ``cam_high`` always (it
"assume[s] that base image always exists"), a missing wrist camera replaced by a black image
the size of ``cam_high`` (``np.zeros_like(base_image)``), ``cam_low`` read by no input of the
policy, so ignored; so openpi's real ALOHA client (``examples/aloha_real/env.py``: all four
cameras at 224x224, no prompt) is served. A missing prompt is the server's default prompt
(``wam serve --default-prompt``, as openpi's ``InjectDefaultPrompt``), else refused.
"""

from __future__ import annotations

import math
from importlib import metadata
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from wam_libero.spec import ACTION_SPACE as LIBERO_ACTION_SPACE, STATE_SIZES as LIBERO_STATE
from wam_robotwin.spec import ACTION_SPACE as ROBOTWIN_ACTION_SPACE
from wamcore import AdapterContract, ConfigurationError, Observation
from wamcore.specs import normalize_id

from .generic import PROMPT, GenericLayout, Layout, check_keys, raise_problems


def resize_with_pad(image: np.ndarray, size: int) -> np.ndarray:
    """``image`` (HxWx3 uint8) fitted into ``size`` x ``size``: scaled with PIL's bilinear filter
    keeping its aspect ratio, centred on black, as openpi-client's
    ``image_tools.resize_with_pad`` (tf.image.resize_with_pad) does; unchanged when it fits."""
    h, w = image.shape[:2]
    if (h, w) == (size, size):
        return image
    from PIL import Image

    ratio = max(w / size, h / size)
    rh, rw = int(h / ratio), int(w / ratio)
    resized = np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((rw, rh), resample=Image.BILINEAR))
    out = np.zeros((size, size, image.shape[2]), dtype=image.dtype)
    top, left = max(0, int((size - rh) / 2)), max(0, int((size - rw) / 2))
    out[top:top + rh, left:left + rw] = resized
    return out


def quat_to_axis_angle(quat_xyzw: np.ndarray) -> np.ndarray:
    """robosuite's ``quat2axisangle`` (what openpi's LIBERO client sends), without changing its input."""
    q = np.asarray(quat_xyzw, dtype=np.float64)
    w = min(max(float(q[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return (q[:3] * 2.0 * math.acos(w)) / den


def axis_angle_to_quat(axis_angle: np.ndarray) -> np.ndarray:
    """The unit quaternion (x, y, z, w) that :func:`quat_to_axis_angle` maps to ``axis_angle``."""
    a = np.asarray(axis_angle, dtype=np.float64)
    angle = float(np.linalg.norm(a))
    if not math.isfinite(angle):
        return np.full(4, np.nan)  # validation reports it
    if math.isclose(angle, 0.0):
        return np.array([0.0, 0.0, 0.0, 1.0])
    return np.concatenate([a / angle * math.sin(angle / 2.0), [math.cos(angle / 2.0)]])


def _describe(value: Any) -> str:
    return f"array {value.dtype} {tuple(value.shape)}" if isinstance(value, np.ndarray) else type(value).__name__


def _vector(message: Mapping, key: str, n: int, what: str, problems: List[str]) -> Optional[np.ndarray]:
    value = message[key]
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf" and value.shape == (n,):
        return value.astype(np.float64)
    problems.append(f"{key!r} must be {n} numbers ({what}), got {_describe(value)}")
    return None


def _size(contract: AdapterContract, role: str) -> str:
    """HxW the model wants for ``role`` (openpi's LIBERO example resizes to 224: its --args.resize-size)."""
    size = contract.cameras.get(role)
    return "HxW" if size is None else f"{size[0]}x{size[1]}"


class _Layout:
    """What the layouts share: ``openpi-remote``'s contract, the check of a served model's
    contract, the check of a server's metadata."""

    name: str
    platform: str
    action_space: str
    action_dim: int
    cameras: Dict[str, str]  # our camera role -> openpi's key
    state_sizes: Dict[str, int]  # the state vectors openpi's keys carry

    def contract(self, chunk: int) -> AdapterContract:
        return AdapterContract(platform=self.platform, action_space=self.action_space, action_dim=self.action_dim,
                               cameras={role: None for role in self.cameras}, state=dict(self.state_sizes),
                               chunk_size=chunk)

    def check(self, contract: AdapterContract) -> None:
        missing = [f"camera {c!r}" for c in contract.cameras if c not in self.cameras]
        missing += [f"state {s!r}" for s in contract.state if s not in self.state_sizes]
        if missing:
            raise ConfigurationError(
                f"model's {contract.platform} adapter needs {', '.join(missing)}, which openpi's {self.name} keys do not "
                f"carry (they carry cameras {', '.join(self.cameras)} and state {', '.join(self.state_sizes)})"
            )

    def check_metadata(self, metadata: Mapping[str, Any], chunk: int) -> List[str]:
        """What a wamcore server's metadata (``wam serve --protocol openpi``) says against this
        layout; openpi's own servers send their config's ``policy_metadata`` (LIBERO: nothing)."""
        ours = metadata.get("wamcore")
        if not isinstance(ours, Mapping):
            return []
        problems = []
        if ours.get("layout") != self.name:
            problems.append(f"it serves openpi's {ours.get('layout')!r} keys, not {self.name!r}")
        if ours.get("action_space") != self.action_space:
            problems.append(f"its actions are {ours.get('action_space')!r}, not {self.action_space!r}")
        served = ours.get("chunk_size")
        if isinstance(served, int) and served < chunk:
            problems.append(f"it answers {served} actions per request, fewer than the {chunk} to execute (--openpi-chunk)")
        return problems


class LiberoLayout(_Layout):
    """openpi's LIBERO example keys."""

    name = "libero"
    platform = "libero"
    action_space = LIBERO_ACTION_SPACE
    action_dim = 7
    default_chunk = 5  # examples/libero/main.py replan_steps
    default_image_size = 224  # examples/libero/main.py resize_size
    IMAGE, WRIST, STATE = "observation/image", "observation/wrist_image", "observation/state"
    cameras = {"primary": IMAGE, "wrist": WRIST}
    state_sizes = {name: LIBERO_STATE[name] for name in ("eef_position", "eef_quaternion_xyzw", "gripper_qpos")}

    def request(self, obs: Observation, prompt: str, image_size: int) -> Dict[str, Any]:
        def image(role):
            rotated = obs.images[role][:, ::-1]  # our images are upright: a left-right flip makes the 180-degree turn
            return np.ascontiguousarray(resize_with_pad(rotated, image_size) if image_size else rotated)

        s = obs.state
        state = np.concatenate([s["eef_position"], quat_to_axis_angle(s["eef_quaternion_xyzw"]), s["gripper_qpos"]])
        return {self.IMAGE: image("primary"), self.WRIST: image("wrist"), self.STATE: state, PROMPT: prompt}

    def keys(self, contract: AdapterContract) -> Dict[str, str]:
        return {
            self.IMAGE: f"agentview camera, {_size(contract, 'primary')}x3 uint8, rotated 180 degrees from robosuite's render",
            self.WRIST: f"wrist camera, {_size(contract, 'wrist')}x3 uint8, rotated the same way",
            self.STATE: "8 numbers: eef position (3), eef axis-angle (3), gripper qpos (2)",
            PROMPT: "the task instruction (str)",
        }

    def observation(self, message: Mapping[str, Any], contract: AdapterContract) -> Observation:
        raise_problems(check_keys(message, self.keys(contract)), self.name)
        problems: List[str] = []
        s = _vector(message, self.STATE, 8, "eef position, eef axis-angle, gripper qpos", problems)
        raise_problems(problems, self.name)
        images = {}
        for role, key in self.cameras.items():
            img = message[key]
            images[role] = np.ascontiguousarray(img[:, ::-1]) if isinstance(img, np.ndarray) and img.ndim >= 2 else img
        state = {"eef_position": s[0:3], "eef_quaternion_xyzw": axis_angle_to_quat(s[3:6]), "gripper_qpos": s[6:8]}
        return Observation(images=images, state=state, instruction=message[PROMPT]).select(contract.cameras, contract.state)

    def check_metadata(self, metadata: Mapping[str, Any], chunk: int) -> List[str]:
        problems = super().check_metadata(metadata, chunk)
        if "reset_pose" in metadata:
            problems.append("its metadata has a reset_pose: it serves an ALOHA policy, not a LIBERO one")
        return problems


class AlohaLayout(_Layout):
    """openpi's ALOHA keys, as RoboTwin 2.0's own openpi policy fills them."""

    name = "aloha"
    platform = "robotwin"
    action_space = ROBOTWIN_ACTION_SPACE
    action_dim = 14
    default_chunk = 50  # RoboTwin policy/pi0/deploy_policy.yml pi0_step
    default_image_size = 0  # RoboTwin's pi0 sends its 240x320 cameras as rendered
    IMAGES, STATE = "images", "state"
    cameras = {"head": "cam_high", "left_wrist": "cam_left_wrist", "right_wrist": "cam_right_wrist"}
    state_sizes = {"joint_targets": 14}
    #: openpi's AlohaInputs.EXPECTED_CAMERAS: every camera name a request may carry
    ACCEPTED = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")
    BASE = "cam_high"

    def request(self, obs: Observation, prompt: str, image_size: int) -> Dict[str, Any]:
        def chw(role):
            img = obs.images[role]
            return np.ascontiguousarray((resize_with_pad(img, image_size) if image_size else img).transpose(2, 0, 1))

        return {self.IMAGES: {name: chw(role) for role, name in self.cameras.items()},
                self.STATE: np.asarray(obs.state["joint_targets"]), PROMPT: prompt}

    def keys(self, contract: AdapterContract) -> Dict[str, str]:
        return {
            self.IMAGES: f"map of cam_high (head, required), cam_left_wrist, cam_right_wrist (missing: black, as "
                         f"openpi's AlohaInputs), cam_low (ignored, as there): 3x{_size(contract, 'head')} uint8",
            self.STATE: "14 numbers: RoboTwin's joint_action.vector (left 6 joints, left gripper, right 6, right gripper)",
            PROMPT: "the task instruction (str)",
        }

    def observation(self, message: Mapping[str, Any], contract: AdapterContract) -> Observation:
        raise_problems(check_keys(message, self.keys(contract)), self.name)
        problems: List[str] = []
        state = _vector(message, self.STATE, 14, "RoboTwin's joint_action.vector", problems)
        images = message[self.IMAGES]
        if isinstance(images, Mapping):
            unknown = sorted(repr(k)[:40] for k in images if k not in self.ACCEPTED)
            if unknown:
                problems.append(f"{self.IMAGES!r} has camera(s) {', '.join(unknown[:10])}; openpi's AlohaInputs accepts "
                                f"{', '.join(self.ACCEPTED)}")
            if self.BASE not in images:
                problems.append(f"{self.IMAGES!r} needs {self.BASE!r}, the base image openpi's AlohaInputs requires")
        else:
            problems.append(f"{self.IMAGES!r} must be a map of camera name to image, got {type(images).__name__}")
        raise_problems(problems, self.name)
        base = images[self.BASE]
        hwc = {}
        for role, name in self.cameras.items():
            img = images[name] if name in images else np.zeros_like(base)  # AlohaInputs: a black image, masked there
            hwc[role] = np.ascontiguousarray(img.transpose(1, 2, 0)) if isinstance(img, np.ndarray) and img.ndim == 3 else img
        return Observation(images=hwc, state={"joint_targets": state},
                           instruction=message[PROMPT]).select(contract.cameras, contract.state)


LIBERO = LiberoLayout()
ROBOTWIN = AlohaLayout()
LAYOUTS = {LIBERO.platform: LIBERO, ROBOTWIN.platform: ROBOTWIN}
#: where other plugins register the layout of their platform, under the platform's name
ENTRY_POINT_GROUP = "wamcore.openpi_layouts"


def layout_for(platform: str) -> Layout:
    """The layout of ``platform``'s openpi clients: ours (LIBERO, RoboTwin), else one another
    plugin registers in ``ENTRY_POINT_GROUP``, else the generic one."""
    wanted = normalize_id(platform)
    if wanted in LAYOUTS:
        return LAYOUTS[wanted]
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if normalize_id(ep.name) == wanted:
            return ep.load()
    return GenericLayout()


def check_served(contract: AdapterContract, **options) -> None:
    """``wam serve --protocol openpi``'s check before the model loads: its layout carries
    everything the model's adapter needs."""
    layout_for(contract.platform).check(contract)


__all__ = ["LiberoLayout", "AlohaLayout", "LIBERO", "ROBOTWIN", "LAYOUTS", "ENTRY_POINT_GROUP", "layout_for",
           "check_served", "resize_with_pad", "quat_to_axis_angle", "axis_angle_to_quat"]
