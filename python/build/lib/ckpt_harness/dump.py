"""The judge-input writer: what a framework driver hands to `ckpt-harness judge DIR`.

Framework-neutral (numpy only). The layout is the contract between the drivers and the C
program and is documented in docs/interop.md, "Judge input"; in short:

    DIR/judge.json                                  schema ckpt-harness/judge-input, version 1
    DIR/runs/<run id>/step_NNNN/loss.safetensors    "loss" (F64 scalar)
    DIR/runs/<run id>/step_NNNN/grads.safetensors   every parameter's gradient, backward order
    DIR/runs/<run id>/step_NNNN/params.safetensors  every parameter after the optimizer step
    DIR/runs/<run id>/step_NNNN/buffers.safetensors every buffer after the step
    DIR/runs/<run id>/step_NNNN/outputs.safetensors       module outputs of the forward
    DIR/runs/<run id>/step_NNNN/output_grads.safetensors  their gradients
    DIR/runs/<run id>/step_NNNN/recomputed.safetensors    module outputs computed again
                                                          during backward (recomputation)

A driver makes one JudgeInput, declares the modules, opens one Run per training run (the
plain run, the control, one checkpointed run per mode, calibration runs for low-precision
dtypes), writes each step, and calls finish(). Nothing here decides pass or fail.
"""
import json
import os
import struct

import numpy as np

SCHEMA = "ckpt-harness/judge-input"
SCHEMA_VERSION = 1
ROLES = ("plain", "control", "checkpointed", "calibration")
DTYPES = ("fp32", "fp16", "bf16")
KINDS = ("loss", "grads", "params", "buffers", "outputs", "output_grads", "recomputed")

_TO_ST = {
    np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
    np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL",
}


def save_safetensors(path, tensors):
    """tensors: an ordered {name: numpy array}; written in that order (the order the judge
    compares them in)."""
    header, blobs, off = {}, [], 0
    for name, v in tensors.items():
        arr = np.asarray(v)  # (np.ascontiguousarray would turn a scalar into shape [1])
        if not arr.flags.c_contiguous:
            arr = arr.copy(order="C")
        if arr.dtype not in _TO_ST:
            raise ValueError(f"{name}: numpy dtype {arr.dtype} has no safetensors spelling")
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _TO_ST[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def _write_json(path, obj):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


class Run:
    """One training run's steps (JudgeInput.run makes it)."""

    def __init__(self, root, meta):
        self._root = root
        self.meta = meta
        self.meta["steps"] = []
        os.makedirs(os.path.join(root, meta["dir"]), exist_ok=True)

    def write_step(self, step, loss, grads, params, buffers, outputs=None, output_grads=None,
                   recomputed=None, saved_bytes_peak=None, device_peak_bytes=None,
                   recomputed_calls=0, grads_none=(), loss_scale=1.0, skipped=False,
                   created_in_backward=()):
        """Every argument that holds tensors is an ordered {name: numpy array}. grads_none
        lists the parameters whose gradient the framework left unset (None); their entry in
        grads is written as zeros so the layout stays the same in every run.
        created_in_backward names the variables the framework created while recomputing
        (the judge's cause "weights re-created on recompute")."""
        if step != len(self.meta["steps"]):
            raise ValueError(f"run {self.meta['id']}: step {step} written out of order")
        d = os.path.join(self._root, self.meta["dir"], "step_%04d" % step)
        os.makedirs(d, exist_ok=True)
        save_safetensors(os.path.join(d, "loss.safetensors"),
                         {"loss": np.asarray(float(loss), np.float64).reshape(())})
        for kind, t in (("grads", grads), ("params", params), ("buffers", buffers),
                        ("outputs", outputs), ("output_grads", output_grads),
                        ("recomputed", recomputed)):
            if t is not None:
                save_safetensors(os.path.join(d, kind + ".safetensors"), t)
        self.meta["steps"].append({
            "step": step,
            "loss": float(loss),
            "saved_bytes_peak": None if saved_bytes_peak is None else int(saved_bytes_peak),
            "device_peak_bytes": None if device_peak_bytes is None else int(device_peak_bytes),
            "recomputed_calls": int(recomputed_calls),
            "grads_none": list(grads_none),
            "loss_scale": float(loss_scale),
            "skipped": bool(skipped),
            "created_in_backward": [str(n) for n in created_in_backward],
            "files": [k for k, t in (("loss", 1), ("grads", grads), ("params", params),
                                     ("buffers", buffers), ("outputs", outputs),
                                     ("output_grads", output_grads),
                                     ("recomputed", recomputed)) if t is not None],
        })

    def set_parts(self, parts):
        """The parts the driver checkpointed itself: [(name, forward calls, recomputations)]
        over every step; the judge fails a part that never recomputed ("checkpointing did
        not run inside <part>")."""
        self.meta["parts"] = [{"name": str(n), "forward_calls": int(f), "recomputed": int(r)}
                              for n, f, r in parts]

    def set_module_dtypes(self, forward, recompute):
        """{module name: "fp32"|"bf16"|"fp16"} of each module's output in the original
        forward and in the recomputation (the dumped outputs are fp32 copies)."""
        self.meta["module_dtypes"] = {"forward": dict(forward), "recompute": dict(recompute)}


class JudgeInput:
    """DIR/judge.json and the run folders under it."""

    def __init__(self, root, framework, framework_version, device, model_name, source=None,
                 config=None, deterministic=True):
        self.root = root
        os.makedirs(root, exist_ok=True)
        self.doc = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "framework": {"name": framework, "version": framework_version, "device": device,
                          "deterministic": bool(deterministic)},
            "model": {"name": model_name, "source": source},
            "config": dict(config or {}),
            "min_saving": None,
            "modules": [],
            "notes": [],
            "runs": [],
        }
        self._ids = set()

    def add_module(self, name, type_name, wrapped, random=False):
        """A module in the order its forward is first entered; wrapped: inside a
        checkpointed part in the checkpointed configuration; random: its forward draws
        random numbers (the generator state moved) in the plain run."""
        self.doc["modules"].append({"name": name, "type": type_name, "wrapped": bool(wrapped),
                                    "random": bool(random)})

    def note(self, line):
        """A sentence the report carries (a mode the installed framework lacks, ...)."""
        self.doc["notes"].append(str(line))

    def run(self, run_id, role, dtype="fp32", mode=None, rank=0, calibration=None):
        if role not in ROLES:
            raise ValueError(f"run {run_id}: role {role!r} is not one of {', '.join(ROLES)}")
        if dtype not in DTYPES:
            raise ValueError(f"run {run_id}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        if run_id in self._ids:
            raise ValueError(f"run {run_id}: written twice")
        self._ids.add(run_id)
        meta = {"id": run_id, "role": role, "dtype": dtype, "mode": mode, "rank": int(rank),
                "calibration": calibration, "dir": "runs/" + run_id}
        r = Run(self.root, meta)
        self.doc["runs"].append(meta)
        return r

    def finish(self, min_saving=None):
        self.doc["min_saving"] = None if min_saving is None else float(min_saving)
        path = os.path.join(self.root, "judge.json")
        _write_json(path, self.doc)
        return path
