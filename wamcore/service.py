"""Both ends of the model boundary, independent of transport.

:class:`ModelService` is the model side: it owns a loaded native model and its adapter,
and runs ``validate observation -> encode -> predict_native -> decode -> check extras``.
The RPC server wraps one; in-process mode calls it directly.

:class:`ModelClient` is the platform side: it checks the model's contract against the
platform once (at :meth:`ModelClient.bind`), sends only what the contract asks for, and
validates every returned action chunk before anyone can execute it. :class:`LocalModel`
is the in-process client (no serialization, no copies); ``wamcore.rpc.RemoteModel`` is the
one that talks to a worker.
"""

from __future__ import annotations

import time
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import attrs
import numpy as np

from .contracts import AdapterContract, ControlSpec, ModelInfo, ObservationSpec, PredictRequest, Prediction
from .errors import CapabilityError, ConfigurationError, IncompatiblePairError, PredictionError, WamError
from .hub import resolve_config
from .pairing import check_model_info
from .specs import ModelConfig, ModelSpec, PlatformSpec, resolve_callable
from .validation import (check_prefix_kept, check_privileged, request_options, validate_actions, validate_candidates,
                         validate_prediction, validate_prefix, validate_request)

DEFAULT_SESSION = "default"


def _ms(t0: float, t1: float) -> float:
    return round((t1 - t0) * 1000.0, 3)


def _declared_batch(native: Any) -> int:
    """The model's ``max_batch``, checked against what it implements (1: no batching)."""
    batch = getattr(native, "max_batch", None)
    if batch is None:
        return 1
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigurationError(f"{type(native).__name__}.max_batch must be a positive int, got {batch!r}")
    if batch > 1 and not callable(getattr(native, "predict_native_batch", None)):
        raise ConfigurationError(
            f"{type(native).__name__} declares max_batch={batch} but has no predict_native_batch(native_inputs, requests)"
        )
    return batch


_SCALARS = (str, int, float, bool)


def _plain_options(options: Mapping[str, Any]) -> dict:
    """The options as JSON scalars, and lists of them (``Option(multiple=True)``): what the
    model identity records."""
    out = {}
    for key, value in options.items():
        if isinstance(value, _SCALARS):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
            out[key] = list(value)
    return out


