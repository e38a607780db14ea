"""SGLang's msgpack body encoding, implemented here so the worker does not import sglang.

SGLang (sgl-project/sglang
``python/sglang/multimodal_gen/runtime/entrypoints/action/protocol.py``
``pack_msgpack``/``unpack_msgpack``) packs a numpy array as a msgpack *map* with
bin keys ``__ndarray__``, ``data`` (C-order bytes), ``dtype`` (``dtype.str``) and
``shape``, and a numpy scalar as ``__npgeneric__``/``data``/``dtype``. On decoding, str or
bytes keys are accepted. Only plain numeric dtypes are decoded here; anything else is a
:class:`ProtocolError`, so no server answer can make us build an object array.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from wamcore.errors import ProtocolError

_KINDS = "biuf"


def _get(d: dict, key: str):
    return d[key] if key in d else d.get(key.encode())


def _dtype(value) -> np.dtype:
    try:
        dtype = np.dtype(value.decode() if isinstance(value, bytes) else value)
    except TypeError:
        raise ProtocolError(f"SGLang sent an array of unknown dtype {value!r}") from None
    if dtype.kind not in _KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ProtocolError(f"SGLang sent an array of dtype {dtype}; only bool, int and float arrays are accepted")
    return dtype


def _object_hook(d: dict) -> Any:
    if _get(d, "__ndarray__"):
        dtype = _dtype(_get(d, "dtype"))
        shape = tuple(int(x) for x in _get(d, "shape"))
        data = _get(d, "data")
        if not isinstance(data, (bytes, bytearray)) or any(x < 0 for x in shape):
            raise ProtocolError("SGLang sent a malformed array (data must be bytes, shape non-negative)")
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if len(data) != expected:
            raise ProtocolError(f"SGLang sent an array of shape {shape} {dtype} with {len(data)} bytes, expected {expected}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if _get(d, "__npgeneric__"):
        return _dtype(_get(d, "dtype")).type(_get(d, "data"))
    return d


def pack(obj: Any) -> bytes:
    """A request body. Our bodies hold only str/int/float/list/dict (images travel as PNG
    data URIs), so nothing numpy-specific is packed."""
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """A msgpack response body, numpy maps restored as read-only arrays."""
    try:
        return msgpack.unpackb(data, object_hook=_object_hook, raw=False)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises several unrelated classes on garbage
        raise ProtocolError(f"SGLang's response is not valid msgpack: {type(exc).__name__}: {exc}") from None


__all__ = ["pack", "unpack"]
