"""Keras -> tf2onnx -> `ckpt-harness import`, refusing what would import a different model.

tf2onnx (1.17) exports Keras models as inference graphs: every BatchNormalization is folded
into the convolution before it (its scale and shift multiplied into the weights), so the
exported graph has no BatchNormalization node and normalises with nothing when the harness
trains it; Dropout disappears. Importing such a graph and running it plain vs checkpointed
would PASS on a different model: the BatchNorm double update, the one checkpointing bug a
BatchNorm model has, cannot happen in it. So the export is refused when the Keras model has
BatchNormalization layers and the graph has no BatchNormalization node (and said when
Dropout layers were dropped). Only the driver knows both sides; the C importer sees only
the graph.
"""
import os
import subprocess

from ckpt_harness.judge import UsageError, find_harness


def _layers(model):
    from ckpt_harness.keras import instrument as ins
    return ins.walk(model)


def export(model, inputs, path, opset=13):
    """Writes model as ONNX with tf2onnx (fixed input shapes from inputs). Returns a dict:
    keras_batchnorm, keras_dropout (layer paths), onnx_ops (op type -> count)."""
    try:
        import tf2onnx
        import onnx
    except ImportError as e:
        raise UsageError(f"tf2onnx cannot be imported ({e}): pip install tf2onnx onnx")
    import tensorflow as tf
    from ckpt_harness.keras import instrument as ins
    xs = inputs(0) if callable(inputs) else inputs
    if not isinstance(xs, (list, tuple)):
        xs = (xs,)
    spec = tuple(tf.TensorSpec(tuple(x.shape), x.dtype, name=f"input_{i}")
                 for i, x in enumerate(xs))
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset, output_path=path)
    g = onnx.load(path).graph
    ops = {}
    for n in g.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    lay = _layers(model)
    return {"keras_batchnorm": [ins.layer_path(l) for l in lay
                                if type(l).__name__ == "BatchNormalization"],
            "keras_dropout": [ins.layer_path(l) for l in lay
                              if "Dropout" in type(l).__name__],
            "onnx_ops": ops}


def check_export(info):
    """UsageError when the exported graph would be a different model than the Keras one."""
    bn = info["keras_batchnorm"]
    if bn and not info["onnx_ops"].get("BatchNormalization"):
        raise UsageError(
            f"the exported graph has no BatchNormalization node but the Keras model has "
            f"{len(bn)} BatchNormalization layer{'s' if len(bn) != 1 else ''} "
            f"({', '.join(bn[:4])}{', ...' if len(bn) > 4 else ''}): tf2onnx folded them "
            "into the convolutions (an inference graph), so the imported case would train "
            "another model; not importing it (verify the Keras model itself with "
            "python3 -m ckpt_harness.keras verify)")


def export_and_import(model, inputs, onnx_path, case_path=None, harness=None, opset=13):
    """export(), check_export(), then `ckpt-harness import` when case_path is given.
    Returns (info, import exit code or None)."""
    info = export(model, inputs, onnx_path, opset=opset)
    check_export(info)
    if case_path is None:
        return info, None
    prog = find_harness(harness)
    p = subprocess.run([prog, "import", onnx_path, "-o", case_path])
    return info, p.returncode