class ModelService:
    """A loaded model serving one platform through its adapter.

    ``platform`` gives the control whose bounds candidate actions are checked against
    (without it, the installed platform of that name); where neither is there, a request
    with candidates is refused."""

    def __init__(self, spec: ModelSpec, config: ModelConfig, native: Any = None, *,
                 platform: Optional[PlatformSpec] = None):
        config = attrs.evolve(config, options=spec.with_defaults(config.options))
        config, weights = resolve_config(spec, config)  # a named or hub checkpoint: fetched and verified
        self.spec = spec.resolve(config)
        self.config = config
        adapter = self.spec.adapter_for(config.platform)
        if adapter is None:
            raise IncompatiblePairError(
                f"Model {spec.name!r} has no adapter for platform {config.platform!r}; "
                f"it supports: {', '.join(self.spec.platforms) or 'none'}."
            )
        self.adapter = adapter
        self.contract: AdapterContract = adapter.contract
        self._platform = platform
        self._control: Optional[ControlSpec] = None  # of candidate actions and prefixes, found on first use
        self.native = native if native is not None else resolve_callable(self.spec.load)(config)
        self._sessions = bool(getattr(self.native, "uses_sessions", False))
        self._max_batch = _declared_batch(self.native)
        self._request_options = request_options(self.spec.options)
        self.info = ModelInfo(
            backend=self.spec.name,
            checkpoint=getattr(self.native, "checkpoint", None) or config.checkpoint,
            capabilities=self.spec.capabilities,
            contracts=(self.contract,),
            timeout_s=float(getattr(self.native, "timeout_s", None) or self.spec.timeout_s),
            device=getattr(self.native, "device", None),
            details={
                "predict_future": config.predict_future,
                "options": _plain_options(config.options),
                "neutral_options": sorted(o.dest for o in self.spec.options if not o.identity),
                **({"weights": dict(weights)} if weights else {}),
                **dict(getattr(self.native, "details", None) or {}),
            },
        )

    @property
    def uses_sessions(self) -> bool:
        """Whether the model keeps state per session (a worker then resets a dropped one)."""
        return self._sessions

    @property
    def max_batch(self) -> int:
        """How many requests one native call may take (1: the model does not batch)."""
        return self._max_batch

    def predict(self, request: PredictRequest, session: str = DEFAULT_SESSION) -> Prediction:
        native_in, timing = self._encode(request)
        t0 = time.perf_counter()
        if self._sessions:
            native_out = self.native.predict_native(native_in, request, session=session)
        else:
            native_out = self.native.predict_native(native_in, request)
        timing["model_ms"] = _ms(t0, time.perf_counter())
        return self._decode(native_out, request, timing)

    def predict_batch(self, items: Sequence[Tuple[PredictRequest, str]]) -> List[Union[Prediction, Exception]]:
        """Answer ``(request, session)`` pairs with one native call; one result per item.

        Each observation is validated on its own first: a bad one gets its own typed error
        and never reaches the model, and the others still run. An error of the batched
        call itself is the result of every item in it."""
        results: List[Union[Prediction, Exception, None]] = [None] * len(items)
        batch = []  # (index, native input, timing)
        for i, (request, _) in enumerate(items):
            try:
                batch.append((i, *self._encode(request)))
            except Exception as exc:  # typed by validation or the adapter; only this item fails
                results[i] = exc
        if not batch:
            return results  # type: ignore[return-value]
        requests = [items[i][0] for i, _, _ in batch]
        natives = [native for _, native, _ in batch]
        t0 = time.perf_counter()
        try:
            if self._sessions:
                outs = list(self.native.predict_native_batch(natives, requests, sessions=[items[i][1] for i, _, _ in batch]))
            else:
                outs = list(self.native.predict_native_batch(natives, requests))
            if len(outs) != len(batch):
                raise PredictionError([f"predict_native_batch returned {len(outs)} outputs for {len(batch)} inputs"])
        except Exception as exc:
            outs = [exc] * len(batch)
        model_ms = _ms(t0, time.perf_counter())
        for (i, _, timing), out, request in zip(batch, outs, requests):
            timing.update(model_ms=model_ms, batch_size=len(batch))
            try:
                if isinstance(out, Exception):
                    raise out
                results[i] = self._decode(out, request, timing)
            except Exception as exc:
                results[i] = exc
        return results  # type: ignore[return-value]

    def _encode(self, request: PredictRequest) -> Tuple[Any, dict]:
        """Validate the request (observation, seed, options), then the adapter's encode."""
        t0 = time.perf_counter()
        check_privileged(request, self.info.capabilities, self.spec.name)
        validate_request(request, self.contract, self._request_options)
        if request.candidate_actions is not None:
            request = attrs.evolve(request, candidate_actions=self._check_candidates(request.candidate_actions))
        if request.action_prefix is not None:  # the capability first: no control is needed to refuse it
            control = self._action_control() if self.info.capabilities.action_prefix else None
            request = attrs.evolve(request, action_prefix=validate_prefix(
                request, self.info.capabilities, control, self.contract, self.spec.name))
        t1 = time.perf_counter()
        native_in = self.adapter.encode(request)
        return native_in, {"validate_ms": _ms(t0, t1), "encode_ms": _ms(t1, time.perf_counter())}

    def _decode(self, native_out: Any, request: PredictRequest, timing: dict) -> Prediction:
        t0 = time.perf_counter()
        pred = self.adapter.decode(native_out, request)
        validate_prediction(pred, self.info.capabilities, self.contract)
        check_prefix_kept(pred, request)
        timing = {**pred.timing, **timing, "decode_ms": _ms(t0, time.perf_counter())}
        return pred.replace(timing=timing)

    def _check_candidates(self, candidates) -> np.ndarray:
        if not self.info.capabilities.action_conditioned_futures:
            raise CapabilityError(
                f"model {self.spec.name!r} does not declare action_conditioned_futures; "
                "it cannot predict the outcome of candidate actions"
            )
        return validate_candidates(candidates, self._action_control(), self.contract)

    def _action_control(self) -> ControlSpec:
        if self._control is None:
            platform = self._platform
            if platform is None:
                from .registry import default_registry  # the platform need not be installed where the model runs

                try:
                    platform = default_registry().platform(self.config.platform)
                except WamError:
                    platform = None
            controls = platform.controls if platform is not None else ()
            self._control = next((c for c in controls if c.action_space == self.contract.action_space), None)
            if self._control is None:
                raise CapabilityError(
                    f"actions sent to the model (candidates, an action prefix) cannot be checked against the bounds "
                    f"of control {self.contract.action_space!r} here: platform {self.config.platform!r} is not installed where the model runs; install its plugin there"
                )
        return self._control

    def reset(self, session: str = DEFAULT_SESSION) -> None:
        reset = getattr(self.native, "reset", None)
        if reset is None:
            return
        if self._sessions:
            reset(session=session)
        else:
            reset()

    def close(self) -> None:
        close = getattr(self.native, "close", None)
        if close is not None:
            close()


