"""A RoboTwin 2.0 task as a wamcore :class:`~wamcore.specs.Env`, built through RoboTwin's own API.

Everything follows RoboTwin's ``script/eval_policy.py`` (RoboTwin-Platform/RoboTwin at c3ddfa8):

* the task is ``envs.<task>.<task>()`` and each episode is ``setup_demo(now_ep_num, seed,
  is_test=True, **task config)``; RoboTwin runs from its root, so every call into it runs with
  the checkout as working directory (and the caller's directory is restored after);
* a seed is used only if the scripted expert solves it (``play_once``, then ``plan_success and
  check_success()``); episode ``i`` of seed ``S`` is the ``i``-th accepted simulator seed from
  ``100000 * (1 + S)``; the expert's info fills the instruction templates
  (``description/utils/generate_episode_instructions.py``);
* one action is one ``take_action(a, action_type=...)`` call, ``"qpos"`` or, with the control
  ``robotwin.endpose.ee16.v1``, ``"ee"``: ``steps`` is RoboTwin's
  ``take_action_cnt``, ``max_steps`` its ``step_lim`` and native success its ``eval_success``,
  which RoboTwin sets inside ``take_action`` at the first physics step where ``check_success()``
  holds (``envs/_base_task.py``). wamcore's ``wam_act`` stops at ``steps >= max_steps``
  before calling ``step``, the same condition as the harness's
  ``while take_action_cnt < step_lim``.

Observations are rendered only when asked for (``observe``), once per chunk under ``wam_act``,
as FastWAM's ``skip_get_obs_within_replan`` does (in its vendored
``third_party/RoboTwin/script/eval_policy.py``): the upstream harness renders before
every action, which costs a full ray-traced render per action.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from wamcore import Observation, StepResult
from wamcore.errors import ActionError, ConfigurationError, EnvironmentFailure
from wamcore.validation import check_observation_spec, validate_actions

from .config import TaskSetup, load_setup
from .episodes import SEED_STRIDE, first_candidate_seed
from .install import import_failure, require_robotwin
from .observation import physical_observation
from .spec import EE_QUATERNION_TOLERANCE, ROBOTWIN_CONTROL, ROBOTWIN_EE_CONTROL

#: control -> RoboTwin's ``take_action`` action_type
ACTION_TYPES = {ROBOTWIN_CONTROL.action_space: "qpos", ROBOTWIN_EE_CONTROL.action_space: "ee"}
CONTROLS = {c.action_space: c for c in (ROBOTWIN_CONTROL, ROBOTWIN_EE_CONTROL)}

#: instruction candidates generated per episode (eval_policy.py passes its test_num, 100)
DESCRIPTIONS_PER_EPISODE = 100
#: expert-check errors (other than UnStableError) without an accepted seed in between after
#: which seeds are not the problem (upstream skips such seeds forever; a broken install would then never report)
MAX_EXPERT_ERRORS = 20
INSTRUCTION_TYPES = ("unseen", "seen")


@contextlib.contextmanager
def inside(root: Path):
    """Run RoboTwin code from its root (it opens ./assets and ./task_config relatively), with
    its prints (``take_action`` writes ``step: n / limit`` on every call) sent to stderr, so
    that stdout stays the caller's (``wam run --json``)."""
    previous = os.getcwd()
    os.chdir(root)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        os.chdir(previous)


def _under(path: Optional[str], root: Path) -> bool:
    return path is not None and Path(path).resolve().is_relative_to(root)


def import_robotwin(root: Path, task: str) -> Tuple[type, Callable, type]:
    """(task class, ``generate_episode_descriptions``, ``UnStableError``) from the checkout.

    RoboTwin's code is imported as top-level packages (``envs``, ``generate_episode_instructions``),
    so one process can hold one checkout only."""
    loaded = sys.modules.get("envs")
    if loaded is not None and not _under(getattr(loaded, "__file__", None), root):
        raise ConfigurationError(
            f"another 'envs' package ({getattr(loaded, '__file__', loaded)}) is already imported in this process; "
            f"RoboTwin from {root} needs its own process"
        )
    for path in (root, root / "description" / "utils"):
        if str(path) not in sys.path:
            sys.path.append(str(path))
    with inside(root):
        try:
            module = importlib.import_module(f"envs.{task}")
            unstable = importlib.import_module("envs.utils.create_actor").UnStableError
            describe = importlib.import_module("generate_episode_instructions").generate_episode_descriptions
        except ImportError as exc:
            raise import_failure(exc, root) from exc
    if not _under(getattr(module, "__file__", None), root):
        raise ConfigurationError(f"envs.{task} was imported from {module.__file__}, not from the checkout {root}")
    cls = getattr(module, task, None)
    if not isinstance(cls, type):
        raise ConfigurationError(f"{module.__file__} defines no task class {task!r}")
    return cls, describe, unstable


