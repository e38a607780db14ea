"""openpi's msgpack-numpy, against openpi-client's own packer (the real PyPI package).

Our encoder must be read by openpi-client's ``unpackb`` and theirs by ours, for every
numeric dtype; our decoder must refuse everything else as a ProtocolError, so no message
can build an object array or run code."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from openpi_client import msgpack_numpy

from wamcore.errors import ProtocolError
from wam_openpi import codec

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64")


def _message(dtype: str) -> dict:
    rng = np.random.default_rng(0)
    array = (rng.integers(0, 2, (3, 4)) if dtype == "bool" else rng.integers(0, 100, (3, 4))).astype(dtype)
    return {"observation/image": array, "nested": {"list": [1, 2.5, "x"], "scalar": np.dtype(dtype).type(1),
                                                    "empty": np.zeros((0, 3), dtype)},
            "prompt": "pick up the bowl", "big-endian": array.astype(np.dtype(dtype).newbyteorder(">"))}


def _same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, float):  # np.float64 is a float: msgpack packs it as one, openpi-client too
        assert type(b) is float and a == b
    elif isinstance(a, (np.ndarray, np.generic)):
        assert type(a) is type(b) and a.dtype == b.dtype and np.shape(a) == np.shape(b) and np.array_equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("dtype", DTYPES)
def test_openpi_client_reads_what_we_pack_and_we_read_what_it_packs(dtype):
    message = _message(dtype)
    _same(message, msgpack_numpy.unpackb(codec.packb(message)))
    ours = codec.unpackb(msgpack_numpy.packb(message))
    _same(message, ours)
    assert not ours["observation/image"].flags.writeable  # a view over the message, never a copy to change


def _array_map(**changes) -> bytes:
    d = {b"__ndarray__": True, b"data": np.arange(6, dtype="<f4").tobytes(), b"dtype": "<f4", b"shape": [2, 3]}
    for key, value in changes.items():
        if value is None:
            d.pop(key.encode())
        else:
            d[key.encode()] = value
    return msgpack.packb({"observation/state": d}, use_bin_type=True)


@pytest.mark.parametrize("data, why", [
    (_array_map(dtype="|O", data=b"\0" * 48), "object dtype"),
    (_array_map(dtype="<c8"), "complex dtype"),
    (_array_map(dtype="|V4"), "void dtype"),
    (_array_map(dtype="<M8[ns]", data=b"\0" * 48), "datetime dtype"),
    (_array_map(dtype="<U1"), "unicode dtype"),
    (_array_map(dtype="not-a-dtype"), "garbage dtype"),
    (_array_map(dtype=7), "dtype not a string"),
    (_array_map(shape=[4, 3]), "bytes do not fit the shape"),
    (_array_map(shape=[-2, -3]), "negative shape"),
    (_array_map(shape="2x3"), "shape not a list"),
    (_array_map(shape=[2**40, 2**40]), "absurd shape"),
    (_array_map(data="text"), "data not bytes"),
    (_array_map(data=None), "no data"),
    (_array_map(extra=1), "unexpected key"),
    (_array_map(__ndarray__=1), "marker not true"),
    (msgpack.packb({"s": {b"__npgeneric__": True, b"data": [1], b"dtype": "<f4"}}), "scalar of a list"),
    (msgpack.packb({"s": {b"__npgeneric__": True, b"data": 1, b"dtype": "|O"}}), "object scalar"),
    (msgpack.packb({"s": {b"__npgeneric__": True, b"data": 300, b"dtype": "|u1"}}), "scalar out of range"),
    (msgpack.packb({1: "int key"}), "map key not a string"),
    (b"\xc1\xc1\xc1", "not msgpack"),
    (msgpack.packb({"a": 1})[:-1], "truncated"),
    (b"", "empty"),
    (msgpack.packb({"x": msgpack.ExtType(1, b"\0" * 8)}), "msgpack extension (our own worker format)"),
])
def test_anything_but_numeric_arrays_is_a_protocol_error(data, why):
    with pytest.raises(ProtocolError):
        codec.unpackb(data)


@pytest.mark.parametrize("value", [np.array([object()]), np.zeros(2, np.complex64), np.zeros(1, "U3"), {1, 2}])
def test_we_never_pack_what_does_not_travel(value):
    with pytest.raises(ProtocolError):
        codec.packb({"x": value})
