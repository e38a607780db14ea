"""A content-addressed cache of typed predictions, and the model identity that keys it.

A prediction depends on the model (backend, checkpoint identity, pinned weight and
normalisation-statistics hashes, deployment options, capabilities, the adapter contract)
and on the request (the observation's bytes, instruction, seed, request options, candidate
actions). :func:`model_identity` is the first half, as a plain block that also goes into
every result (``wam run --json``, ``wam eval``'s config and summary, probe reports);
:func:`request_key` hashes both halves into the artifact's address.

On disk (``DIR/ab/<key>.wam`` and ``DIR/ab/<key>.json``): the ``.wam`` file is the
artifact, the wire codec's packing (never pickle) of the Prediction's wire form plus its
metadata; the ``.json`` sidecar repeats the metadata with the artifact's sha256, so
``wam artifacts ls`` reads no arrays and a modified artifact is detected before it is
used. Both are written atomically, the sidecar last: an artifact without one is
incomplete and never read.

:class:`CachedModel` wraps any bound :class:`~wamcore.service.ModelClient` (in-process,
spawned or borrowed worker): a request it has seen is answered from the store and never
reaches the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional

from . import __version__, wire
from .canonical import digest
from .contracts import AdapterContract, ModelInfo, PredictRequest, Prediction
from .errors import ArtifactError, ConfigurationError
from .service import ModelClient

ARTIFACT_TYPE = "wamcore.artifact"
ARTIFACT_VERSION = 1
PAYLOAD = ".wam"
SIDECAR = ".json"
#: details a model reports that name what it runs (pinned upstream code); with every
#: ``*sha256`` detail (weights, normalisation statistics) they are part of its identity
IDENTITY_DETAILS = ("upstream",)


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _pins(details: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Every ``*sha256`` entry of a model's details (nested ones by dotted path), except
    where it ran (``worker``)."""
    out: Dict[str, Any] = {}
    for key, value in details.items():
        path = f"{prefix}{key}"
        if key == "worker":
            continue
        if key.endswith("sha256") or (not prefix and key in IDENTITY_DETAILS):
            out[path] = value  # a mapping of them too (``weights_sha256: {file: hash}``)
        elif isinstance(value, Mapping):
            out.update(_pins(value, path + "."))
    return out


def model_identity(info: ModelInfo, contract: Optional[AdapterContract] = None) -> dict:
    """What decides a model's outputs, as plain JSON: backend, checkpoint identity, device
    (kernels differ in the last bits), pins (weights, normalisation statistics, upstream
    code), deployment options, capabilities, and the adapter contract it serves."""
    details = dict(info.details or {})
    neutral = set(details.get("neutral_options") or ())  # declared not to change outputs
    return _json({
        "backend": info.backend,
        "checkpoint": info.checkpoint,
        "device": info.device,
        "capabilities": info.capabilities.names(),
        "predict_future": bool(details.get("predict_future", False)),
        "options": {k: v for k, v in (details.get("options") or {}).items() if k not in neutral},
        "pins": _pins(details),
        "contract": None if contract is None else contract.to_wire(),
    })


