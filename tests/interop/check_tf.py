#!/usr/bin/env python3
"""The TensorFlow example's documented outcomes (make check-tf, tests/interop/run_tf.sh).

Usage: check_tf.py PROG TMPDIR. Skips (exit 0, one line) when tensorflow cannot be
imported; exit 1 when an option does not give its documented exit code.
"""
import contextlib
import os
import sys

try:
    import tensorflow as tf
except ImportError as e:
    print(f"check-tf: skipped: {sys.executable} cannot import tensorflow ({e}); "
          "pip install 'tensorflow-cpu>=2.16,<2.22' and run make check-tf TF_PYTHON=that-python")
    sys.exit(0)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import tf_recompute_grad_dump  # noqa: E402

PROG, TMP = sys.argv[1], sys.argv[2]
passed = failed = 0
for desc, want, argv, must in (
        ("default", 0, [], ["PASS identical"]),
        ("--dropout (Keras Dropout: new mask on recomputation) is caught", 1, ["--dropout"],
         ["caught: the Keras Dropout"]),
        ("--stateless-dropout passes", 0, ["--stateless-dropout"], ["PASS identical"]),
        ("--reuse-dropout: the control fails", 1, ["--reuse-dropout"], ["CONTROL FAILED"])):
    log = os.path.join(TMP, f"tf_{passed + failed}.txt")
    with open(log, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        got = tf_recompute_grad_dump.main(["--harness", PROG, "--out", os.path.join(TMP, "tf")] + argv)
    text = open(log).read()
    lacking = [m for m in must if m not in text]
    if got == want and not lacking:
        passed += 1
    else:
        failed += 1
        print(f"FAIL: {desc}: exit {got} (want {want}); lacks {lacking}")
        print("".join("    " + line for line in text.splitlines(True)[-12:]))
print(f"check-tf: tensorflow {tf.__version__}: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
