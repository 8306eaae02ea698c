#!/bin/sh
# Activation memory against PyTorch (part of `make bench`; asserts nothing): for the seed
# model, a GPT block and a 2-D U-Net (tests/bench/cases/), plain and checkpointed, fp32:
#   predicted   `ckpt-harness plan`: the peak before running (a dry run of the schedule)
#   measured    the run's peak_activation_bytes (the accounting allocator)
#   held        live bytes after the forward: what the run keeps for backward
#   torch       PyTorch's saved-for-backward bytes (tests/bench/torch_memory.py: unique
#               storages through saved_tensors_hooks, parameters and the model input left
#               out as the harness leaves them out); checkpointed: the segment boundaries
#               plus the largest one segment's recomputation saves
#   torch_live  PyTorch's peak of saved tensors plus the activation gradients flowing
#               between autograd nodes, sampled after every node of the backward (and the
#               recomputations) ran: what the harness's peak counts, measured the same way
#               (a lower bound of PyTorch's live bytes: tensors held only by Python or
#               inside a kernel are not seen)
# The harness's peak counts the activation gradients live at that moment; PyTorch's
# saved-tensor bytes count none, so `measured / torch_live` is the like-for-like ratio,
# `measured / torch` the stricter one and `held / torch` compares what is kept for
# backward (checkpointed: held against the boundaries PyTorch saves).
# Usage: sh tests/bench/memory.sh [build/ckpt-harness [PYTHON]]
set -eu
PROG=${1:-build/ckpt-harness}
PY=${2:-/usr/bin/python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT INT TERM

# plan_field FILE LABEL: the byte count on the `plan` line that starts with LABEL
plan_field() { awk -v l="$2" 'index($0, "  " l " ") == 1 { for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes") { print $i; exit } }' "$1"; }
field() {
    awk -v run="\"$2\":" -v key="\"$3\":" '
        index($0, run) { inrun = 1 }
        inrun && index($0, key) { v = $0; sub(/.*: */, "", v); sub(/,.*/, "", v); print v; exit }
    ' "$1"
}
TORCH_OK=1
"$PY" -c "import torch" >/dev/null 2>&1 || TORCH_OK=0
[ "$TORCH_OK" = 1 ] || echo "(PyTorch not found for $PY: its columns are skipped)"
echo "activation memory, fp32, MiB (torch: PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -))"
printf '%-22s %-12s %9s %9s %9s %9s %14s %10s %10s %10s\n' model run predicted measured held torch measured/torch held/torch torch_live measured/live
row() { # row CASE TORCH_NAME
    f="$ROOT/tests/bench/cases/$1.json"
    "$PROG" plan "$f" --dtype fp32 >"$OUT/plan.txt"
    "$PROG" run "$f" --dtype fp32 --steps 1 --quiet --report "$OUT/r.json" >/dev/null 2>&1 || true
    t="- - - - - -"
    if [ "$TORCH_OK" = 1 ]; then
        t=$(OMP_NUM_THREADS=${CK_BENCH_THREADS:-1} "$PY" "$ROOT/tests/bench/torch_memory.py" "$2" 2>/dev/null | awk 'NF == 7 {print $2, $3, $4, $5, $6, $7}')
        [ -n "$t" ] || t="- - - - - -"
    fi
    set -- "$1" $t
    for run in plain checkpointed; do
        if [ "$run" = plain ]; then pred=$(plan_field "$OUT/plan.txt" "plain peak"); held=$(plan_field "$OUT/plan.txt" "plain held for backward")
        else pred=$(plan_field "$OUT/plan.txt" "checkpointed peak"); held=$(plan_field "$OUT/plan.txt" "checkpointed held for backward"); fi
        meas=$( [ -f "$OUT/r.json" ] && field "$OUT/r.json" "$run" peak_activation_bytes || echo nan)
        awk -v m="$1" -v run="$run" -v p="$pred" -v me="$meas" -v h="$held" -v tp="$2" -v tb="$3" -v tr="$4" -v ti="$5" -v lp="$6" -v lc="$7" 'BEGIN {
            M = 1048576
            if (tp == "-") t = -1; else if (run == "plain") t = tp - ti; else t = tb - ti + tr
            l = (tp == "-") ? -1 : (run == "plain" ? lp : lc)
            printf "%-22s %-12s %9.2f %9.2f %9.2f %9s %14s %10s %10s %10s\n", m, run, p / M, me / M, h / M,
                   (t < 0 ? "-" : sprintf("%.2f", t / M)), (t > 0 ? sprintf("%.3f", me / t) : "-"),
                   (t > 0 ? sprintf("%.3f", h / (run == "plain" ? t : tb - ti)) : "-"),
                   (l < 0 ? "-" : sprintf("%.2f", l / M)), (l > 0 ? sprintf("%.3f", me / l) : "-") }'
    done
}
row seed_unet_64x64x32 seed
row gpt_block_4x128x128 gpt
row unet2d_128 unet2d
