#!/bin/sh
# End-to-end tests of the ckpt-harness command line: exit codes, one-line errors naming
# the file and JSON path, reports written atomically and deterministically.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/run.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
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
    if [ "$got" -eq "$want" ]; then ok; else bad "$desc: exit $got, want $want"; sed 's/^/    /' "$TMP/err" | head -5; fi
}

# bad_case DESC JSON-PATH-FRAGMENT JSON: the file must give exit 2 and one stderr line that
# names the file and the fragment.
bad_case() {
    desc=$1; frag=$2; f="$TMP/bad_case.json"
    printf '%s' "$3" >"$f"
    rm -rf "$TMP/rep"
    "$PROG" run "$f" --report "$TMP/rep/" >"$TMP/out" 2>"$TMP/err"
    got=$?
    lines=$(wc -l <"$TMP/err")
    if [ "$got" -ne 2 ]; then bad "$desc: exit $got, want 2"; return; fi
    if [ "$lines" -ne 1 ]; then bad "$desc: $lines stderr lines, want 1"; cat "$TMP/err"; return; fi
    if ! grep -qF "$f" "$TMP/err"; then bad "$desc: message does not name the file: $(cat "$TMP/err")"; return; fi
    if ! grep -qF -- "$frag" "$TMP/err"; then bad "$desc: message lacks '$frag': $(cat "$TMP/err")"; return; fi
    if [ -d "$TMP/rep" ] && [ -n "$(ls -A "$TMP/rep")" ]; then bad "$desc: a report was written"; return; fi
    ok
}

# ---- usage -------------------------------------------------------------------------------
expect_exit 0 "--help" -- "$PROG" --help
grep -q "usage: ckpt-harness" "$TMP/out" && ok || bad "--help prints usage"
expect_exit 0 "run --help" -- "$PROG" run --help
grep -q -- "--bn-recompute" "$TMP/out" && ok || bad "run --help lists --bn-recompute"
expect_exit 0 "gradcheck --help" -- "$PROG" gradcheck --help
expect_exit 0 "list --help" -- "$PROG" list --help
expect_exit 0 "--version" -- "$PROG" --version
expect_exit 2 "no command" -- "$PROG"
expect_exit 2 "unknown command" -- "$PROG" frobnicate
expect_exit 2 "unknown option" -- "$PROG" run --frob "$ROOT/cases/mlp_dropout.json"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q -- "--frob" "$TMP/err" && ok || bad "unknown option: one line naming it"
expect_exit 2 "missing option value" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --steps
expect_exit 2 "--steps 0" -- "$PROG" run --steps 0 "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "--rng bogus" -- "$PROG" run --rng bogus "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "--seed -1" -- "$PROG" run --seed -1 "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "no case" -- "$PROG" run
expect_exit 2 "missing file" -- "$PROG" run "$TMP/nope.json"
grep -qF "$TMP/nope.json" "$TMP/err" && ok || bad "missing file is named"
mkdir -p "$TMP/empty_dir"
expect_exit 2 "directory without cases" -- "$PROG" run "$TMP/empty_dir"

# ---- bad case files ----------------------------------------------------------------------
L='{"name": "a", "op": "linear", "units": 4}'
bad_case "empty file" "empty" ''
bad_case "malformed JSON" "line" '{"name": "x", "input": {"shape": [2, 3]}, "layers": ['
bad_case "trailing garbage" "" '{"name": "x", "input": {"shape": [2, 3]}, "layers": ['"$L"']} xx'
bad_case "unknown op" "layers[0] (a).op" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "conv4d"}]}'
bad_case "unknown key" "lyers" '{"name": "x", "input": {"shape": [2, 3]}, "lyers": []}'
bad_case "unknown layer key" "layers[0] (a).unit" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "linear", "unit": 4}]}'
bad_case "wrong type" "layers[0] (a).units" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "linear", "units": "4"}]}'
bad_case "negative size" "layers[0] (a).units" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "linear", "units": -4}]}'
bad_case "zero dim" "input.shape" '{"name": "x", "input": {"shape": [2, 0]}, "layers": ['"$L"']}'
bad_case "overflowing shape" "input.shape" '{"name": "x", "input": {"shape": [4294967296, 4294967296, 4]}, "layers": ['"$L"']}'
bad_case "later input" "layers[0] (a).inputs[0]" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "relu", "inputs": ["b"]}, {"name": "b", "op": "relu"}]}'
bad_case "duplicate layer name" "layers[1]" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "relu"}, {"name": "a", "op": "relu"}]}'
bad_case "overlapping segments" "checkpoint.segments[1]" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "relu"}, {"name": "b", "op": "relu"}, {"name": "c", "op": "relu"}], "checkpoint": {"segments": [["a", "b"], ["b", "c"]]}}'
bad_case "add shapes" "layers[2]" '{"name": "x", "input": {"shape": [2, 3]}, "layers": [{"name": "a", "op": "linear", "units": 4}, {"name": "b", "op": "linear", "units": 5}, {"name": "s", "op": "add", "inputs": ["a", "b"]}]}'
bad_case "kernel larger than valid input" "layers[0]" '{"name": "x", "input": {"shape": [1, 1, 4, 4]}, "layers": [{"name": "c", "op": "conv2d", "filters": 2, "kernel": 5}]}'

