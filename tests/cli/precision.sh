#!/bin/sh
# The precision judgement and vacuity, end to end (cases/README.md, "Judging low precision
# against fp32"): zero false alarms on the healthy corpus in fp16 and bf16, every canary
# flagged by the default judgement, the controls (--precision-check, --rtol/--atol/--rel-l2,
# expect_precision any), and vacuous runs reported as such.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/precision.sh
# CK_SEED_FULL=1 also runs the seed model at 64x64x32 (make check-seed; minutes).
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
expect_exit() {
    want=$1; desc=$2; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$desc: exit $got, want $want"; sed 's/^/    /' "$TMP/out" "$TMP/err" | tail -8; fi
}
# the output with wrapped lines joined and runs of spaces squeezed (text wraps at 80 columns)
joined() { tr '\n' ' ' <"$TMP/out" | tr -s ' '; }
# edit IN OUT PYTHON-STATEMENTS: a copy of case IN with `c` changed
edit() {
    "$PY" - "$1" "$2" "$3" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
}

# ---- the corpus: healthy models and the shipped cases without hand-set tolerances ---------
"$PY" "$ROOT/tests/corpus/gen_corpus.py" "$TMP/corpus" --strip-shipped "$ROOT/cases" || bad "corpus generator"
n=$(ls "$TMP/corpus" | wc -l)
[ "$n" -ge 40 ] && ok || bad "corpus has $n cases, want at least 40"
expect_exit 0 "the corpus meets every expectation in fp16 and bf16" -- "$PROG" run "$TMP/corpus" --dtype fp16,bf16 --quiet --report "$TMP/corpus_rep/"
"$PY" "$ROOT/tests/corpus/summarize.py" "$TMP/corpus_rep" >"$TMP/summary" || bad "summarize"
sed 's/^/  corpus /' "$TMP/summary"
grep -q "^fp16: .* 0 false alarms" "$TMP/summary" && ok || bad "fp16 false alarms: $(cat "$TMP/summary")"
grep -q "^bf16: .* 0 false alarms" "$TMP/summary" && ok || bad "bf16 false alarms: $(cat "$TMP/summary")"
grep -Eq '"bound_source":[[:space:]]*"calibrated"' "$TMP/corpus_rep/cnn_bn.fp16.json" && ok || bad "calibrated rows in the report"
grep -Eq '"bound_source":[[:space:]]*"norm-relative"' "$TMP/corpus_rep/cnn_bn.bf16.json" && ok || bad "norm-relative rows (conv bias feeding BatchNorm)"

# a step the fp16 loss scaler skips (seed offset 3 overflows there) is skipped by the fp32
# runs too, and its gradient rows are not judged
"$PY" "$ROOT/tests/corpus/gen_corpus.py" "$TMP/corpus3" --seed-offset 3 || bad "corpus offset 3"
expect_exit 0 "a skipped fp16 step is mirrored, not a false alarm" -- "$PROG" run "$TMP/corpus3/corpus_15_mlp_d4_w8_batchnorm_res_leaky_relu.json" --dtype fp16 --report "$TMP/skip.json"
grep -Eq '"skipped":[[:space:]]*true' "$TMP/skip.json" && grep -Eq '"bound_source":[[:space:]]*"skipped step"' "$TMP/skip.json" && ok || bad "skipped step rows"

# ---- canaries: the DEFAULT judgement flags them (expectations removed) --------------------
for cn in fp16_underflow_noscale canary_lowp_reduction; do
    edit "$ROOT/cases/$cn.json" "$TMP/$cn.json" 'c.pop("expect_precision", None); c.get("tolerance", {}).pop("fp16", None); c.get("tolerance", {}).pop("bf16", None)'
    expect_exit 1 "$cn is flagged by default" -- "$PROG" run "$TMP/$cn.json" --dtype fp16 --quiet
    joined | grep -q "vs fp32 mismatch: .*(calibrated)" && ok || bad "$cn: quiet line names the judgement and its worst tensor: $(cat "$TMP/out")"
