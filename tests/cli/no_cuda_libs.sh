#!/bin/sh
# `--backend cuda` where the CUDA backend cannot be loaded (run by make check-no-cuda-libs
# with CK_CUDA_MODULE pointing at a missing file, as on a machine without the CUDA
# libraries): one line on stderr naming the cause, exit 2, no report written; the CPU
# backend still runs.
# Usage: CK_CUDA_MODULE=/nonexistent/x.so sh tests/cli/no_cuda_libs.sh build/ckpt-harness
set -u
PROG=${1:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

"$PROG" run "$ROOT/cases/mlp_dropout.json" --backend cuda --report "$TMP/r.json" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 2 ] && ok || bad "--backend cuda: exit $rc, want 2"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && ok || bad "--backend cuda: want one stderr line, got: $(cat "$TMP/err")"
grep -q -- "--backend cuda: " "$TMP/err" && ok || bad "the line names --backend cuda: $(cat "$TMP/err")"
if [ -n "${CK_CUDA_MODULE:-}" ]; then
    grep -qF "$CK_CUDA_MODULE" "$TMP/err" || grep -q "built without CUDA" "$TMP/err" && ok ||
        bad "the line names the module or says CUDA was left out: $(cat "$TMP/err")"
fi
[ ! -e "$TMP/r.json" ] && ok || bad "a report was written"
"$PROG" gradcheck "$ROOT/cases/mlp_dropout.json" --backend cuda >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 2 ] && ok || bad "gradcheck --backend cuda: exit $rc, want 2"
"$PROG" run "$ROOT/cases/mlp_dropout.json" --dtype fp32 --quiet >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && ok || bad "the cpu backend still runs: exit $rc: $(cat "$TMP/err")"
echo "no_cuda_libs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