class RoboTwinEnv:
    """One RoboTwin task instance, reused across episodes (as upstream reuses it)."""

    def __init__(
        self,
        task: Any,
        setup: TaskSetup,
        *,
        describe: Callable[..., List[Dict[str, List[str]]]],
        unstable_error: type,
        instruction_type: str = "unseen",
        step_limit: Optional[int] = None,
        control: Optional[str] = None,
        seed_stride: int = SEED_STRIDE,
    ):
        if int(seed_stride) < 1:
            raise ConfigurationError(f"seed_stride must be >= 1, got {seed_stride}")
        if control is not None and control not in CONTROLS:
            raise ConfigurationError(f"control must be one of {sorted(CONTROLS)}, got {control!r}")
        if instruction_type not in INSTRUCTION_TYPES:
            raise ConfigurationError(f"instruction_type must be one of {INSTRUCTION_TYPES}, got {instruction_type!r}")
        if step_limit is not None and int(step_limit) < 1:
            raise ConfigurationError(f"step_limit must be >= 1, got {step_limit}")
        self.task = task
        self.setup = setup
        self.control = CONTROLS[control or ROBOTWIN_CONTROL.action_space]
        self.action_type = ACTION_TYPES[self.control.action_space]
        self.observation_spec = setup.observation_spec
        self.max_steps = int(step_limit) if step_limit is not None else setup.step_limit
        self.instruction_type = instruction_type
        self.seed_stride = int(seed_stride)
        self.sim_seed: Optional[int] = None
        self._describe = describe
        self._unstable = unstable_error
        self._accepted: Dict[int, List[Tuple[int, dict]]] = {}
        self._next_candidate: Dict[int, int] = {}
        self._active = False
        self._finished = 0
        self._obs: Optional[Observation] = None

    # ------------------------------------------------------------------ episodes

    @property
    def steps(self) -> int:
        return int(self.task.take_action_cnt) if self._active else 0

    def reset(self, *, seed: Optional[int] = None, episode: int = 0) -> Observation:
        """Episode ``episode`` of upstream seed ``seed`` (its ``episode``-th expert-solved seed)."""
        base = 0 if seed is None else int(seed)
        self._end_episode()
        sim_seed, info = self._accepted_seed(base, int(episode))
        with inside(self.setup.root):
            self.task.setup_demo(now_ep_num=int(episode), seed=sim_seed, is_test=True, **self.setup.demo_args)
            self._active = True
            self.task.step_lim = self.max_steps
            self.task.set_instruction(instruction=self._instruction(sim_seed, info))
        self.sim_seed = sim_seed
        self._obs = None
        return self.observe()

    def _accepted_seed(self, base: int, episode: int) -> Tuple[int, dict]:
        if episode < 0:
            raise ConfigurationError(f"episode index must be >= 0, got {episode}")
        accepted = self._accepted.setdefault(base, [])
        errors: List[str] = []
        while len(accepted) <= episode:
            candidate = self._next_candidate.get(base, first_candidate_seed(base, self.seed_stride))
            self._next_candidate[base] = candidate + 1
            info, error = self._expert_check(candidate, len(accepted))
            if info is not None:
                accepted.append((candidate, info))
                errors.clear()
            elif error is not None:
                errors.append(f"seed {candidate}: {error}")
                if len(errors) >= MAX_EXPERT_ERRORS:
                    raise EnvironmentFailure(
                        f"RoboTwin's expert check raised on {len(errors)} seeds since the last accepted one "
                        f"(an installation problem, not bad seeds); last: {errors[-1]}"
                    )
        return accepted[episode]

    def _expert_check(self, seed: int, episode: int) -> Tuple[Optional[dict], Optional[str]]:
        """(expert info, None) when the expert solves ``seed``; (None, error or None) otherwise.

        Like eval_policy.py, an unstable scene or any error skips the seed."""
        task = self.task
        with inside(self.setup.root):
            try:
                task.setup_demo(now_ep_num=episode, seed=seed, is_test=True, **self.setup.demo_args)
                played = task.play_once()
                solved = bool(task.plan_success and task.check_success())
                return (dict(played["info"]) if solved else None), None
            except self._unstable:
                return None, None
            except Exception as exc:  # upstream skips the seed on any error, so do we (counted)
                return None, f"{type(exc).__name__}: {exc}"
            finally:
                task.close_env()

    def _instruction(self, sim_seed: int, info: dict) -> str:
        """Upstream's instruction for the episode, made reproducible: the generator draws from
        Python's unseeded ``random``, so it runs under a state seeded with the simulator seed
        (and the caller's state is restored); the final pick uses ``np.random`` as upstream,
        seeded by ``setup_demo``."""
        saved = random.getstate()
        random.seed(sim_seed)
        try:
            results = self._describe(self.setup.task, [info], DESCRIPTIONS_PER_EPISODE)
        finally:
            random.setstate(saved)
        candidates = results[0].get(self.instruction_type) if results else None
        if not candidates:
            raise EnvironmentFailure(
                f"RoboTwin generated no {self.instruction_type!r} instruction for {self.setup.task} "
                f"with expert info {info} (description/task_instruction/{self.setup.task}.json)"
            )
        return str(np.random.choice(candidates))

    def _end_episode(self) -> None:
        if not self._active:
            return
        self._active = False
        self._obs = None
        self._finished += 1
        with inside(self.setup.root):
            self.task.close_env(clear_cache=self._finished % self.setup.clear_cache_freq == 0)

    # ------------------------------------------------------------------ control

    def observe(self) -> Observation:
        if not self._active:
            raise EnvironmentFailure("no RoboTwin episode is running: call reset() first")
        if self._obs is None:
            task = self.task
            with inside(self.setup.root):
                raw = task.get_obs()
                left = task.robot.get_left_arm_real_jointState()
                right = task.robot.get_right_arm_real_jointState()
            obs = physical_observation(
                raw, left_measured=left, right_measured=right,
                instruction=task.get_instruction(), step=task.take_action_cnt,
            )
            check_observation_spec(obs, self.observation_spec)
            self._obs = obs
        return self._obs

    def step(self, action: np.ndarray) -> StepResult:
        """Execute one action with ``take_action(a, action_type=self.action_type)``."""
        a = np.asarray(action)
        if a.ndim != 1:
            raise ActionError([f"step() executes one action of shape ({self.control.action_dim},), got {a.shape}"], context=self.control.action_space)
        row = validate_actions(a[None, :], self.control)[0]
        if self.action_type == "ee":
            _check_quaternions(row)
        if not self._active:
            raise EnvironmentFailure("no RoboTwin episode is running: call reset() first")
        task = self.task
        if task.eval_success or task.take_action_cnt >= self.max_steps:
            raise EnvironmentFailure(
                f"the episode is over (eval_success={bool(task.eval_success)}, take_action_cnt={task.take_action_cnt}, "
                f"step_lim={self.max_steps}); RoboTwin would ignore this action: reset() first"
            )
        before = int(task.take_action_cnt)
        self._obs = None
        with inside(self.setup.root):
            task.take_action(row.astype(np.float64), action_type=self.action_type)
        if int(task.take_action_cnt) != before + 1:
            raise EnvironmentFailure(f"take_action did not count the action (take_action_cnt {before} -> {task.take_action_cnt})")
        return StepResult(
            success=bool(task.eval_success),
            info={"sim_seed": self.sim_seed, "take_action_cnt": int(task.take_action_cnt), "step_lim": self.max_steps},
        )

    def hold_action(self) -> np.ndarray:
        """The action that keeps the robot where it is (``--realtime --execution hold``,
        ``async``, ``rtc``): both controls take absolute targets, so the current set-points
        (qpos14) or end-effector poses with the last commanded grippers (ee16)."""
        s = self.observe().state
        if self.action_type == "ee":
            parts = [s["left_eef_pose"], s["left_gripper"], s["right_eef_pose"], s["right_gripper"]]
            return np.concatenate(parts).astype(np.float32)
        return np.asarray(s["joint_targets"], dtype=np.float32)

    # ------------------------------------------------------------------ state

    def snapshot(self) -> Any:
        """Not supported: a bit-identical replay would need PhysX's solver and contact caches,
        the mplib/TOPP planners' state and RoboTwin's Python-side episode state (commanded
        gripper values, counters, light randomisation), none of which SAPIEN 3 or RoboTwin can
        save; restoring poses and joint states alone gives a different trajectory."""
        raise NotImplementedError("RoboTwin cannot restore its physics and planner state exactly")

    def restore(self, snapshot: Any) -> None:
        raise NotImplementedError("RoboTwin cannot restore its physics and planner state exactly")

    def close(self) -> None:
        self._end_episode()


