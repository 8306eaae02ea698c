#!/bin/sh
# The interop examples under PyTorch (tests/interop/check_torch.py): each documented option
# of examples/pytorch_checkpoint_dump.py gives its documented exit code, and
# examples/replay_torch.py matches the harness on two shipped cases; the PyTorch driver's
# verify (check_torch_driver.py) and export (check_torch_export.py) commands. Skips with one line
# when the Python ($CK_PYTHON, default /usr/bin/python3) cannot import torch.
# Usage: CK_PROG=build/ckpt-harness sh tests/interop/run.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
PY=${CK_PYTHON:-/usr/bin/python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "interop: skipped: $PY not found (apt-get install python3-torch python3-numpy)"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
"$PY" "$ROOT/tests/interop/check_torch.py" "$PROG" "$TMP"
rc=$?
"$PY" "$ROOT/tests/interop/check_torch_driver.py" "$PROG" "$TMP" || rc=1
"$PY" "$ROOT/tests/interop/check_torch_export.py" "$PROG" "$TMP" || rc=1
exit $rc
