"""A dependency-free safetensors reader and writer (numpy only), for the examples.

The examples run in CI with Debian's python3-torch and python3-numpy, which do not ship the
`safetensors` package; this module reads and writes the same format
(https://github.com/huggingface/safetensors: 8-byte little-endian header length, a JSON
header mapping names to {"dtype", "shape", "data_offsets"}, then the bytes). Where the
`safetensors` package is installed, `safetensors.numpy.save_file`/`load_file` do the same.

bf16 has no numpy dtype: save() takes bf16 data as a numpy uint16 array paired with the
dtype name ("BF16", array) and load() returns bf16 tensors as ("BF16", uint16 array).
"""
import json
import struct

import numpy as np

_TO_ST = {
    np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}
_FROM_ST = {v: k for k, v in _TO_ST.items()}


def save(path, tensors):
    """tensors: {name: numpy array, or ("BF16", uint16 array)}; written in name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        v = tensors[name]
        # np.ascontiguousarray makes a 0-d array shape [1]: keep the shape as given, so a
        # scalar (num_batches_tracked, a loss) stays shape [] as the harness writes it
        if isinstance(v, tuple):
            dt, arr = v[0], np.ascontiguousarray(v[1]).reshape(np.shape(v[1]))
        else:
            arr = np.ascontiguousarray(v).reshape(np.shape(v))
            dt = _TO_ST[arr.dtype]
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)  # the reference writer pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load(path):
    """{name: numpy array} (bf16 as ("BF16", uint16 array))."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        raw = data[base + a:base + b]
        if e["dtype"] == "BF16":
            out[name] = ("BF16", np.frombuffer(raw, "<u2").reshape(e["shape"]).copy())
        else:
            dt = _FROM_ST[e["dtype"]].newbyteorder("<")
            out[name] = np.frombuffer(raw, dt).reshape(e["shape"]).copy()
    return out