# ---- running cases -----------------------------------------------------------------------
expect_exit 0 "unet3d_bn passes" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/unet.json"
[ -f "$TMP/unet.json" ] && ok || bad "report file written"
grep -q '"schema_version"' "$TMP/unet.json" && ok || bad "report has schema_version"
[ -z "$(ls "$TMP" | grep '\.tmp\.')" ] && ok || bad "no temporary report file left behind"
grep -q "report: $TMP/unet.json" "$TMP/out" && ok || bad "the report path is printed"
expect_exit 0 "unet3d_bn again" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/unet2.json" --quiet
# the run metadata holds the host, the clock and the command line: compare the rest
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); [x.pop('run') for x in (a, b)]; [r.pop(k, None) for x in (a, b) for r in x['runs'].values() for k in ('wall_time_s', 'step_wall_s', 'train_wall_s')]; sys.exit(a != b)" "$TMP/unet.json" "$TMP/unet2.json" \
    && ok || bad "two runs give the same reports (wall times and run metadata aside)"
expect_exit 0 "unet3d_bn --reproducible" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/unet3.json" --quiet --reproducible
expect_exit 0 "unet3d_bn --reproducible again" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/unet4.json" --quiet --reproducible
sed 's/unet3.json/unetN.json/' "$TMP/unet3.json" >"$TMP/a"
sed 's/unet4.json/unetN.json/' "$TMP/unet4.json" >"$TMP/b"
cmp -s "$TMP/a" "$TMP/b" && ok || bad "two --reproducible runs give byte-identical reports"
expect_exit 1 "dropout under stateful fails a case expecting identical" -- \
    "$PROG" run "$ROOT/cases/mlp_dropout.json" --rng stateful
grep -q "mismatch" "$TMP/out" && ok || bad "the mismatch is printed"
# --rng stash: the global stream, rewound for each recomputation (preserve_rng_state). The
# plain run draws exactly what stateful's plain run draws (other masks than counter's), and
# the checkpointed run replays them: identical, where stateful is caught.
expect_exit 0 "dropout under stash is identical" -- \
    "$PROG" run "$ROOT/cases/mlp_dropout.json" --rng stash --dtype fp32 --report "$TMP/stash.json"
grep -q '"rng":[[:space:]]*"stash"' "$TMP/stash.json" && ok || bad "--rng stash: the report's policy is stash"
grep -q '"verdict":[[:space:]]*"mismatch"' "$TMP/stash.json" && bad "--rng stash: a tensor differs" || ok
"$PROG" run "$ROOT/cases/mlp_dropout.json" --rng stateful --dtype fp32 --report "$TMP/stateful.json" >/dev/null 2>&1
"$PROG" run "$ROOT/cases/mlp_dropout.json" --rng counter --dtype fp32 --report "$TMP/counter.json" >/dev/null 2>&1
plain_losses() { grep -m1 '"losses"' "$1"; }
ckpt_losses() { grep '"losses"' "$1" | sed -n 2p; }
[ -n "$(plain_losses "$TMP/stash.json")" ] && [ "$(plain_losses "$TMP/stash.json")" = "$(plain_losses "$TMP/stateful.json")" ] && ok || bad "--rng stash: plain losses are stateful's"
[ "$(plain_losses "$TMP/stash.json")" != "$(plain_losses "$TMP/counter.json")" ] && ok || bad "--rng stash: plain losses differ from counter's"
[ "$(ckpt_losses "$TMP/stash.json")" = "$(plain_losses "$TMP/stash.json")" ] && ok || bad "--rng stash: checkpointed losses equal plain"
[ "$(ckpt_losses "$TMP/stateful.json")" != "$(plain_losses "$TMP/stateful.json")" ] && ok || bad "--rng stateful: checkpointed losses differ"
expect_exit 1 "stash on the stateful canary: no mismatch to catch" -- \
    "$PROG" run "$ROOT/cases/canary_dropout_stateful.json" --rng stash
