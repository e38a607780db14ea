"""Boundary checks. Each collects *every* problem and raises one typed error.

* the model service checks each request against its adapter contract before the model
  sees it (:func:`validate_request`: the observation, the seed, the per-request options);
* the client checks each action chunk against the platform's control before anything
  executes it (:func:`validate_actions`), and both sides check candidate actions the same
  way before a model sees them (:func:`validate_candidates`);
* the service checks prediction extras against declared capabilities
  (:func:`validate_prediction`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import attrs
import numpy as np

from .contracts import AdapterContract, Capabilities, ControlSpec, Observation, ObservationSpec, PredictRequest, Prediction
from .errors import ActionError, CapabilityError, ObservationError, PredictionError
from .specs import Option

_BOUND_TOL = 1e-5
#: state beyond this turns into inf in the float32 most models compute in
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT64 = 2**63
_MAX_TEXT = 4096  # characters of a per-request text option


def _describe(x) -> str:
    if isinstance(x, np.ndarray):
        return f"array {x.dtype} {tuple(x.shape)}"
    return type(x).__name__


def _check_images(images, wanted: Mapping[str, Optional[tuple]], problems: List[str], strict: bool) -> None:
    if not isinstance(images, Mapping):
        problems.append(f"images must be a mapping of camera role to array, got {type(images).__name__}")
        return
    for role, size in wanted.items():
        if role not in images:
            problems.append(f"camera {role!r} is missing (have: {sorted(images) or 'none'})")
            continue
        img = images[role]
        if not isinstance(img, np.ndarray):
            problems.append(f"camera {role!r}: expected an HxWx3 uint8 array, got {_describe(img)}")
            continue
        if img.dtype != np.uint8:
            problems.append(f"camera {role!r}: dtype must be uint8, got {img.dtype}")
        if img.ndim != 3 or img.shape[-1] != 3 or 0 in img.shape:
            problems.append(f"camera {role!r}: shape must be (H, W, 3), got {tuple(img.shape)}")
        elif size is not None and tuple(img.shape[:2]) != tuple(size):
            problems.append(f"camera {role!r}: size must be {size[0]}x{size[1]} (HxW), got {img.shape[0]}x{img.shape[1]}")
    if strict:
        for role in images:
            if role not in wanted:
                problems.append(f"camera {role!r} is not in the contract (expected: {sorted(wanted)})")


def _check_state(state, wanted: Mapping[str, int], problems: List[str], strict: bool) -> None:
    if not isinstance(state, Mapping):
        problems.append(f"state must be a mapping of name to 1-D array, got {type(state).__name__}")
        return
    for name, size in wanted.items():
        if name not in state:
            problems.append(f"state {name!r} is missing (have: {sorted(state) or 'none'})")
            continue
        vec = state[name]
        if not isinstance(vec, np.ndarray):
            problems.append(f"state {name!r}: expected a 1-D numeric array, got {_describe(vec)}")
            continue
        if vec.dtype.kind not in "iuf":
            problems.append(f"state {name!r}: dtype must be numeric, got {vec.dtype}")
            continue
        if vec.ndim != 1 or vec.shape[0] != size:
            problems.append(f"state {name!r}: shape must be ({size},), got {tuple(vec.shape)}")
        if vec.dtype.kind == "f" and not np.isfinite(vec).all():
            problems.append(f"state {name!r}: contains NaN or inf at {np.flatnonzero(~np.isfinite(vec)).tolist()[:10]}")
        elif vec.dtype.kind == "f" and vec.dtype.itemsize > 4 and (np.abs(vec) > _FLOAT32_MAX).any():
            problems.append(f"state {name!r}: values beyond the float32 range (|x| > 3.4e38) at "
                            f"{np.flatnonzero(np.abs(vec) > _FLOAT32_MAX).tolist()[:10]}")
    if strict:
        for name in state:
            if name not in wanted:
                problems.append(f"state {name!r} is not in the contract (expected: {sorted(wanted)})")


def _check_instruction(instruction, problems: List[str]) -> None:
    if not isinstance(instruction, str):
        problems.append(f"instruction must be a string, got {type(instruction).__name__}")
    elif not instruction.strip():
        problems.append("instruction is empty")


def _brief(value: Any) -> str:
    """A short description of a client's value: never echo unbounded data."""
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, (bool, int, float, np.number, type(None))):
        return repr(value)[:40]
    return type(value).__name__


