"""The command line of the Keras driver (python3 -m ckpt_harness.keras verify ...)."""
import argparse
import os
import sys

from ckpt_harness.cli import add_common_options, load_script, parse_list, run_main
from ckpt_harness.judge import UsageError

PROG = "python3 -m ckpt_harness.keras"
DTYPES = ("fp32", "mixed_float16", "mixed_bfloat16")
MODES = ("recompute_grad", "recompute_grad:preserve-state")

DESCRIPTION = """\
Verify a Keras 3 model's gradient checkpointing: train it plain twice (the control: op
determinism on, every random source reseeded, Keras seed generators included) and with
tf.recompute_grad around the --wrap layers (or the script's enable_checkpointing(model)),
then let `ckpt-harness judge` compare every step's loss, gradients, variables after the
update, non-trainable variables (BatchNorm moving statistics) and layer outputs.
Exit code: the judge's (0 pass, 1 a difference, 2 bad input)."""

EPILOG = """\
modes (--modes):
  recompute_grad              tf.recompute_grad around each wrapped layer (default)
  recompute_grad:preserve-state  the same, the recomputation starting from the layer's
                              non-trainable state as its forward did (seed generators:
                              dropout draws the same mask) and leaving it as the forward
                              left it (BatchNorm moving statistics updated once)
dtypes (--dtype): fp32, mixed_float16 (with a LossScaleOptimizer), mixed_bfloat16; a mixed
policy is judged against fp32 by the harness's calibrated rule (three fp32 calibration runs)
"""


def _need_tensorflow():
    try:
        import tensorflow  # noqa: F401
        import keras  # noqa: F401
    except ImportError as e:
        raise UsageError(f"tensorflow cannot be imported ({e}): pip install tensorflow-cpu")


def _verify(args):
    _need_tensorflow()
    mod = load_script(args.script)
    enable = getattr(mod, "enable_checkpointing", None)
    if args.wrap and enable is not None:
        enable = None  # --wrap wins; said in the report's notes
    if not args.wrap and enable is None:
        raise UsageError(f"{args.script}: nothing to checkpoint: give --wrap PATTERN or "
                         "define enable_checkpointing(model)")
    dtypes = parse_list(args.dtype, DTYPES, "dtype")
    modes = parse_list(args.modes, MODES, "modes")
    from ckpt_harness.keras.api import verify
    name = os.path.splitext(os.path.basename(args.script))[0]
    r = verify(mod.build, wrap=args.wrap, enable_checkpointing=enable, steps=args.steps,
               dtypes=dtypes, optimizer=args.optimizer, lr=args.lr, seed=args.seed,
               modes=modes, report=args.report, junit=args.junit, html=args.html,
               bisect=args.bisect, min_saving=args.min_saving, dump=args.dump,
               keep=args.keep, harness=args.harness, quiet=args.quiet, model_name=name,
               source=os.path.abspath(args.script))
    return r.exit_code


def _onnx(args):
    _need_tensorflow()
    mod = load_script(args.script)
    from ckpt_harness.keras.onnx_export import export_and_import
    from ckpt_harness.keras.runner import Built, Config
    b = Built(mod.build, Config(), "float32")
    info, rc = export_and_import(b.model, b.inputs, args.output, case_path=args.import_to,
                                 harness=args.harness, opset=args.opset)
    ops = ", ".join(f"{k} x{v}" for k, v in sorted(info["onnx_ops"].items()))
    print(f"{args.output}: {ops}")
    if info["keras_dropout"]:
        print(f"note: tf2onnx exported an inference graph: the model's Dropout layers "
              f"({', '.join(info['keras_dropout'][:4])}) are not in it")
    return 0 if rc is None else rc


def _main(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="{verify,onnx}")
    sub.required = True
    v = sub.add_parser("verify", help="verify SCRIPT.py's model", description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_options(v, DTYPES, "fp32")
    v.add_argument("--modes", default="recompute_grad", metavar="LIST",
                   help="checkpointed configurations to try (comma-separated; see below)")
    o = sub.add_parser("onnx", help="export SCRIPT.py's model with tf2onnx and import it",
                       description="Export build()'s model with tf2onnx (fixed input shapes) "
                       "and, with --import, run `ckpt-harness import` on it. Refused (exit 2) "
                       "when tf2onnx folded the model's BatchNormalization layers away: the "
                       "imported case would be another model.")
    o.add_argument("script", metavar="SCRIPT.py")
    o.add_argument("-o", "--output", required=True, metavar="MODEL.onnx")
    o.add_argument("--import", dest="import_to", metavar="CASE.json",
                   help="also import the graph as a case (ckpt-harness import)")
    o.add_argument("--opset", type=int, default=13)
    o.add_argument("--harness", metavar="PATH")
    args = ap.parse_args(argv)
    return _onnx(args) if args.command == "onnx" else _verify(args)


def main(argv=None):
    return run_main(PROG, _main, sys.argv[1:] if argv is None else argv)