expect_exit 1 "batchnorm update fails a case expecting identical" -- \
    "$PROG" run "$ROOT/cases/cnn_bn.json" --bn-recompute update --report "$TMP/bn.json"
grep -q 'running_mean' "$TMP/out" && ok || bad "the summary names running_mean"
grep -q '"status":[[:space:]]*"fail"' "$TMP/bn.json" && ok || bad "the report says fail"
expect_exit 0 "every shipped case meets its expectation" -- "$PROG" run "$ROOT/cases" --quiet --report "$TMP/all"
missing=""
for f in "$ROOT"/cases/*.json; do
    n=$(basename "$f" .json)
    [ -f "$TMP/all/$n.json" ] || ls "$TMP/all" | grep -q "^$n\.[a-z0-9]*\.json$" || missing="$missing $n"
done
[ -z "$missing" ] && ok || bad "no report for:$missing"
[ -f "$TMP/all/unet3d_bn.bf16.json" ] && ok || bad "a case in three precisions writes one report per dtype"
grep -q "passed, 0 failed" "$TMP/out" && ok || bad "the run prints a closing count"
expect_exit 0 "gradcheck on the CNN" -- "$PROG" gradcheck --samples 8 "$ROOT/cases/cnn_bn.json"
grep -q "^PASS cnn_bn" "$TMP/out" && ok || bad "gradcheck prints PASS"
expect_exit 0 "list" -- "$PROG" list "$ROOT/cases"
grep -q "conv3d" "$TMP/out" && grep -q "unet3d_bn" "$TMP/out" && ok || bad "list shows ops and cases"

# ---- precision ---------------------------------------------------------------------------
expect_exit 0 "every case in every precision" -- "$PROG" run "$ROOT/cases" --dtype fp32,fp16,bf16 --quiet --report "$TMP/prec"
[ -f "$TMP/prec/unet3d_bn.fp16.json" ] && [ -f "$TMP/prec/unet3d_bn.bf16.json" ] && ok || bad "one report per (case, dtype)"
grep -q '"vs_fp32"' "$TMP/prec/unet3d_bn.fp16.json" && ok || bad "the fp16 report judges against fp32"
expect_exit 2 "--dtype fp8" -- "$PROG" run --dtype fp8 "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "--dtype twice" -- "$PROG" run --dtype fp16,fp16 "$ROOT/cases/mlp_dropout.json"
expect_exit 0 "the underflow case shows flushed gradients" -- "$PROG" run "$ROOT/cases/fp16_underflow_noscale.json" --rows 10
# long lines are wrapped at 80 columns: read the text with its line breaks joined
tr '\n' ' ' <"$TMP/out" | tr -s ' ' | grep -q "most flushed: step 0 grad fc1.weight (4096 of 4096)" && ok || bad "flushed counts printed"

expect_exit 0 "a .json report for a case in three dtypes" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --report "$TMP/mlp.json" --quiet
[ -f "$TMP/mlp.fp32.json" ] && [ -f "$TMP/mlp.fp16.json" ] && [ -f "$TMP/mlp.bf16.json" ] && ok || bad "FILE.<dtype>.json per dtype"
expect_exit 2 "a .json report for two cases" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" "$ROOT/cases/cnn_bn.json" --report "$TMP/two.json"

# ---- backends ----------------------------------------------------------------------------
expect_exit 2 "--backend cuda without a usable GPU (or without CUDA)" -- "$PROG" run --backend cuda "$ROOT/cases/mlp_dropout.json"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -qi "cuda" "$TMP/err" && ok || bad "--backend cuda: one line saying why"
expect_exit 2 "--backend tpu" -- "$PROG" run --backend tpu "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "--algo on the cpu backend" -- "$PROG" run --algo fastest "$ROOT/cases/mlp_dropout.json"
expect_exit 2 "gradcheck --backend cuda without a GPU" -- "$PROG" gradcheck --backend cuda "$ROOT/cases/mlp_dropout.json"
expect_exit 0 "--against cpu" -- "$PROG" run --against cpu "$ROOT/cases/cnn_bn.json" --report "$TMP/x.json" --rows 10
grep -q "vs cpu: identical" "$TMP/out" && grep -q '"cross_backend"' "$TMP/x.json" && ok || bad "cross-backend check printed and reported"
# the fast cpu backend (the default) against the reference, every shipped case and dtype,
# within the cross-backend tolerance (docs/cpu-backend.md)
expect_exit 0 "--against ref: every case, every dtype" -- "$PROG" run "$ROOT/cases/" --dtype fp32,fp16,bf16 --against ref --quiet
grep -q " passed, 0 failed" "$TMP/out" && ok || bad "--against ref: every run passed"
expect_exit 0 "--backend ref" -- "$PROG" run --backend ref "$ROOT/cases/cnn_bn.json" --report "$TMP/ref.json" --quiet
grep -q '"name":[[:space:]]*"ref"' "$TMP/ref.json" && ok || bad "the report names the ref backend"
# --threads: the same bits for 1 and 2 threads; the report says the threads and the ISA path
expect_exit 0 "--threads 1" -- "$PROG" run --threads 1 "$ROOT/cases/unet3d_bn.json" --dtype fp32,bf16 --report "$TMP/t1/" --quiet --reproducible
expect_exit 0 "--threads 2" -- "$PROG" run --threads 2 "$ROOT/cases/unet3d_bn.json" --dtype fp32,bf16 --report "$TMP/t2/" --quiet --reproducible
for dt in fp32 bf16; do
    grep -q '"device":.*1 thread, ' "$TMP/t1/unet3d_bn.$dt.json" && grep -q '"threads":[[:space:]]*1' "$TMP/t1/unet3d_bn.$dt.json" && ok || bad "report: 1 thread"
    grep -q '"threads":[[:space:]]*2' "$TMP/t2/unet3d_bn.$dt.json" && grep -q '"isa":[[:space:]]*"' "$TMP/t2/unet3d_bn.$dt.json" && ok || bad "report: threads and isa"
    grep -v 'wall_time_s\|"device"\|"threads"\|"command_line"' "$TMP/t1/unet3d_bn.$dt.json" >"$TMP/a"
    grep -v 'wall_time_s\|"device"\|"threads"\|"command_line"' "$TMP/t2/unet3d_bn.$dt.json" >"$TMP/b"
    cmp -s "$TMP/a" "$TMP/b" && ok || bad "--threads 1 and 2: identical reports ($dt)"
done
expect_exit 2 "--threads 0" -- "$PROG" run --threads 0 "$ROOT/cases/cnn_bn.json"
expect_exit 2 "--threads on the ref backend" -- "$PROG" run --backend ref --threads 2 "$ROOT/cases/cnn_bn.json"

# ---- dump and init ----------------------------------------------------------------------
expect_exit 0 "run --dump" -- "$PROG" run "$ROOT/cases/cnn_bn.json" --dump "$TMP/dump" --report "$TMP/d0.json" --quiet
[ -f "$TMP/dump/cnn_bn/manifest.json" ] && [ -f "$TMP/dump/cnn_bn/checkpointed/step_0001/grads.safetensors" ] && ok || bad "dump files and manifest written"
cmp -s "$ROOT/cases/cnn_bn.json" "$TMP/dump/cnn_bn/case.json" && ok || bad "dump holds a copy of the case file"
expect_exit 0 "the dumped step data (input, target) is the same in both runs" -- "$PROG" compare "$TMP/dump/cnn_bn/checkpointed/step_0001/data.safetensors" "$TMP/dump/cnn_bn/plain/step_0001/data.safetensors"
grep -qF "PASS identical: 2 compared" "$TMP/out" && ok || bad "dump data: both tensors identical"
expect_exit 1 "steps draw different data" -- "$PROG" compare "$TMP/dump/cnn_bn/plain/step_0000/data.safetensors:input" "$TMP/dump/cnn_bn/plain/step_0001/data.safetensors:input"
grep -q '"kind":	"data"' "$TMP/dump/cnn_bn/manifest.json" && ok || bad "manifest lists the data files"
expect_exit 0 "compare the dumped plain and checkpointed gradients" -- "$PROG" compare "$TMP/dump/cnn_bn/plain/step_0001/grads.safetensors" "$TMP/dump/cnn_bn/checkpointed/step_0001/grads.safetensors"
expect_exit 0 "run --init from the dumped weights" -- "$PROG" run "$ROOT/cases/cnn_bn.json" --init "$TMP/dump/cnn_bn/plain/init/weights.safetensors" --report "$TMP/d1.json" --quiet
python3 -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); [x.pop('run') for x in (a, b)]; [x['config'].pop('init_from') for x in (a, b)]; [r.pop(k, None) for x in (a, b) for r in x['runs'].values() for k in ('wall_time_s', 'step_wall_s', 'train_wall_s')]; sys.exit(a != b)" "$TMP/d0.json" "$TMP/d1.json" \
    && ok || bad "--init reproduces the run bit for bit"
grep -q '"sha256"' "$TMP/d1.json" && ok || bad "the report gives the sha256 of the --init file"
expect_exit 2 "--init with another case's weights" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --init "$TMP/dump/cnn_bn/plain/init/weights.safetensors"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "no tensor" "$TMP/err" && ok || bad "one line naming the missing tensor"
expect_exit 2 "--dump-activations without --dump" -- "$PROG" run --dump-activations "$ROOT/cases/cnn_bn.json"

# ---- bisect ------------------------------------------------------------------------------
expect_exit 0 "bisect the dropout canary" -- "$PROG" bisect "$ROOT/cases/canary_dropout_stateful.json" --report "$TMP/bisect.json"
tr '\n' ' ' <"$TMP/out" | tr -s ' ' | grep -q "cause: dropout \`drop1\` drew a different mask on recomputation (rng policy \`stateful\`)" && ok || bad "bisect story names the dropout and the policy"
grep -q '"culprit_segments"' "$TMP/bisect.json" && ok || bad "the report has a bisect section"
expect_exit 1 "run --bisect on a mismatching case" -- "$PROG" run --bisect --rng stateful "$ROOT/cases/mlp_dropout.json"
grep -q "^bisect mlp_dropout:" "$TMP/out" && grep -q "cause: dropout" "$TMP/out" && ok || bad "run --bisect tells the story"
expect_exit 0 "run --bisect on an identical case does not bisect" -- "$PROG" run --bisect "$ROOT/cases/unet3d_bn.json"
grep -q "^bisect" "$TMP/out" && bad "bisected an identical case" || ok
expect_exit 0 "run --noise-floor" -- "$PROG" run --noise-floor "$ROOT/cases/cnn_bn.json" --report "$TMP/nf.json" --rows 10
grep -q "noise floor: two plain runs are bitwise identical" "$TMP/out" && ok || bad "noise floor printed"
grep -q '"noise_floor"' "$TMP/nf.json" && ok || bad "noise floor in the report"
expect_exit 0 "run --verify-recompute" -- "$PROG" run --verify-recompute "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/vr.json"
grep -q '"recompute_check"' "$TMP/vr.json" && grep -q '"differing":[[:space:]]*0' "$TMP/vr.json" && ok || bad "recompute check in the report"
expect_exit 0 "bisect --help" -- "$PROG" bisect --help

# ---- transformer and U-Net ops ---------------------------------------------------
expect_exit 0 "bisect the GPT canary" -- "$PROG" bisect "$ROOT/cases/canary_gpt_stateful.json" --dtype fp32
# the story wraps at 80 columns: join its continuation lines before matching
sed -e ':a' -e 'N' -e '$!ba' -e 's/\n      / /g' "$TMP/out" | grep -q "cause: attention dropout \`b0_attn\` drew a different mask on recomputation (rng policy \`stateful\`)" && ok || bad "the GPT canary is bisected to the attention dropout"
expect_exit 1 "the GPT decoder under --rng stateful is caught" -- "$PROG" run --bisect --rng stateful --dtype fp32 "$ROOT/cases/gpt_decoder.json"
grep -q "cause: attention dropout \`b0_attn\` drew a different mask" "$TMP/out" && ok || bad "run --bisect --rng stateful names the attention dropout"
expect_exit 0 "gradcheck on the GPT decoder" -- "$PROG" gradcheck --samples 4 "$ROOT/cases/gpt_decoder.json"
expect_exit 0 "gradcheck on the Llama blocks" -- "$PROG" gradcheck --samples 4 "$ROOT/cases/llama_blocks.json"
expect_exit 0 "gradcheck on the op fixtures" -- "$PROG" gradcheck --samples 8 "$ROOT/tests/fixtures/torch/cases"
# casts that round are not checkable by finite differences: said so, never counted as passed
expect_exit 0 "gradcheck on the cast fixture" -- "$PROG" gradcheck --samples 8 "$ROOT/tests/fixtures/torch/cases/cast_ops.json"
grep -q "h16 (cast) *in0 *- *not checkable by finite differences: a cast to or from float16 rounds" "$TMP/out" && grep -q "fc1.weight *- *not checkable by finite differences: its gradient passes layer h16" "$TMP/out" && grep -q "out.weight *[0-9]" "$TMP/out" && ok || bad "gradcheck names the casts it cannot check and checks the rest: $(cat "$TMP/out")"
printf '%s' '{"name": "only_casts", "input": {"shape": [2, 3]}, "layers": [{"name": "h", "op": "cast", "to": "float16"}, {"name": "f", "op": "cast", "to": "float32", "from": "float16"}]}' >"$TMP/only_casts.json"
expect_exit 1 "gradcheck of a case with nothing checkable fails" -- "$PROG" gradcheck "$TMP/only_casts.json"
grep -q "no gradient of the case can be checked by finite differences" "$TMP/out" && grep -q "^FAIL only_casts" "$TMP/out" && ok || bad "gradcheck says it compared nothing: $(cat "$TMP/out")"
expect_exit 0 "list shows the new ops" -- "$PROG" list
grep -q "conv_transpose3d" "$TMP/out" && grep -q "attention" "$TMP/out" && grep -q "rmsnorm" "$TMP/out" && ok || bad "list names conv_transpose3d, attention, rmsnorm"
expect_exit 0 "dump what a reproduction needs" -- "$PROG" run "$ROOT/tests/fixtures/torch/cases/transformer_ops.json" --dtype fp32 --dump "$TMP/dtr" --dump-optimizer --dump-activation-grads
M=$(find "$TMP/dtr" -name manifest.json | head -n 1)
D=$(dirname "${M:-$TMP/dtr/none}")
[ -f "$D/plain/step_0000/data.safetensors" ] && [ -f "$D/checkpointed/step_0001/data.safetensors" ] && ok || bad "input and target of every step dumped"
[ -f "$D/plain/step_0000/random.safetensors" ] && grep -q '"attn.mask"' "$D/plain/step_0000/random.safetensors" && ok || bad "the attention dropout mask dumped"
[ -f "$D/plain/step_0001/optimizer.safetensors" ] && grep -q '"tok.weight.state1"' "$D/plain/step_0001/optimizer.safetensors" && ok || bad "optimizer state dumped on request"
[ -f "$D/plain/step_0000/activation_grads.safetensors" ] && ok || bad "activation gradients dumped on request"
grep -q '"config"' "$M" && grep -q '"segments"' "$M" && grep -q '"adamw"' "$M" && grep -q '"ignore_index":[[:space:]]*3' "$M" && ok || bad "the manifest carries the config"
expect_exit 2 "--dump-optimizer without --dump" -- "$PROG" run --dump-optimizer "$ROOT/cases/mlp_dropout.json"

# A case the backend does not run is skipped with the reason, the rest run, and the exit code
# comes from what ran (cpu-as-cuda refuses what the CUDA backend refuses: low-precision
# reductions); when nothing is left to run, exit 2.
mkdir -p "$TMP/mixed"
cp "$ROOT/cases/canary_lowp_reduction.json" "$ROOT/cases/conv1d_seq.json" "$TMP/mixed/"
expect_exit 0 "an unsupported case is skipped, the rest run" -- "$PROG" run "$TMP/mixed" --backend cpu-as-cuda \
    --quiet --report "$TMP/mixed_rep/"
grep -q '^PASS conv1d_seq fp32' "$TMP/out" && ok || bad "the supported case ran: $(cat "$TMP/out")"
grep -q '^SKIP canary_lowp_reduction fp16: .*low-precision reductions' "$TMP/out" && ok ||
    bad "the skip names its reason: $(cat "$TMP/out")"
grep -q '2 skipped' "$TMP/out" && ok || bad "the skips are counted: $(cat "$TMP/out")"
grep -q '"skipped":	2' "$TMP/mixed_rep/summary.json" && ok || bad "the summary counts the skips"
expect_exit 2 "nothing left to run" -- "$PROG" run "$ROOT/cases/canary_lowp_reduction.json" --backend cpu-as-cuda --quiet
grep -q 'nothing to run' "$TMP/err" && ok || bad "nothing to run is said: $(cat "$TMP/err")"
# plan: predicted peaks equal the report's measured ones; --memory-limit refuses up front
expect_exit 0 "plan a case" -- "$PROG" plan "$ROOT/cases/unet3d_bn.json" --dtype fp32
PP=$(awk '/^  plain peak / {print $3}' "$TMP/out"); CP=$(awk '/^  checkpointed peak / {print $3}' "$TMP/out")
grep -q "segment 1 \[mid .. skip\] peak" "$TMP/out" && ok || bad "plan prints each segment's peak"
expect_exit 0 "run the planned case" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --report "$TMP/plan.json"
tr -d ' \t\n' <"$TMP/plan.json" | grep -q "\"plain\":{[^}]*\"peak_activation_bytes\":$PP," && ok || bad "plan's plain peak $PP is the measured one"
tr -d ' \t\n' <"$TMP/plan.json" | grep -q "\"checkpointed\":{[^}]*\"peak_activation_bytes\":$CP," && ok || bad "plan's checkpointed peak $CP is the measured one"
expect_exit 2 "plan without a case" -- "$PROG" plan
expect_exit 2 "plan with a bad dtype" -- "$PROG" plan "$ROOT/cases/unet3d_bn.json" --dtype fp8
expect_exit 2 "a memory limit below the plain peak" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --memory-limit $((PP - 1)) --report "$TMP/lim.json"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "plain run is predicted to need $PP bytes of activations, the --memory-limit is $((PP - 1)) bytes" "$TMP/err" && ok || bad "one line with predicted and available bytes: $(cat "$TMP/err")"
[ ! -f "$TMP/lim.json" ] && ok || bad "nothing ran under a memory limit that does not fit"
expect_exit 0 "a memory limit at the plain peak" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --dtype fp32 --memory-limit "$PP" --quiet
# a plain run over the limit whose checkpointed runs fit: verified segment by segment, said
expect_exit 0 "plan unet3d_groupnorm" -- "$PROG" plan "$ROOT/cases/unet3d_groupnorm.json" --dtype fp32
GP=$(awk '/^  plain peak / {print $3}' "$TMP/out")
grep -q "^  run keeping segment 2 peak " "$TMP/out" && ok || bad "plan prints each segment run's peak"
expect_exit 0 "a plain run over the limit, checkpointed runs within" -- "$PROG" run "$ROOT/cases/unet3d_groupnorm.json" --dtype fp32 --memory-limit $((GP - 1)) --rows 1 --report "$TMP/seg.json"
tr '\n' ' ' <"$TMP/err" | grep -q "the plain run is predicted to need $GP bytes of activations, the --memory-limit is $((GP - 1)) bytes: not run; segment by segment instead" && ok || bad "the note says the plain run is skipped: $(cat "$TMP/err")"
tr '\n' ' ' <"$TMP/out" | grep -q "plain run not run: predicted $GP bytes" && ok || bad "the report says which way: $(cat "$TMP/out")"
tr -d ' \t\n' <"$TMP/seg.json" | grep -q '"equivalence":{"method":"segment-by-segment","reason":"plain_over_memory_limit","plain_predicted_peak_bytes":'"$GP"',"memory_limit_bytes":'"$((GP - 1))" && ok || bad "the JSON equivalence section"
tr -d ' \t\n' <"$TMP/seg.json" | grep -q '"runs":{"plain":null,"segment_kept":{' && ok || bad "no plain run in the JSON runs"
expect_exit 0 "segment by segment catches the BatchNorm canary's double update (expected)" -- "$PROG" run "$ROOT/cases/canary_bn_update.json" --dtype fp32 --plain segment-by-segment --rows 3
grep -q "^case canary_bn_update: PASS, verdict mismatch" "$TMP/out" && grep -q "first buffer bn1.running_" "$TMP/out" && ok || bad "the canary's mismatch and buffer are named: $(cat "$TMP/out")"
expect_exit 0 "segment by segment in JUnit and HTML" -- "$PROG" run "$ROOT/cases/unet3d_groupnorm.json" --dtype fp32 --memory-limit $((GP - 1)) --junit "$TMP/seg.xml" --html "$TMP/seg.html" --quiet
grep -q "plain-equivalence established segment by segment (the plain run is predicted not to fit the memory limit)" "$TMP/seg.xml" && ok || bad "JUnit says which way equivalence was established"
grep -q "plain-equivalence established segment by segment" "$TMP/seg.html" && grep -q "(predicted) &#8594;" "$TMP/seg.html" && ok || bad "HTML says which way, with the plain peak predicted"
expect_exit 2 "--plain with a bad mode" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --plain half
expect_exit 2 "segment by segment with --against" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --dtype fp32 --plain segment-by-segment --against ref --report "$TMP/ag.json"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "against.*cannot run segment by segment" "$TMP/err" && [ ! -f "$TMP/ag.json" ] && ok || bad "one line, nothing written: $(cat "$TMP/err")"
# runs that fuse no relu's backward (bisect, dumping activation gradients, the precision
# judgement's calibration runs) need more than the plain run: --memory-limit predicts them
RC="$ROOT/tests/cli/cases/relu_conv_stack.json"
expect_exit 0 "plan relu_conv_stack" -- "$PROG" plan "$RC" --dtype fp32
RP=$(awk '/^  plain peak / {print $3}' "$TMP/out")
expect_exit 0 "relu_conv_stack dumping activation gradients" -- "$PROG" run "$RC" --dtype fp32 --dump "$TMP/rcdump" --dump-activation-grads --quiet --report "$TMP/rc.json"
UP=$(tr -d ' \t\n' <"$TMP/rc.json" | sed 's/.*"plain":{[^}]*"peak_activation_bytes":\([0-9]*\),.*/\1/')
[ -n "$RP" ] && [ -n "$UP" ] && [ "$UP" -gt "$RP" ] && ok || bad "a run keeping every output gradient needs more than the fused plain run ($UP > $RP)"
expect_exit 0 "a memory limit at the fused plain peak" -- "$PROG" run "$RC" --dtype fp32 --memory-limit "$RP" --quiet
expect_exit 2 "--bisect under a memory limit its trainings exceed" -- "$PROG" run "$RC" --dtype fp32 --memory-limit "$RP" --bisect --report "$TMP/rcb.json"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && grep -q "predicted to need $UP bytes of activations with every output gradient kept, the --memory-limit is $RP bytes" "$TMP/err" && [ ! -f "$TMP/rcb.json" ] && ok || bad "one line naming the unfused peak: $(cat "$TMP/err")"
expect_exit 0 "fp16 whose calibration runs exceed the limit: segment by segment" -- "$PROG" run "$RC" --dtype fp16 --memory-limit "$RP" --rows 0
tr '\n' ' ' <"$TMP/err" | grep -q "predicted to need $UP bytes of activations, the --memory-limit is $RP bytes: not run; segment by segment instead" && ok || bad "the fp32 references' unfused peak decides: $(cat "$TMP/err")"
expect_exit 2 "a memory limit that is not a number" -- "$PROG" run "$ROOT/cases/unet3d_bn.json" --memory-limit lots
expect_exit 0 "--memory-limit auto" -- "$PROG" run "$ROOT/cases/mlp_dropout.json" --dtype fp32 --memory-limit auto --quiet

echo "cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
