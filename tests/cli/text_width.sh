#!/bin/sh
# The default text fits 80 columns: every --help, list, run (full and --quiet, stdout and
# stderr notes), bisect, merge and gradcheck over the shipped cases; the passing one-liner
# keeps "(saving N%)" whole; fp32 runs give each unused-setting note once; compare --quiet
# leaves out expected mismatches; gradcheck's error column reads as a share of the tolerance.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/text_width.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${CK_PYTHON:-python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# fits DESC FILE: no line of FILE is wider than 80 characters (UTF-8 counted as characters)
fits() {
    "$PY" - "$2" <<'PYEOF' >"$TMP/wide" 2>&1 && ok || { bad "$1: lines over 80 columns"; sed 's/^/    /' "$TMP/wide" | head -5; }
import sys
wide = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8") if len(l.rstrip("\n")) > 80]
for l in wide[:5]:
    print(len(l), l[:120])
sys.exit(1 if wide else 0)
PYEOF
}
"$PROG" --help >"$TMP/main.txt" 2>&1; fits "--help" "$TMP/main.txt"
for c in run bisect gradcheck list compare merge judge import; do
    "$PROG" $c --help >"$TMP/help.$c" 2>&1; fits "$c --help" "$TMP/help.$c"
done
"$PROG" list >"$TMP/list.txt" 2>&1; fits "list" "$TMP/list.txt"
"$PROG" run "$ROOT/cases" --dtype fp32 >"$TMP/run.txt" 2>&1; fits "run cases/ --dtype fp32" "$TMP/run.txt"
"$PROG" run "$ROOT/cases" --dtype fp32 --quiet >"$TMP/quiet.txt" 2>&1; fits "run --quiet" "$TMP/quiet.txt"
"$PROG" run "$ROOT/cases" --dtype fp32 --plain segment-by-segment --rows 2 >"$TMP/seg.txt" 2>&1; fits "run --plain segment-by-segment" "$TMP/seg.txt"
"$PROG" run "$ROOT/cases/unet3d_groupnorm.json" --dtype fp32 --memory-limit 352255 >"$TMP/seglim.txt" 2>&1; fits "run under a limit the plain run exceeds" "$TMP/seglim.txt"
n=$(grep -c "expect.fp16: not used" "$TMP/run.txt")
[ "$n" -eq 1 ] && ok || bad "the expect.fp16 note is given $n times, want once"
grep -q "(2 cases: .*canary_autocast_drop.json" "$TMP/run.txt" && ok || bad "the note names its cases: $(grep -A2 'expect.fp16' "$TMP/run.txt")"
grep -q "(saving$" "$TMP/quiet.txt" && bad "a one-liner wraps inside (saving N%)" || ok
"$PROG" run "$ROOT/cases" --dtype fp16,bf16 --rows 0 >"$TMP/lowp.txt" 2>&1; fits "run cases/ --dtype fp16,bf16" "$TMP/lowp.txt"
"$PROG" bisect "$ROOT/cases/canary_bn_update.json" "$ROOT/cases/canary_dropout_stateful.json" >"$TMP/bisect.txt" 2>&1; fits "bisect" "$TMP/bisect.txt"
"$PROG" gradcheck "$ROOT/cases" >"$TMP/gc.txt" 2>&1; fits "gradcheck cases/" "$TMP/gc.txt"
grep -q "max_rel_err" "$TMP/gc.txt" && bad "gradcheck still prints max_rel_err" || ok
grep -q "of tol" "$TMP/gc.txt" && ok || bad "gradcheck's column of the tolerance used"
for s in 1 2; do
    "$PROG" run "$ROOT/cases/mlp_dropout.json" "$ROOT/cases/canary_bn_update.json" --shard $s/2 --report "$TMP/s$s/" >/dev/null 2>&1
done
"$PROG" merge "$TMP/s1" "$TMP/s2" >"$TMP/merge.txt" 2>&1; fits "merge" "$TMP/merge.txt"
grep -q "^merge of 2 folders: 4 passed" "$TMP/merge.txt" && ok || bad "merge totals: $(cat "$TMP/merge.txt")"
# plan with layer names as long as ONNX module paths: 80 columns, one byte column, full names
"$PROG" plan "$ROOT/tests/cli/cases/plan_long_names.json" >"$TMP/plan.txt" 2>&1; fits "plan (long layer names)" "$TMP/plan.txt"
[ "$(grep -c ' bytes (' "$TMP/plan.txt")" -eq 8 ] && ok || bad "plan: 8 rows of bytes: $(cat "$TMP/plan.txt")"
[ "$(awk 'index($0, " bytes (") { print index($0, " bytes (") }' "$TMP/plan.txt" | sort -u | wc -l)" -eq 1 ] && ok ||
    bad "plan: the byte column moves with long labels: $(cat "$TMP/plan.txt")"
grep -q "model_encoder_layers_0_feed_forward_linear_in_projection_weight \.\.$" "$TMP/plan.txt" &&
    grep -q "^      model_encoder_layers_0_feed_forward_activation\] peak$" "$TMP/plan.txt" && ok ||
    bad "plan: a long segment label is wrapped whole, not cut: $(cat "$TMP/plan.txt")"
# compare --quiet: an expected mismatch is not a failure line
"$PROG" run "$ROOT/cases/canary_bn_update.json" --dump "$TMP/d" >/dev/null 2>&1
a=$(ls -d "$TMP"/d/*/plain/step_0000/buffers.safetensors 2>/dev/null | head -1); r=$(ls -d "$TMP"/d/*/checkpointed/step_0000/buffers.safetensors 2>/dev/null | head -1)
if [ -n "$a" ] && [ -n "$r" ]; then
    "$PROG" compare "$a" "$r" --expect-mismatch '*running_mean*' --expect-mismatch '*running_var*' --quiet >"$TMP/cmp.txt" 2>&1
    grep -q "^expected mismatch:" "$TMP/cmp.txt" && bad "compare --quiet prints expected mismatches: $(head -3 "$TMP/cmp.txt")" || ok
    "$PROG" compare "$a" "$r" --expect-mismatch '*running_mean*' --expect-mismatch '*running_var*' >"$TMP/cmp2.txt" 2>&1
    grep -q "^expected mismatch:" "$TMP/cmp2.txt" && ok || bad "compare without --quiet lists expected mismatches: $(head -3 "$TMP/cmp2.txt")"
else
    bad "no dump to compare under $TMP/d: $(ls -R "$TMP/d" | head -5)"
fi
# the man page stands alone: every command of --help, every option of every command's
# --help, and no pointer to the source tree
MAN="$ROOT/docs/ckpt-harness.1"
for c in $(sed -n '/^commands:/,/^$/p' "$TMP/main.txt" | awk '/^  [a-z]/ {print $1}'); do
    grep -q "^\.B ckpt-harness $c\$" "$MAN" && grep -q "^\.B $c\$" "$MAN" && ok || bad "the man page lacks the command $c"
done
for c in run bisect gradcheck compare merge judge import; do
    for opt in $(grep -oE '^  (-[a-z], )?--[a-z0-9-]+' "$TMP/help.$c" | sed 's/.*--//' | sort -u); do
        [ "$opt" = help ] && continue
        esc=$(printf '%s' "$opt" | sed 's/-/\\-/g')
        grep -qF -- "\\-\\-$esc" "$MAN" && ok || bad "the man page lacks $c --$opt"
    done
done
grep -q "source tree" "$MAN" && bad "the man page points to the source tree" || ok

echo "text width: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