def identity_digest(identity: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def request_key(identity_sha256: str, request: PredictRequest) -> str:
    """The artifact address of ``request`` to the model ``identity_sha256``."""
    return digest({
        "identity": identity_sha256,
        "observation": request.observation.to_wire(),
        "instruction": request.instruction,
        "seed": request.seed,
        "candidate_actions": request.candidate_actions,
        "options": dict(request.options),
    })


def identity_difference(recorded: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> str:
    """``'checkpoint: "A" there, "B" here; ...'`` for the (nested) fields that differ."""
    parts = []
    for key in sorted(set(recorded) | set(current)):
        a, b = recorded.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            parts.append(identity_difference(a, b, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key}: {json.dumps(a, default=str)} there, {json.dumps(b, default=str)} here")
    return "; ".join(parts)


class ArtifactStore:
    """Typed predictions by key under ``root``."""

    def __init__(self, root):
        self.root = Path(root)

    def _paths(self, key: str):
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ConfigurationError(f"{key!r} is not an artifact key (64 hex digits; `wam artifacts ls` lists them)")
        folder = self.root / key[:2]
        return folder / f"{key}{PAYLOAD}", folder / f"{key}{SIDECAR}"

    def resolve(self, prefix: str) -> str:
        """The one key that starts with ``prefix`` (what ``ls`` shows is enough to name it)."""
        matches = [m["key"] for m in self.metadata() if m["key"].startswith(prefix.lower())] if prefix else []
        if len(matches) != 1:
            what = "no artifact" if not matches else f"{len(matches)} artifacts"
            raise ConfigurationError(f"{what} in {self.root} start with {prefix!r}; `wam artifacts ls {self.root}` lists them")
        return matches[0]

    def get(self, key: str) -> Optional[Prediction]:
        """The stored prediction, or None when there is none; a stored one that does not
        match its recorded sha256 or key raises :class:`ArtifactError`."""
        payload_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            return None
        return Prediction.from_wire(self._verified(key, payload_path, meta)["prediction"])

    def load(self, key: str) -> dict:
        """The whole artifact (``key``, ``meta``, ``prediction`` wire dict), verified."""
        payload_path, meta_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
        except FileNotFoundError:
            raise ConfigurationError(f"no artifact {key} in {self.root}") from None
        return self._verified(key, payload_path, meta)

    def _verified(self, key: str, payload_path: Path, meta: Mapping[str, Any]) -> dict:
        fix = f"remove it with `wam artifacts gc {self.root}` (it is recomputed on the next run)"
        try:
            data = payload_path.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(f"artifact {key}: {payload_path} is missing but its sidecar is not; {fix}") from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != meta.get("sha256"):
            raise ArtifactError(
                f"artifact {key} was modified after it was written: {payload_path} has sha256 {actual[:16]}..., "
                f"its sidecar records {str(meta.get('sha256'))[:16]}...; {fix}"
            )
        artifact = wire.unpackb(data)
        if not isinstance(artifact, dict) or artifact.get("type") != ARTIFACT_TYPE or artifact.get("key") != key:
            raise ArtifactError(f"{payload_path} is not the artifact {key} (another key or format); {fix}")
        if artifact.get("v") != ARTIFACT_VERSION:
            raise ArtifactError(f"{payload_path} is artifact format v{artifact.get('v')}, this wamcore reads "
                                f"v{ARTIFACT_VERSION}; {fix}")
        return artifact

    def put(self, key: str, prediction: Prediction, meta: Mapping[str, Any]) -> dict:
        payload_path, meta_path = self._paths(key)
        meta = {"key": key, **_json(dict(meta)), "wamcore": __version__,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        data = wire.packb({"type": ARTIFACT_TYPE, "v": ARTIFACT_VERSION, "key": key, "meta": meta,
                           "prediction": prediction.to_wire()})
        sidecar = {**meta, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        payload_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(payload_path, data)
        _atomic_write(meta_path, (json.dumps(sidecar, indent=1, sort_keys=True) + "\n").encode())
        return sidecar

    def metadata(self) -> Iterator[dict]:
        """Every complete artifact's sidecar (not verified: ``load`` does that)."""
        if not self.root.is_dir():
            return
        for path in sorted(self.root.glob(f"??/*{SIDECAR}")):
            try:
                yield json.loads(path.read_text())
            except ValueError:
                yield {"key": path.stem, "broken": f"unreadable sidecar {path}"}

    def gc(self, *, older_than_s: Optional[float] = None, dry_run: bool = False) -> list:
        """Remove what cannot be used (modified artifacts, payloads without a sidecar,
        leftovers of interrupted writes) and, with ``older_than_s``, artifacts older than
        that. Returns ``(path, reason)`` for every file removed."""
        removed = []
        if not self.root.is_dir():
            return removed
        now = time.time()
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir() and len(p.name) == 2):
            for path in sorted(folder.iterdir()):
                reason = self._garbage(path, now, older_than_s)
                if reason is None:
                    continue
                targets = [path] if path.suffix != SIDECAR else [path, path.with_suffix(PAYLOAD)]
                for target in targets:
                    if target.exists():
                        removed.append((str(target), reason))
                        if not dry_run:
                            target.unlink()
        return removed

    def _garbage(self, path: Path, now: float, older_than_s: Optional[float]) -> Optional[str]:
        if path.name.endswith(".tmp"):
            return "interrupted write"
        if path.suffix == PAYLOAD:
            return None if path.with_suffix(SIDECAR).exists() else "no sidecar (incomplete)"
        if path.suffix != SIDECAR:
            return None
        try:
            self.load(path.stem)
        except (ArtifactError, ConfigurationError, ValueError) as exc:
            return f"invalid: {str(exc).split(';')[0]}"
        if older_than_s is not None and now - path.stat().st_mtime > older_than_s:
            return "older than asked"
        return None


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class CachedModel(ModelClient):
    """A bound client whose predictions go through an :class:`ArtifactStore`: a request
    already answered is read back and never reaches the model. ``hits``/``misses`` count
    them; ``misses`` is how often the model was called. ``episode`` (set by the caller,
    e.g. a probe's context and its reset seed) is recorded with each new artifact: where
    it came from, not part of its key."""

    def __init__(self, inner: ModelClient, store: ArtifactStore):
        if inner.contract is None:
            raise RuntimeError("bind() the model to a platform before caching it")
        service = getattr(inner, "service", None)
        if service is not None and service.uses_sessions:
            raise ConfigurationError(
                f"model {inner.info.backend!r} keeps state between predictions (uses_sessions): its outputs depend "
                "on more than the request, so they cannot be cached; drop --cache"
            )
        self.inner = inner
        self.store = store
        self.info, self.contract, self.control = inner.info, inner.contract, inner.control
        self.identity = model_identity(self.info, self.contract)
        self.identity_sha256 = identity_digest(self.identity)
        self.hits = 0
        self.misses = 0
        self.episode: Optional[dict] = None

    def _predict(self, request: PredictRequest) -> Prediction:
        key = request_key(self.identity_sha256, request)
        cached = self.store.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        prediction = self.inner.predict(request)
        self.misses += 1
        self.store.put(key, prediction, {
            "identity": self.identity,
            "identity_sha256": self.identity_sha256,
            "request": {
                "observation_sha256": digest(request.observation.to_wire()),
                "instruction": request.effective_instruction,
                "seed": request.seed,
                "options": dict(request.options),
                "candidate_actions": request.candidate_actions is not None,
            },
            **({"episode": dict(self.episode)} if self.episode else {}),
        })
        return prediction

    def stats(self) -> dict:
        return {"dir": str(self.store.root), "hits": self.hits, "misses": self.misses}

    def _reset(self) -> None:
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()


__all__ = [
    "ArtifactError",
    "ArtifactStore",
    "CachedModel",
    "model_identity",
    "identity_digest",
    "identity_difference",
    "request_key",
]