def _check_quaternions(row: np.ndarray) -> None:
    norms = [float(np.linalg.norm(row[i : i + 4])) for i in (3, 11)]
    bad = [f"{side} quaternion has norm {n:.6g}" for side, n in zip(("left", "right"), norms)
           if abs(n - 1.0) > EE_QUATERNION_TOLERANCE]
    if bad:
        raise ActionError(bad + [f"an ee16 pose needs unit quaternions (within {EE_QUATERNION_TOLERANCE})"],
                          context=ROBOTWIN_EE_CONTROL.action_space)


def make_env(
    task: str,
    task_config: str = "demo_clean",
    robotwin_root: Optional[str] = None,
    instruction_type: str = "unseen",
    step_limit: Optional[int] = None,
    control: Optional[str] = None,
    seed_stride: int = SEED_STRIDE,
) -> RoboTwinEnv:
    """The platform's env factory (``PlatformSpec.make_env``): check the checkout, read its
    configs, import the task from it and build the env; ``control`` chooses the action type."""
    root = require_robotwin(robotwin_root)
    setup = load_setup(root, task, task_config)
    task_cls, describe, unstable = import_robotwin(root, task)
    with inside(root):
        instance = task_cls()
    return RoboTwinEnv(
        instance, setup, describe=describe, unstable_error=unstable,
        instruction_type=instruction_type, step_limit=step_limit, control=control, seed_stride=seed_stride,
    )