done
expect_exit 1 "the low-dtype reduction is flagged in bf16 too" -- "$PROG" run "$TMP/canary_lowp_reduction.json" --dtype bf16 --quiet
expect_exit 1 "fp16_underflow_noscale text lists the worst rows" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16
grep -q "^step kind   verdict .*bound from     name" "$TMP/out" && grep -Eq "^ +0 grad +mismatch .* calibrated +fc0\." "$TMP/out" && ok || bad "worst vs-fp32 rows listed"
joined | grep -q "FAIL vs fp32: the fp16 run is outside its bound of the fp32 run; worst: grad fc" && ok || bad "failure line names the worst tensor"
expect_exit 0 "shipped canaries meet their expectations" -- "$PROG" run "$ROOT/cases/fp16_underflow_noscale.json" "$ROOT/cases/canary_lowp_reduction.json" "$ROOT/cases/canary_recompute_filter.json" --quiet
expect_exit 0 "bisect names the float32-only filter" -- "$PROG" bisect "$ROOT/cases/canary_recompute_filter.json" --dtype fp16
joined | grep -q "cause: segment \[fc1 .. act1\] passed no gradient to its fp16 input \`act0\`.*recompute_filter \`fp32_only\`" && ok || bad "filter cause: $(grep -A3 cause "$TMP/out")"
edit "$ROOT/cases/canary_recompute_filter.json" "$TMP/filter_identical.json" 'c["expect"] = "identical"'
expect_exit 1 "the filter canary fails when expected identical" -- "$PROG" run "$TMP/filter_identical.json" --dtype bf16 --quiet
edit "$ROOT/cases/canary_recompute_filter.json" "$TMP/filter_all.json" 'c["policies"]["recompute_filter"] = "all"; c["expect"] = "identical"'
expect_exit 0 "without the filter the same model is identical" -- "$PROG" run "$TMP/filter_all.json" --quiet

# ---- controls ------------------------------------------------------------------------------
expect_exit 0 "--precision-check warn reports without failing" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16 --precision-check warn --report "$TMP/warn.json"
grep -Eq '"precision_check":[[:space:]]*"warn"' "$TMP/warn.json" && grep -Eq '"verdict":[[:space:]]*"mismatch"' "$TMP/warn.json" && ok || bad "warn: judged and reported"
expect_exit 0 "--precision-check off" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16 --precision-check off --report "$TMP/off.json"
grep -Eq '"vs_fp32":[[:space:]]*null' "$TMP/off.json" && ok || bad "off: no judgement"
expect_exit 2 "--precision-check bad" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --precision-check maybe
expect_exit 2 "--rel-l2 bad" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --rel-l2 -1
expect_exit 0 "--rel-l2 override" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16 --rel-l2 1.0 --report "$TMP/ov.json"
grep -Eq '"bound_source":[[:space:]]*"override"' "$TMP/ov.json" && ok || bad "override rows"
expect_exit 1 "--rtol/--atol override (elementwise)" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16 --rtol 1e-3 --atol 0
edit "$TMP/fp16_underflow_noscale.json" "$TMP/any.json" 'c["expect_precision"] = "any"'
expect_exit 0 "expect_precision any" -- "$PROG" run "$TMP/any.json" --dtype fp16 --quiet
edit "$ROOT/cases/cnn_bn.json" "$TMP/casetol.json" 'c.setdefault("tolerance", {})["fp16"] = {"rel_l2": 1e-9}'
expect_exit 1 "a case's own tolerance replaces the default" -- "$PROG" run "$TMP/casetol.json" --dtype fp16 --report "$TMP/casetol.rep.json"
grep -Eq '"bound_source":[[:space:]]*"case tolerance"' "$TMP/casetol.rep.json" && ok || bad "case tolerance rows"

# ---- vacuity ---------------------------------------------------------------------------------
edit "$ROOT/tests/bench/cases/seed_unet_64x64x32.json" "$TMP/seed_small.json" 'c["input"]["shape"] = [1, 1, 16, 16, 8]; c["name"] = "seed_small"'
edit "$TMP/seed_small.json" "$TMP/seed_default.json" '[l.pop("init", None) for l in c["layers"]]; c["name"] = "seed_default"; c["train"].pop("loss_scale")'
for dt in fp32 fp16 bf16; do
    expect_exit 0 "seed model (kaiming_normal) $dt is judged and non-vacuous" -- "$PROG" run "$TMP/seed_small.json" --dtype $dt --report "$TMP/seed.$dt.json"
    "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); g=r['runs']['plain']['gradients']; sys.exit(0 if not r['vacuous'] and g['zero'] < g['elements'] * 0.5 else 1)" "$TMP/seed.$dt.json" && ok || bad "seed $dt: gradients alive"
