#!/bin/sh
# End-to-end tests of `ckpt-harness import` and `run MODEL.onnx`: the imported case and its
# weights are written and run bitwise identically; bad files, unsupported nodes and bad
# options are one line and exit 2 with nothing written.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/onnx.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROG=${CK_PROG:-build/ckpt-harness}
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
FIX="$ROOT/tests/fixtures/onnx"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# refused DESC FRAGMENT -- command: exit 2, one stderr line containing FRAGMENT
refused() {
    desc=$1; frag=$2; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [ "$rc" -eq 2 ] || { bad "$desc: exit $rc, want 2"; return; }
    [ "$(wc -l <"$TMP/err")" -eq 1 ] || { bad "$desc: want one stderr line: $(cat "$TMP/err")"; return; }
    grep -qF -- "$frag" "$TMP/err" || { bad "$desc: '$(cat "$TMP/err")' lacks '$frag'"; return; }
    ok
}

"$PROG" import --help >"$TMP/out" 2>&1 && grep -q "usage: ckpt-harness import" "$TMP/out" && ok || bad "import --help"

# import writes a case and its weights, and the case runs
"$PROG" import "$FIX/unet3d.onnx" -o "$TMP/u/unet.json" >"$TMP/out" 2>"$TMP/err"
[ $? -eq 2 ] && ok || bad "import into a missing folder is refused"
mkdir -p "$TMP/u"
"$PROG" import "$FIX/unet3d.onnx" -o "$TMP/u/unet.json" --checkpoint every:3 --loss sum >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && ok || bad "import: exit $rc: $(cat "$TMP/err")"
[ -s "$TMP/u/unet.json" ] && [ -s "$TMP/u/unet.safetensors" ] && ok || bad "import wrote the case and weights"
grep -q '"from":[[:space:]]*"unet.safetensors"' "$TMP/u/unet.json" && ok || bad "init.from names the weights beside the case"
grep -q '"every":[[:space:]]*3' "$TMP/u/unet.json" && ok || bad "--checkpoint every:3 in the case"
grep -q '"name":[[:space:]]*"enc1"' "$TMP/u/unet.json" && ok || bad "layers are named after their modules"
(cd "$TMP" && "$PROG" run u/unet.json --dtype fp32 --quiet) >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "PASS unet3d fp32  identical" "$TMP/out" && ok || bad "the imported case runs identical: exit $rc $(cat "$TMP/out" "$TMP/err")"

# run MODEL.onnx directly, with the import's options
"$PROG" run "$FIX/small_cnn.onnx" --dtype fp32 --quiet --checkpoint every:2 --optimizer adam >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "PASS small_cnn fp32  identical" "$TMP/out" && ok || bad "run MODEL.onnx: exit $rc $(cat "$TMP/out" "$TMP/err")"
# the GPT-style block (int64 token input, attention pattern) with a segment per sub-block
"$PROG" run "$FIX/gpt_block.onnx" --dtype fp32 --quiet --checkpoint segments:ln1..Add_1,ln2..Add_4 --optimizer adam >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "PASS gpt_block fp32  identical" "$TMP/out" && ok || bad "run gpt_block.onnx: exit $rc $(cat "$TMP/out" "$TMP/err")"
"$PROG" import "$FIX/gpt_block.onnx" -o "$TMP/g.json" >"$TMP/out" 2>"$TMP/err"
grep -q '"dist":[[:space:]]*"tokens"' "$TMP/g.json" && grep -q '"op":[[:space:]]*"attention"' "$TMP/g.json" && ok || bad "gpt_block imports with a tokens input and an attention layer"
ls /tmp/ckpt-harness-onnx-* >/dev/null 2>&1 && bad "run MODEL.onnx left its temporary weights behind" || ok

