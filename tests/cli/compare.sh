#!/bin/sh
# End-to-end tests of `ckpt-harness compare`: verdicts and exit codes on crafted pairs
# (tests/fixtures/compare/, made by tests/fixtures/make_fixtures.py), name maps, tolerance
# files, the JSON report, and every malformed tensor file refused with one line and exit 2.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/compare.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FX="$ROOT/tests/fixtures"
C="$FX/compare"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0

ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# expect_exit CODE DESC -- command...
expect_exit() {
    want=$1; desc=$2; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$desc: exit $got, want $want"; sed 's/^/    /' "$TMP/out" "$TMP/err" | head -8; fi
}

# out_has DESC TEXT: the last command's stdout contains TEXT.
out_has() { grep -qF -- "$2" "$TMP/out" && ok || bad "$1: stdout lacks '$2'"; }

# one_line_error DESC FRAGMENT: the last command wrote exactly one stderr line holding it.
one_line_error() {
    if [ "$(wc -l <"$TMP/err")" -ne 1 ]; then bad "$1: $(wc -l <"$TMP/err") stderr lines, want 1"; cat "$TMP/err"; return; fi
    grep -qF -- "$2" "$TMP/err" && ok || bad "$1: message lacks '$2': $(cat "$TMP/err")"
}

# ---- usage -------------------------------------------------------------------------------
expect_exit 0 "compare --help" -- "$PROG" compare --help
out_has "compare --help" "--tolerances FILE"
expect_exit 0 "main help lists compare" -- "$PROG" --help
out_has "main help" "compare A REF"
expect_exit 2 "one operand" -- "$PROG" compare "$C/ref.safetensors"
one_line_error "one operand" "expected two"
expect_exit 2 "three operands" -- "$PROG" compare "$C/ref.safetensors" "$C/ref.safetensors" "$C/ref.safetensors"
expect_exit 2 "bad --rtol" -- "$PROG" compare --rtol -1 "$C/ref.safetensors" "$C/ref.safetensors"
one_line_error "bad --rtol" "--rtol -1"
expect_exit 2 "unknown option" -- "$PROG" compare --frob "$C/ref.safetensors" "$C/ref.safetensors"
expect_exit 2 "missing file" -- "$PROG" compare "$TMP/nope.safetensors" "$C/ref.safetensors"
one_line_error "missing file" "$TMP/nope.safetensors"
expect_exit 2 "not a tensor file" -- "$PROG" compare "$C/map.json" "$C/ref.safetensors"
one_line_error "not a tensor file" "not a tensor file"

# ---- verdicts on crafted pairs -----------------------------------------------------------
expect_exit 0 "a file against itself" -- "$PROG" compare "$C/ref.safetensors" "$C/ref.safetensors"
out_has "itself" "PASS identical: 6 compared"
expect_exit 0 "numpy npz (deflated) against the reference writer" -- "$PROG" compare "$C/same.npz" "$C/ref.safetensors"
out_has "npz" "PASS identical"
expect_exit 0 "directory of .npy against safetensors" -- "$PROG" compare "$C/same_dir" "$C/ref.safetensors"
out_has "dir" "PASS identical"
expect_exit 0 "one fp32 ULP is close" -- "$PROG" compare "$C/close.safetensors" "$C/ref.safetensors"
out_has "close" "PASS close"
expect_exit 1 "an fp32 difference of 0.01 is a mismatch" -- "$PROG" compare "$C/mismatch.safetensors" "$C/ref.safetensors"
out_has "mismatch" "first at [1, 2]"
out_has "mismatch row first" "w     fp32   mismatch"
expect_exit 0 "fp16 default rtol (1e-3) admits 1 ULP at 2.0" -- "$PROG" compare "$C/h_close.safetensors" "$C/ref.safetensors"
expect_exit 1 "--rtol 1e-4 does not" -- "$PROG" compare --rtol 1e-4 "$C/h_close.safetensors" "$C/ref.safetensors"
expect_exit 1 "integers are exact whatever --atol says" -- "$PROG" compare --atol 10 "$C/int_diff.safetensors" "$C/ref.safetensors"
out_has "ints" "compared exactly"
expect_exit 0 "a tolerance file loosens w only" -- "$PROG" compare --tolerances "$C/tol_loose_w.json" "$C/mismatch.safetensors" "$C/ref.safetensors"
expect_exit 0 "NaN and Inf in the same places" -- "$PROG" compare "$C/nan_same.safetensors" "$C/nan_ref.safetensors"
expect_exit 1 "NaN against a number" -- "$PROG" compare "$C/nan_diff.safetensors" "$C/nan_ref.safetensors"
out_has "nan" "3 of 3 elements outside"

# ---- problems: reported, not crashed on --------------------------------------------------
expect_exit 1 "missing, extra, shape and dtype" -- "$PROG" compare "$C/problems.safetensors" "$C/ref.safetensors" --report "$TMP/p.json"
out_has "problems" "missing: b"
out_has "problems" "extra: zz"
out_has "problems" "shape: w is [3, 2] in a, [2, 3] in ref"
out_has "problems" "dtype: d is fp32 in a, fp64 in ref"
grep -q '"schema":	"ckpt-harness/compare"' "$TMP/p.json" && ok || bad "report has the compare schema"
grep -q '"status":	"fail"' "$TMP/p.json" && ok || bad "report says fail"
grep -q '"kind":	"dtype"' "$TMP/p.json" && ok || bad "report lists the dtype problem"
[ -z "$(ls "$TMP" | grep '\.tmp\.')" ] && ok || bad "no temporary report left behind"
expect_exit 1 "same again" -- "$PROG" compare "$C/problems.safetensors" "$C/ref.safetensors" --report "$TMP/p2.json"
cmp -s "$TMP/p.json" "$TMP/p2.json" && ok || bad "two reports are byte-identical"

