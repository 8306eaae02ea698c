"""What every driver's command line shares (framework-neutral): the options, loading the
user's SCRIPT.py, and bad input as one line with exit code 2."""
import argparse
import importlib.util
import os
import sys

from ckpt_harness.judge import UsageError

OPTIMIZERS = ("sgd", "adam", "adamw")


def add_common_options(ap, dtypes, default_dtype="fp32"):
    """The options both drivers take (the framework adds --modes, --device, ...)."""
    ap.add_argument("script", metavar="SCRIPT.py",
                    help="defines build() -> (model, inputs, loss_fn); optionally "
                         "enable_checkpointing(model)")
    ap.add_argument("--wrap", action="append", default=[], metavar="PATTERN",
                    help="checkpoint the submodules whose name matches this shell pattern "
                         "(repeatable)")
    ap.add_argument("--steps", type=_positive_int, default=2, metavar="N",
                    help="training steps per run (default 2)")
    ap.add_argument("--dtype", default=default_dtype, metavar="LIST",
                    help=f"comma-separated, from {', '.join(dtypes)} (default {default_dtype})")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                    help="the update after each step (default sgd)")
    ap.add_argument("--lr", type=_positive_float, default=0.01, help="learning rate (0.01)")
    ap.add_argument("--seed", type=_non_negative_int, default=0, help="seed of every RNG (0)")
    ap.add_argument("--report", metavar="DIR",
                    help="the harness's JSON reports and summary.json into DIR")
    ap.add_argument("--junit", metavar="FILE", help="JUnit XML, one testcase per mode and dtype")
    ap.add_argument("--html", metavar="FILE", help="the harness's HTML page")
    ap.add_argument("--bisect", action="store_true", default=True,
                    help="record every module's output and output gradient so the harness "
                         "names the first module where the runs part (the default)")
    ap.add_argument("--no-bisect", dest="bisect", action="store_false",
                    help="record no module outputs (large models: less memory and disk)")
    ap.add_argument("--min-saving", type=_fraction, metavar="F",
                    help="fail a mode whose saved-tensor memory saving is below F (0..1)")
    ap.add_argument("--dump", metavar="DIR",
                    help="write the judge input into DIR (kept) instead of a temporary folder")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary judge input and print where it is")
    ap.add_argument("--harness", metavar="PATH",
                    help="the ckpt-harness program (default: $CKPT_HARNESS, the source "
                         "tree's build/ckpt-harness, or PATH)")
    ap.add_argument("--quiet", action="store_true", help="one line per mode and dtype")


def parse_list(text, allowed, what):
    items = [s.strip() for s in text.split(",") if s.strip()]
    if not items:
        raise UsageError(f"--{what}: empty list")
    for s in items:
        if s not in allowed and not any(s.startswith(a) for a in allowed if a.endswith(":")):
            raise UsageError(f"--{what}: unknown {what[:-1] if what.endswith('s') else what} "
                             f"{s!r} (known: {', '.join(allowed)})")
    if len(set(items)) != len(items):
        raise UsageError(f"--{what}: {text!r} names one twice")
    return items


def load_script(path, required=("build",)):
    """Imports SCRIPT.py as a module; UsageError when it cannot be read or lacks build()."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    name = "ckpt_user_" + os.path.splitext(os.path.basename(path))[0].replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"{path}: cannot be imported as a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as e:
        raise UsageError(f"{path}:{e.lineno}: syntax error: {e.msg}")
    except Exception as e:  # the user's code failed at import: one line, not a traceback
        raise UsageError(f"{path}: importing it raised {type(e).__name__}: {e}")
    finally:
        sys.path.pop(0)
    for fn in required:
        if not callable(getattr(mod, fn, None)):
            raise UsageError(f"{path}: defines no {fn}() (it must return (model, inputs, "
                             f"loss_fn))" if fn == "build" else f"{path}: defines no {fn}()")
    return mod


def run_main(prog, fn, argv):
    """fn(argv) -> exit code; a UsageError becomes 'prog: message' and exit 2."""
    try:
        return fn(argv)
    except UsageError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2


def _positive_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s} must be at least 1")
    return v


def _non_negative_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not an integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{s} must be >= 0")
    return v


def _positive_float(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number")
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{s} must be > 0")
    return v


def _fraction(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number")
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"{s} must be in [0, 1)")
    return v