done
expect_exit 1 "seed model with PyTorch's default init in fp16 is vacuous" -- "$PROG" run "$TMP/seed_default.json" --dtype fp16 --quiet --report "$TMP/vac.json"
joined | grep -q "^VACUOUS seed_default fp16 .* vacuous: plain run: the loss at step 0 is exactly 0" && ok || bad "vacuous quiet line: $(cat "$TMP/out")"
grep -Eq '"status":[[:space:]]*"vacuous"' "$TMP/vac.json" && ok || bad "status vacuous"
edit "$ROOT/cases/mlp_dropout.json" "$TMP/dead.json" 'c["layers"] = [{"name": "fc", "op": "linear", "units": 8, "init": "zeros"}, {"name": "relu", "op": "relu"}]; c["loss"] = {"op": "mse"}; c["checkpoint"] = {"every": 1}; c["name"] = "dead"; c.pop("expect", None)'
expect_exit 1 "all-zero gradients are vacuous, not identical" -- "$PROG" run "$TMP/dead.json" --dtype fp32
joined | grep -q "FAIL vacuous: plain run: 100.00% of .* gradient elements are zero" && ok || bad "one line saying why: $(grep -i vacuous "$TMP/out")"
edit "$TMP/dead.json" "$TMP/dead_expected.json" 'c["expect_vacuous"] = True'
expect_exit 0 "expect_vacuous" -- "$PROG" run "$TMP/dead_expected.json" --dtype fp32 --quiet
edit "$TMP/seed_small.json" "$TMP/seed_expect_vac.json" 'c["expect_vacuous"] = True'
expect_exit 1 "expect_vacuous on a live model fails" -- "$PROG" run "$TMP/seed_expect_vac.json" --dtype fp32 --quiet

# ---- compare: rel_l2 and cross-dtype (an fp16 dump against an fp32 one) -----------------
mknpy() { # mknpy FILE DESCR(<f2|<f4) VALUES...
    "$PY" - "$@" <<'PYEOF'
import struct, sys
path, descr, vals = sys.argv[1], sys.argv[2], [float(v) for v in sys.argv[3:]]
head = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(vals))
head += " " * (63 - (10 + len(head)) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode())
    f.write(struct.pack("<%d%s" % (len(vals), "e" if descr == "<f2" else "f"), *vals))
PYEOF
}
mkdir -p "$TMP/cmp/ref" "$TMP/cmp/low" "$TMP/cmp/off"
mknpy "$TMP/cmp/ref/w.npy" "<f4" 1.0001 2 3 4
mknpy "$TMP/cmp/low/w.npy" "<f2" 1.0001 2 3 4
mknpy "$TMP/cmp/off/w.npy" "<f2" 1.1 2 3 4
expect_exit 1 "compare refuses a dtype difference by default" -- "$PROG" compare "$TMP/cmp/low" "$TMP/cmp/ref" --quiet
expect_exit 0 "compare --cross-dtype judges fp16 against fp32" -- "$PROG" compare "$TMP/cmp/low" "$TMP/cmp/ref" --cross-dtype --report "$TMP/cmp/x.json"
grep -Eq '"dtype_a":[[:space:]]*"fp16"' "$TMP/cmp/x.json" && ok || bad "cross-dtype row names A's dtype"
expect_exit 1 "compare --cross-dtype: an element off by 10%" -- "$PROG" compare "$TMP/cmp/off" "$TMP/cmp/ref" --cross-dtype --quiet
expect_exit 0 "compare --rel-l2 0.1" -- "$PROG" compare "$TMP/cmp/off" "$TMP/cmp/ref" --cross-dtype --rel-l2 0.1 --report "$TMP/cmp/l2.json"
grep -Eq '"rel_l2_limit":[[:space:]]*0.1' "$TMP/cmp/l2.json" && ok || bad "rel_l2_limit in the compare report"
printf '{"default": {"rel_l2": 0.001}}' >"$TMP/cmp/tol.json"
expect_exit 1 "rel_l2 in a tolerance file" -- "$PROG" compare "$TMP/cmp/off" "$TMP/cmp/ref" --cross-dtype --tolerances "$TMP/cmp/tol.json" --quiet
printf '{"tensors": {"w": {"rel_l2": 0.5}}}' >"$TMP/cmp/tol2.json"
expect_exit 0 "rel_l2 per tensor pattern" -- "$PROG" compare "$TMP/cmp/off" "$TMP/cmp/ref" --cross-dtype --tolerances "$TMP/cmp/tol2.json" --quiet
printf '{"default": {"rel_l2": -1}}' >"$TMP/cmp/tol3.json"
expect_exit 2 "a negative rel_l2 is bad input" -- "$PROG" compare "$TMP/cmp/off" "$TMP/cmp/ref" --tolerances "$TMP/cmp/tol3.json"