# ---- name maps ---------------------------------------------------------------------------
expect_exit 1 "prefixed names do not match without a map" -- "$PROG" compare "$C/prefixed.safetensors" "$C/ref.safetensors"
expect_exit 0 "prefixed names match through the map" -- "$PROG" compare --map "$C/map.json" "$C/prefixed.safetensors" "$C/ref.safetensors" --report "$TMP/m.json"
grep -q '"name_a":	"model.w"' "$TMP/m.json" && ok || bad "report keeps a's own name"
expect_exit 2 "a map sending two names to one" -- "$PROG" compare --map "$C/map_collide.json" "$C/prefixed.safetensors" "$C/ref.safetensors"
one_line_error "collision" "sends both"
expect_exit 2 "a bad regex" -- "$PROG" compare --map "$C/map_bad_regex.json" "$C/prefixed.safetensors" "$C/ref.safetensors"
one_line_error "bad regex" "patterns[0]: bad regex"
expect_exit 2 "a negative tolerance" -- "$PROG" compare --tolerances "$C/tol_bad.json" "$C/ref.safetensors" "$C/ref.safetensors"
one_line_error "bad tolerance" "default.rtol"
expect_exit 2 "an unknown tolerance key" -- "$PROG" compare --tolerances "$C/tol_unknown_key.json" "$C/ref.safetensors" "$C/ref.safetensors"

# ---- interop: single tensors, selections, expected mismatches, integers excused by name --
I="$FX/interop"
expect_exit 0 "two single-tensor .npy files with equal values pair whatever their names" -- "$PROG" compare "$I/single_ckpt.npy" "$I/single_plain.npy" --report "$TMP/s.json"
out_has "single" "paired by position"
out_has "single" "PASS identical: 1 compared"
grep -q '"paired_single":	true' "$TMP/s.json" && ok || bad "report says the single tensors were paired"
expect_exit 1 "two single-tensor .npy files with different values" -- "$PROG" compare "$I/single_off.npy" "$I/single_plain.npy"
out_has "single off" "first at [1, 0]"
expect_exit 0 "FILE:NAME against a single file" -- "$PROG" compare "$I/bn_double.npz:grad.w" "$I/bn_ref.npz:grad.w"
expect_exit 2 "FILE:NAME naming no tensor" -- "$PROG" compare "$I/bn_double.npz:grad.nope" "$I/single_plain.npy"
one_line_error "FILE:NAME" "no tensor named \"grad.nope\""
expect_exit 1 "several tensors are still matched by name" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz"
out_has "bn" "num_batches_tracked (i64, compared exactly)"
expect_exit 0 "--include grad.* compares only gradients" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --include 'grad.*'
out_has "include" "PASS identical: 1 compared"
expect_exit 0 "--exclude buffer.* likewise" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --exclude 'buffer.*'
expect_exit 1 "a selection that keeps nothing compares nothing: fail" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --include 'nothing.*'
out_has "empty selection" "nothing compared"
expect_exit 0 "--expect-mismatch buffer.*: the known difference is present" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --expect-mismatch 'buffer.*' --report "$TMP/e.json"
out_has "expect" "2 of them expected"
grep -q '"expected_mismatch":	true' "$TMP/e.json" && ok || bad "report marks the expected mismatch"
grep -q '"met":	true' "$TMP/e.json" && ok || bad "report says the expectation was met"
expect_exit 1 "--expect-mismatch on a pair with no difference fails" -- "$PROG" compare "$I/bn_ref.npz" "$I/bn_ref.npz" --expect-mismatch 'buffer.*'
out_has "expect unmet" "expected mismatch not found"
expect_exit 1 "--expect-mismatch does not excuse other mismatches" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --expect-mismatch '*num_batches_tracked'
expect_exit 0 "integers excused by name in a tolerance file" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --tolerances "$I/tol_bn.json"
out_has "int excuse" "PASS close"
expect_exit 1 "--atol does not excuse integers" -- "$PROG" compare "$I/bn_double.npz" "$I/bn_ref.npz" --atol 5 --include '*num_batches_tracked'

# ---- every malformed file: one line naming it, exit 2 ------------------------------------
n_bad=0
while IFS="$(printf '\t')" read -r f frag; do
    case "$f" in ''|'#'*) continue ;; esac
    n_bad=$((n_bad + 1))
    "$PROG" compare "$FX/bad/$f" "$C/ref.safetensors" >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ "$got" -ne 2 ]; then bad "bad/$f: exit $got, want 2"; continue; fi
    if [ "$(wc -l <"$TMP/err")" -ne 1 ]; then bad "bad/$f: not one stderr line"; cat "$TMP/err"; continue; fi
    if ! grep -qF -- "$FX/bad/$f" "$TMP/err"; then bad "bad/$f: file not named: $(cat "$TMP/err")"; continue; fi
    if ! grep -qF -- "$frag" "$TMP/err"; then bad "bad/$f: lacks '$frag': $(cat "$TMP/err")"; continue; fi
    ok
done <"$FX/bad/EXPECT"
[ "$n_bad" -ge 60 ] && ok || bad "only $n_bad malformed fixtures"

echo "compare: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