def _is_index(value: Any) -> bool:
    """A non-negative integer that fits int64 (seeds, step counts)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= value < _INT64


def _check_step(step, problems: List[str]) -> None:
    if not _is_index(step):
        problems.append(f"step must be a non-negative integer, got {_brief(step)}")


def _observation_problems(obs: Observation, contract: AdapterContract, instruction: Optional[str]) -> List[str]:
    if not isinstance(obs, Observation):
        raise ObservationError([f"expected an Observation, got {type(obs).__name__}"])
    problems: List[str] = []
    _check_images(obs.images, contract.cameras, problems, strict=True)
    _check_state(obs.state, contract.state, problems, strict=True)
    _check_instruction(obs.instruction if instruction is None else instruction, problems)
    _check_step(obs.step, problems)
    return problems


def validate_observation(obs: Observation, contract: AdapterContract, *, instruction: Optional[str] = None) -> None:
    """Raise :class:`ObservationError` unless ``obs`` holds exactly what ``contract`` needs.

    ``instruction`` (a request's override) replaces the observation's for the check."""
    problems = _observation_problems(obs, contract, instruction)
    if problems:
        raise ObservationError(problems, context=f"for {contract.platform} adapter")


def _option_problem(opt: Option, value: Any) -> Optional[str]:
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if opt.type == "bool":
        ok = isinstance(value, (bool, np.bool_))
    elif opt.type == "int":
        ok = number and isinstance(value, (int, np.integer)) and -_INT64 <= value < _INT64
    elif opt.type == "float":
        ok = number and bool(np.isfinite(value))
    elif opt.type == "choice":
        ok = isinstance(value, (str, int, float)) and value in opt.choices
    else:  # str, path
        ok = isinstance(value, str) and len(value) <= _MAX_TEXT
    if ok and opt.choices and opt.type != "choice" and value not in opt.choices:
        return f"option {opt.dest!r} must be one of {', '.join(map(str, opt.choices))}, got {_brief(value)}"
    if ok:
        return None
    want = {"bool": "true or false", "int": "an integer", "float": "a finite number",
            "choice": f"one of {', '.join(map(str, opt.choices))}"}.get(opt.type, f"text of at most {_MAX_TEXT} characters")
    return f"option {opt.dest!r} must be {want}, got {_brief(value)}"


def request_options(options: Sequence[Option]) -> Dict[str, Option]:
    """The per-request options among ``options``, by the name they travel under."""
    return {o.dest: o for o in options if not o.deployment}


def _request_problems(request: PredictRequest, declared: Mapping[str, Option]) -> List[str]:
    problems: List[str] = []
    if request.seed is not None and not _is_index(request.seed):
        problems.append(f"seed must be a non-negative integer below 2**63, got {_brief(request.seed)}")
    for key, value in request.options.items():
        opt = declared.get(key) if isinstance(key, str) else None
        if opt is None:
            problems.append(f"option {_brief(key)} is not a per-request option of this model "
                            f"(it has: {', '.join(sorted(declared)) or 'none'})")
        elif value is not None:
            values = value if opt.multiple and isinstance(value, (list, tuple)) else [value]
            problems += filter(None, (_option_problem(opt, v) for v in values))
        if len(problems) > 20:
            break
    return problems


def validate_request(request: PredictRequest, contract: AdapterContract, options: Mapping[str, Option]) -> None:
    """Raise :class:`ObservationError` unless all of ``request`` that reaches a model is as
    declared: the observation (as :func:`validate_observation`), the seed, and only the
    per-request ``options`` (:func:`request_options` of the model's), of their types."""
    if not isinstance(request, PredictRequest):
        raise ObservationError([f"expected a PredictRequest, got {type(request).__name__}"])
    problems = _observation_problems(request.observation, contract, request.instruction)
    problems += _request_problems(request, options)
    if problems:
        raise ObservationError(problems, context=f"request for {contract.platform} adapter")


def check_privileged(request: PredictRequest, capabilities: Capabilities, model: str) -> None:
    """Privileged simulator state reaches only a model that declares ``privileged_state``
    (checked on both ends of the boundary): ``CapabilityError`` otherwise, nothing sent."""
    if request.privileged is not None and not capabilities.privileged_state:
        raise CapabilityError(
            f"model {model!r} does not declare the privileged_state capability: it may not receive the "
            "simulator's privileged state (PredictRequest.privileged); only reference policies declare it"
        )


def check_observation_spec(obs: Observation, spec: ObservationSpec) -> None:
    """Raise :class:`ObservationError` unless a platform's observation matches its own spec."""
    problems: List[str] = []
    if not isinstance(obs, Observation):
        raise ObservationError([f"expected an Observation, got {type(obs).__name__}"])
    _check_images(obs.images, spec.cameras, problems, strict=True)
    _check_state(obs.state, spec.state, problems, strict=True)
    _check_instruction(obs.instruction, problems)
    _check_step(obs.step, problems)
    if problems:
        raise ObservationError(problems, context="against the platform's observation spec")


_bound_arrays: dict = {}


def _bounds(control: ControlSpec) -> tuple:
    """float32 (low - tol, high + tol), built once per distinct bounds."""
    key = (control.low, control.high)
    cached = _bound_arrays.get(key)
    if cached is None:
        cached = tuple(
            None if b is None else np.asarray(b, dtype=np.float32) + sign * _BOUND_TOL
            for b, sign in ((control.low, -1), (control.high, 1))
        )
        if len(_bound_arrays) < 256:
            _bound_arrays[key] = cached
    return cached


def validate_actions(actions, control: ControlSpec, *, chunk_size: Optional[int] = None) -> np.ndarray:
    """Return ``actions`` as float32 ``[T, D]`` or raise :class:`ActionError`; never partially."""
    problems: List[str] = []
    if not isinstance(actions, np.ndarray):
        raise ActionError([f"expected a [T, {control.action_dim}] float array, got {_describe(actions)}"])
    if actions.dtype.kind != "f":
        problems.append(f"dtype must be float, got {actions.dtype}")
    if actions.ndim != 2:
        problems.append(f"must be 2-D [T, D], got shape {tuple(actions.shape)}")
        raise ActionError(problems, context=control.action_space)
    t, d = actions.shape
    if d != control.action_dim:
        problems.append(f"action dim must be {control.action_dim} ({', '.join(control.action_names)}), got {d}")
    if t == 0:
        problems.append("chunk is empty")
    elif t < control.chunk_min or (control.chunk_max is not None and t > control.chunk_max):
        problems.append(f"chunk length {t} outside the platform's bounds [{control.chunk_min}, {control.chunk_max}]")
    if chunk_size is not None and t != chunk_size:
        problems.append(f"chunk length must be {chunk_size} (the model's declared chunk size), got {t}")
    if problems:
        raise ActionError(problems, context=control.action_space)
    arr = actions.astype(np.float32, copy=False)
    low, high = _bounds(control)
    # the common case in one pass per check; the detailed report only when something is off
    if np.isfinite(arr).all() and (low is None or (arr >= low).all()) and (high is None or (arr <= high).all()):
        return arr
    finite = np.isfinite(arr)
    if not finite.all():
        bad = np.argwhere(~finite)[:5].tolist()
        problems.append(f"contains NaN or inf at [step, dim] {bad}")
    for name, bound, cmp in (("low", control.low, np.less), ("high", control.high, np.greater)):
        if bound is None:
            continue
        b = np.asarray(bound, dtype=np.float32)
        margin = -_BOUND_TOL if name == "low" else _BOUND_TOL
        out = cmp(arr, b + margin) & finite
        if out.any():
            steps, dims = np.nonzero(out)
            shown = ", ".join(
                f"[{s}, {control.action_names[k]}]={arr[s, k]:.4g}" for s, k in list(zip(steps, dims))[:5]
            )
            problems.append(f"{int(out.sum())} value(s) beyond the {name} bound: {shown}")
    if problems:
        raise ActionError(problems, context=control.action_space)
    return arr


def validate_candidates(candidates, control: ControlSpec, contract: AdapterContract) -> np.ndarray:
    """Candidate actions are checked like a chunk to execute (same control, same bounds) and
    must be the model's chunk; float32 ``[T, D]`` or :class:`ActionError`."""
    want = (contract.chunk_size, control.action_dim)
    if not isinstance(candidates, np.ndarray) or candidates.shape != want:
        raise ActionError([f"candidate_actions must be a float array of shape {want} (the model's chunk), "
                           f"got {_describe(candidates)}"], context=control.action_space)
    try:
        return validate_actions(candidates, control, chunk_size=contract.chunk_size)
    except ActionError as exc:
        raise ActionError(exc.problems, context=f"candidate_actions for {control.action_space}") from None


def validate_prefix(request: PredictRequest, capabilities: Capabilities, control: Optional[ControlSpec],
                    contract: AdapterContract, model: str) -> Optional[np.ndarray]:
    """An action prefix (``--execution rtc``) goes only to a model that declares
    ``action_prefix`` (refused first: ``control`` may be None then), and is checked like
    actions to execute (control, bounds), at most the model's chunk long: float32
    ``[d, D]``, or a typed error with nothing sent."""
    prefix = request.action_prefix
    if prefix is None:
        return None
    if not capabilities.action_prefix:
        raise CapabilityError(
            f"model {model!r} does not declare the action_prefix capability: it cannot condition on the actions "
            "executing while it computes (--execution rtc); use --execution async or hold, or a model that declares it"
        )
    if not isinstance(prefix, np.ndarray) or prefix.ndim != 2 or not 1 <= len(prefix) <= contract.chunk_size:
        raise ActionError([f"action_prefix must be a float array [d, {control.action_dim}] with 1 <= d <= "
                           f"{contract.chunk_size} (the model's chunk), got {_describe(prefix)}"],
                          context=control.action_space)
    try:
        return validate_actions(prefix, attrs.evolve(control, chunk_min=1, chunk_max=None))
    except ActionError as exc:
        raise ActionError(exc.problems, context=f"action_prefix for {control.action_space}") from None


def check_prefix_kept(pred: Prediction, request: PredictRequest) -> None:
    """A model given an action prefix returns a chunk that starts with it (those actions
    are already executing)."""
    prefix = request.action_prefix
    if prefix is None:
        return
    head = pred.actions[: len(prefix)]
    if head.shape != prefix.shape or not np.allclose(head, prefix, atol=1e-4):
        raise PredictionError([f"the chunk must start with the {len(prefix)} actions of action_prefix (they execute "
                               f"while it is computed), its first actions are {np.round(head, 4).tolist()}"])


def validate_prediction(pred: Prediction, capabilities: Capabilities, contract: AdapterContract) -> None:
    """Server-side: a prediction carries only the extras its model declares, well formed."""
    problems: List[str] = []
    if not isinstance(pred, Prediction):
        raise PredictionError([f"decode must return a Prediction, got {type(pred).__name__}"])
    extras = (
        ("future_observations", pred.future_observations, capabilities.future_observations or capabilities.action_conditioned_futures),
        ("values", pred.values, capabilities.values),
        ("world_features", pred.world_features, capabilities.world_features),
    )
    for name, value, declared in extras:
        if value is not None and not declared:
            problems.append(f"{name} returned but not declared in the model's capabilities")
    for role, img in (pred.future_observations or {}).items():
        if contract.future_cameras and role not in contract.future_cameras:
            problems.append(f"future camera {role!r} is not among {list(contract.future_cameras)}")
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim not in (3, 4) or img.shape[-1] != 3:
            problems.append(f"future {role!r}: expected uint8 HxWx3 or KxHxWx3, got {_describe(img)}")
    if pred.values is not None:
        v = pred.values
        if not isinstance(v, np.ndarray) or v.dtype.kind != "f" or v.ndim != 1 or not np.isfinite(v).all():
            problems.append(f"values must be a finite float vector, got {_describe(v)}")
    for name, feat in (pred.world_features or {}).items():
        if not isinstance(feat, np.ndarray) or feat.dtype.kind not in "biuf":
            problems.append(f"world feature {name!r} must be a numeric array, got {_describe(feat)}")
    if problems:
        raise PredictionError(problems, context=contract.platform)


__all__ = [
    "validate_observation",
    "validate_request",
    "request_options",
    "check_observation_spec",
    "validate_actions",
    "validate_candidates",
    "validate_prefix",
    "check_prefix_kept",
    "validate_prediction",
]