# ---- a low-precision failure names its dominant measured cause and the remedy ------------
expect_exit 1 "fp16 without loss scaling fails" -- "$PROG" run "$TMP/fp16_underflow_noscale.json" --dtype fp16 --rows 0
joined | grep -q "cause: underflow ([0-9]* gradient values flushed to zero and [0-9]* subnormal in fp16, [0-9.]*% of [0-9]*); remedy: loss scaling (train.loss_scale \"dynamic\")" && ok || bad "the underflow is named with its counts and remedy: $(cat "$TMP/out")"
edit "$TMP/fp16_underflow_noscale.json" "$TMP/uf_scaled.json" 'c["train"]["loss_scale"] = "dynamic"'
expect_exit 0 "the remedy the underflow line names makes it pass" -- "$PROG" run "$TMP/uf_scaled.json" --dtype fp16 --quiet
expect_exit 1 "a low-dtype reduction fails" -- "$PROG" run "$TMP/canary_lowp_reduction.json" --dtype fp16 --quiet
joined | grep -q "cause: reductions in the low dtype (remedy: fp32 accumulation)" && ok || bad "the quiet line names the reduction: $(cat "$TMP/out")"

# ---- token models: the calibration never rounds token ids or class labels ----------------
# vocabulary 1000 over 1024 tokens: bf16 holds 998 and 999 as 1000, outside the vocabulary
edit "$ROOT/cases/gpt_decoder.json" "$TMP/gpt1000.json" 'c["input"]["shape"] = [8, 128]; c["input"]["vocab"] = 1000; c["layers"][0]["vocab"] = 1000; c["layers"][-1]["units"] = 1000; c.pop("tolerance")'
expect_exit 0 "vocabulary 1000 in bf16: the calibration draws the run's own token ids" -- "$PROG" run "$TMP/gpt1000.json" --dtype bf16 --quiet
for dt in fp32 fp16 bf16; do
    expect_exit 0 "vocabulary 50,257 passes in $dt by default" -- "$PROG" run "$ROOT/tests/cli/cases/gpt_vocab50257.json" --dtype $dt --quiet
done

# ---- GPT-2's tied head ("share": "tok.weight") at vocabulary 50,257 ------------------------
for dt in fp32 fp16 bf16; do
    expect_exit 0 "a tied head at vocabulary 50,257 passes in $dt by default" -- "$PROG" run "$ROOT/tests/cli/cases/gpt_tied_vocab50257.json" --dtype $dt --quiet --report "$TMP/tied.$dt.json"
    "$PY" -c "
import json, sys
names = {t['name'] for t in json.load(open(sys.argv[1]))['tensors']}
sys.exit(0 if 'tok.weight' in names and not any(n.startswith('head.') for n in names) else 1)" "$TMP/tied.$dt.json" && ok || bad "tied $dt: the report names tok.weight once and no head.weight"
done
expect_exit 0 "the tied case dumps" -- "$PROG" run "$ROOT/tests/cli/cases/gpt_tied_vocab50257.json" --dtype fp32 --quiet --dump "$TMP/tied_dump"
W=$(find "$TMP/tied_dump" -path '*plain/init/weights.safetensors' | head -n 1)
"$PY" - "$W" "$TMP/tied_extra.safetensors" <<'PYEOF'
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
head, data = json.loads(blob[8:8 + n]), blob[8 + n:]
meta = dict(head["tok.weight"])
a, b = meta["data_offsets"]
meta["data_offsets"] = [len(data), len(data) + b - a]
head["head.weight"] = meta
h = json.dumps(head).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + data + data[a:b])
PYEOF
expect_exit 0 "the dumped weights (tok.weight once) load back" -- "$PROG" run "$ROOT/tests/cli/cases/gpt_tied_vocab50257.json" --dtype fp32 --quiet --init "$W"
expect_exit 2 "a weight file that also holds the shared head.weight is refused" -- "$PROG" run "$ROOT/tests/cli/cases/gpt_tied_vocab50257.json" --dtype fp32 --quiet --init "$TMP/tied_extra.safetensors"
tr '\n' ' ' <"$TMP/err" | grep -q '`head.weight` is shared: that layer uses tok.weight' && ok || bad "the refusal names the share: $(cat "$TMP/err")"

if [ "${CK_SEED_FULL:-0}" = 1 ]; then
    for dt in fp32 fp16 bf16; do
        expect_exit 0 "seed model 64x64x32 $dt" -- "$PROG" run "$ROOT/tests/bench/cases/seed_unet_64x64x32.json" --dtype $dt --rows 0 --report "$TMP/seedfull.$dt.json"
        grep "^gradients\|^vs fp32" "$TMP/out" | sed "s/^/  seed 64x64x32 $dt: /"
        "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); g=r['runs']['plain']['gradients']; sys.exit(0 if not r['vacuous'] and g['zero'] < g['elements'] * 0.5 else 1)" "$TMP/seedfull.$dt.json" && ok || bad "seed 64x64x32 $dt: gradients alive"
    done
fi

echo "precision: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