class ModelClient:
    """Platform side of the boundary. Subclasses implement ``_predict``/``_reset``/``close``."""

    info: ModelInfo
    contract: Optional[AdapterContract] = None
    control: Optional[ControlSpec] = None

    def bind(
        self,
        platform: PlatformSpec,
        observation: Optional[ObservationSpec] = None,
        options: Optional[Mapping[str, Any]] = None,
    ) -> "ModelClient":
        """Check the model's contract against the platform (once) and remember the control:
        the one the envs built with the platform ``options`` execute (``PlatformSpec.control_for``)."""
        control = platform.control_for(options)
        self.contract = check_model_info(self.info, platform, observation, control)
        self.control = control
        return self

    def predict(self, request: PredictRequest) -> Prediction:
        if self.contract is None or self.control is None:
            raise RuntimeError("bind() the model to a platform before predicting")
        check_privileged(request, self.info.capabilities, self.info.backend)
        obs = request.observation.select(self.contract.cameras, self.contract.state)
        changes: dict = {"observation": obs}
        if request.candidate_actions is not None:
            changes["candidate_actions"] = validate_candidates(request.candidate_actions, self.control, self.contract)
        if request.action_prefix is not None:
            changes["action_prefix"] = validate_prefix(request, self.info.capabilities, self.control, self.contract,
                                                       self.info.backend)
        request = attrs.evolve(request, **changes)
        pred = self._predict(request)
        actions = validate_actions(pred.actions, self.control, chunk_size=self.contract.chunk_size)
        return pred if actions is pred.actions else pred.replace(actions=actions)

    def reset(self) -> None:
        self._reset()

    def _predict(self, request: PredictRequest) -> Prediction:  # pragma: no cover - abstract
        raise NotImplementedError

    def _reset(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalModel(ModelClient):
    """In-process model: the same checks as over RPC, with no serialization."""

    def __init__(self, service: ModelService, session: str = DEFAULT_SESSION):
        self.service = service
        self.info = service.info
        self.session = session

    def _predict(self, request: PredictRequest) -> Prediction:
        return self.service.predict(request, session=self.session)

    def _reset(self) -> None:
        self.service.reset(self.session)

    def close(self) -> None:
        self.service.close()


__all__ = ["ModelService", "ModelClient", "LocalModel", "DEFAULT_SESSION"]
