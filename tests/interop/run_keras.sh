#!/bin/sh
# The Keras driver's tests (tests/interop/keras/, pytest): the origin scenario, the canaries
# and bad input, every verdict from `ckpt-harness judge`. Run by make check and make
# check-keras with CK_PYTHON (make's KERAS_PYTHON, default python3); skips with one line
# when that Python cannot import tensorflow or pytest.
# Usage: CK_PROG=build/ckpt-harness CK_PYTHON=/path/to/python sh tests/interop/run_keras.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
PY=${CK_PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "keras: skipped: $PY not found"
    exit 0
fi
if ! TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c "import tensorflow, keras" >/dev/null 2>&1; then
    echo "keras: skipped: $PY cannot import tensorflow (pip install tensorflow-cpu pytest; make check-keras KERAS_PYTHON=that-python)"
    exit 0
fi
if ! "$PY" -c "import pytest" >/dev/null 2>&1; then
    echo "keras: skipped: $PY has tensorflow but not pytest (pip install pytest)"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
# TF_CPU_ALLOCATOR_USE_BFC: TensorFlow's CPU allocator counts bytes (the memory figures)
TF_CPU_ALLOCATOR_USE_BFC=true TF_CPP_MIN_LOG_LEVEL=2 CKPT_HARNESS="$PROG" \
    PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m pytest -q -p no:cacheprovider --basetemp="$TMP/pytest" "$ROOT/tests/interop/keras"
