#!/bin/sh
# The TensorFlow example's documented outcomes (tests/interop/check_tf.py), run by
# `make check-tf` with TF_PYTHON, the Python that has TensorFlow. Skips with one line when
# that Python is missing or cannot import tensorflow.
# Usage: CK_PROG=build/ckpt-harness CK_PYTHON=/path/to/python sh tests/interop/run_tf.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
PY=${CK_PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "check-tf: skipped: $PY not found"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
TF_CPP_MIN_LOG_LEVEL=2 "$PY" "$ROOT/tests/interop/check_tf.py" "$PROG" "$TMP"