# refusals
printf 'not a model' >"$TMP/junk.onnx"
refused "junk" "junk.onnx: onnx: " -- "$PROG" import "$TMP/junk.onnx" -o "$TMP/j.json"
[ ! -e "$TMP/j.json" ] && ok || bad "nothing written for a bad model"
head -c 500 "$FIX/small_cnn.onnx" >"$TMP/cut.onnx"
refused "truncated" "cut.onnx: onnx: " -- "$PROG" import "$TMP/cut.onnx" -o "$TMP/c.json"
refused "run truncated" "cut.onnx: onnx: " -- "$PROG" run "$TMP/cut.onnx"
refused "missing file" "nope.onnx" -- "$PROG" import "$TMP/nope.onnx" -o "$TMP/n.json"
refused "no -o" "-o CASE.json is required" -- "$PROG" import "$FIX/small_cnn.onnx"
refused "bad --checkpoint" "--checkpoint every:0" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --checkpoint every:0
refused "bad segment" "expected FIRST..LAST" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --checkpoint segments:conv1
refused "unknown segment layer" "nolayer" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --checkpoint segments:conv1..nolayer
refused "bad --loss" "loss" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --loss hinge
[ ! -e "$TMP/x.json" ] && ok || bad "nothing written for bad options"

# models that parse but cannot run (make_bad_models.py): one line naming the problem, exit 2,
# and neither the case, nor its weights, nor a temporary file written
for spec in "bad_weight_shape:\`conv.weight\` has shape [4, 3, 3, 3], the case needs [4, 2, 3, 3]" \
            "bad_repeated_perm:layers[1] (perm): permute: dims repeats dim 1" \
            "bad_pool_window:layers[1] (pool): pool window 8 is larger than the input 4" \
            "bad_bound_twice:the value \`r\` is produced more than once" \
            "bad_fold_perm:node \`fold_perm\` (Transpose): folding constants: Transpose perm repeats dim 1" \
            "bad_reducemean_no_input:node \`/ln/ReduceMean_1\` (ReduceMean): its input is produced by no supported node"; do
    m=${spec%%:*}
    frag=${spec#*:}
    rm -rf "$TMP/bad" && mkdir "$TMP/bad"
    refused "import $m" "$frag" -- "$PROG" import "$FIX/$m.onnx" -o "$TMP/bad/c.json" --weights "$TMP/bad/w.safetensors"
    [ -z "$(ls -A "$TMP/bad")" ] && ok || bad "import $m wrote $(ls -A "$TMP/bad")"
    refused "run $m" "$frag" -- env TMPDIR="$TMP/bad" "$PROG" run "$FIX/$m.onnx" --quiet
    [ -z "$(ls -A "$TMP/bad")" ] && ok || bad "run $m left $(ls -A "$TMP/bad")"
done
# external data (.onnx.data beside the model) and --check-against the framework's reference
C="$ROOT/tests/fixtures/onnx/corpus"
"$PROG" import "$C/unet3d_ts13_opset17.onnx" -o "$TMP/ok.json" --check-against "$C/unet3d.ref.npz" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "check-against .*unet3d.ref.npz: the import matches the framework in training mode" "$TMP/out" && grep -q "11 gradients" "$TMP/out" && [ -s "$TMP/ok.json" ] && ok || bad "--check-against a faithful export: exit $rc $(cat "$TMP/out" "$TMP/err")"
refused "folded BatchNorm (dynamo, external data)" "the exporter folded BatchNorm into the convolutions" -- "$PROG" import "$C/unet3d_dynamo.onnx" -o "$TMP/fold.json" --check-against "$C/unet3d.ref.npz"
[ ! -e "$TMP/fold.json" ] && ok || bad "nothing written for a folded import"
"$PROG" import "$C/llama_block_dynamo.onnx" -o "$TMP/ext.json" >"$TMP/out" 2>"$TMP/err" && grep -q '"op":[[:space:]]*"rmsnorm"' "$TMP/ext.json" && ok || bad "a model with external data imports: $(cat "$TMP/err")"
# the dynamo exporter's metadata says a Conv is a folded BatchNorm: refused without a reference
refused "folded BatchNorm seen in the dynamo exporter's metadata" "module enc1.1: node \`node_Conv_39\` (Conv): this Conv node is the exporter's rewrite of BatchNorm" -- "$PROG" import "$C/unet3d_dynamo.onnx" -o "$TMP/fold2.json"
[ ! -e "$TMP/fold2.json" ] && ok || bad "nothing written for a folded import without a reference"
refused "reference of another model" "\`output\` is [6, 10], the imported model's output is" -- "$PROG" import "$C/unet3d_ts13_opset17.onnx" -o "$TMP/o.json" --check-against "$C/resnet18.ref.npz"
refused "missing reference" "nope.npz" -- "$PROG" import "$C/unet3d_ts13_opset17.onnx" -o "$TMP/o.json" --check-against "$TMP/nope.npz"
cp "$C/unet3d_dynamo.onnx" "$TMP/lonely.onnx"
refused "external data file missing" "tensor \`" -- "$PROG" import "$TMP/lonely.onnx" -o "$TMP/o.json"
refused "refusal names the module" "module blocks.0.attn: node \`/blocks.0/attn/Cast\` (Cast): a Cast of an activation to int64 is not supported" -- "$PROG" import "$FIX/bad_module_cast.onnx" -o "$TMP/o.json"
refused "an op computed in float16 is refused, naming the module" "module blocks.0.mlp: node \`/blocks.0/mlp/Relu\` (Relu): reads \`h\`, a float16 value (a Cast made it): an op computed in float16 is not supported" -- "$PROG" import "$FIX/bad_half_compute.onnx" -o "$TMP/o.json"
# casts between float types import as cast layers (forward rounds, backward rounds to the source)
"$PROG" import "$FIX/cast_ops.onnx" -o "$TMP/cast.json" >"$TMP/out" 2>"$TMP/err" && grep -q '"to":[[:space:]]*"bfloat16"' "$TMP/cast.json" && grep -q '"from":[[:space:]]*"float16"' "$TMP/cast.json" && "$PROG" run "$TMP/cast.json" --dtype fp16 --quiet >"$TMP/out" 2>"$TMP/err" && ok || bad "casts between float types import and run: $(cat "$TMP/out" "$TMP/err")"
# nn.MultiheadAttention on the generic path (constant scaling, the -inf mask inside softmax)
"$PROG" import "$C/mha_block_ts13_opset17.onnx" -o "$TMP/mha.json" --loss mean --check-against "$C/mha_block.ref.npz" >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "the import matches the framework in training mode" "$TMP/out" && grep -q '"mask_shape"' "$TMP/mha.json" && ok || bad "MultiheadAttention imports and matches PyTorch: exit $rc $(cat "$TMP/out" "$TMP/err")"
# cross_entropy: the class axis of (N, L, V) logits, and the options
"$PROG" import "$FIX/gpt_block.onnx" -o "$TMP/ce.json" --loss cross_entropy --ignore-index 3 >"$TMP/out" 2>"$TMP/err"
grep -q '"class_dim":[[:space:]]*-1' "$TMP/ce.json" && grep -q '"ignore_index":[[:space:]]*3' "$TMP/ce.json" && ok || bad "cross_entropy on token logits: class_dim -1: $(cat "$TMP/err")"
"$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/ce2.json" --loss cross_entropy >"$TMP/out" 2>"$TMP/err"
grep -q '"class_dim":[[:space:]]*1' "$TMP/ce2.json" && ok || bad "cross_entropy on image logits: class_dim 1"
refused "--class-dim without cross_entropy" "--class-dim applies to --loss cross_entropy only" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --class-dim 1
refused "bad --class-dim" "--class-dim 9" -- "$PROG" import "$FIX/small_cnn.onnx" -o "$TMP/x.json" --loss cross_entropy --class-dim 9
"$PROG" run "$FIX/gpt_block.onnx" --dtype fp32 --quiet --loss cross_entropy --optimizer adamw >"$TMP/out" 2>"$TMP/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q "PASS gpt_block fp32  identical" "$TMP/out" && ok || bad "run gpt_block.onnx with cross_entropy and adamw: exit $rc $(cat "$TMP/out" "$TMP/err")"

echo "onnx: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
