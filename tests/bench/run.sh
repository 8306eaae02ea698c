#!/bin/sh
# Benchmarks, three tables; asserts nothing (timings on shared machines are noisy).
#  1. wall time and measured peak activation memory of the plain and checkpointed runs of
#     every shipped case and of the bench models (tests/bench/cases/), default backend;
#  2. seconds per training step (plain) of the bench models on `ref`, on `cpu` and in
#     PyTorch (tests/bench/torch_bench.py: the same models, same threads), the ratios, and
#     GFLOP/s against this machine's measured SGEMM peak (tests/bench/sgemm_peak.c);
#  3. activation memory, predicted and measured, next to PyTorch's saved-for-backward bytes
#     for the seed model, a GPT block and a 2-D U-Net (tests/bench/memory.sh).
# Usage: sh tests/bench/run.sh [build/ckpt-harness [build/sgemm_peak]]
# CK_BENCH_THREADS (default: every core) sets the threads of cpu and PyTorch.
set -eu
PROG=${1:-build/ckpt-harness}
PEAK=${2:-$(dirname "$PROG")/sgemm_peak}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT INT TERM

# field FILE RUN KEY: the number after "KEY": inside the "RUN": { ... } block of a report
field() {
    awk -v run="\"$2\":" -v key="\"$3\":" '
        index($0, run) { inrun = 1 }
        inrun && index($0, key) { v = $0; sub(/.*: */, "", v); sub(/,.*/, "", v); print v; exit }
    ' "$1"
}

printf '%-24s %5s %10s %10s %8s %12s %12s %8s\n' case dtype plain_s ckpt_s overhead plain_peak ckpt_peak saving
row() { # row CASE_FILE DTYPE
    f=$1; dt=$2
    name=$(basename "$f" .json)
    r="$OUT/$name.$dt.json"
    "$PROG" run "$f" --dtype "$dt" --quiet --report "$r" >/dev/null 2>&1 || true
    if [ ! -f "$r" ]; then printf '%-24s %5s (failed to run)\n' "$name" "$dt"; return; fi
    pt=$(field "$r" plain wall_time_s); ct=$(field "$r" checkpointed wall_time_s)
    pp=$(field "$r" plain peak_activation_bytes); cp=$(field "$r" checkpointed peak_activation_bytes)
    awk -v n="$name" -v dt="$dt" -v pt="$pt" -v ct="$ct" -v pp="$pp" -v cp="$cp" 'BEGIN {
        printf "%-24s %5s %10.3f %10.3f %7.0f%% %11.2fM %11.2fM %7.1f%%\n", n, dt, pt, ct,
               (pt > 0 ? 100 * (ct / pt - 1) : 0), pp / 1048576, cp / 1048576,
               (pp > 0 ? 100 * (1 - cp / pp) : 0) }'
}
for f in "$ROOT"/cases/*.json; do row "$f" fp32; done
for f in "$ROOT"/tests/bench/cases/*.json; do row "$f" fp32; row "$f" fp16; done

# ---- 2. seconds per training step: ref, cpu, PyTorch -------------------------------------
THREADS=${CK_BENCH_THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
# per-step time = (plain wall time of S2 steps - that of S1 steps) / (S2 - S1): model set-up,
# initialisation and the first step's page faults cancel out
step_time() { # step_time CASE BACKEND S1 S2 [extra options]
    f=$1; be=$2; s1=$3; s2=$4; shift 4
    for s in "$s1" "$s2"; do
        "$PROG" run "$f" --backend "$be" "$@" --dtype fp32 --steps "$s" --quiet \
            --report "$OUT/st.$s.json" >/dev/null 2>&1 || { echo "nan"; return; }
    done
    a=$(field "$OUT/st.$s1.json" plain wall_time_s); b=$(field "$OUT/st.$s2.json" plain wall_time_s)
    awk -v a="$a" -v b="$b" -v s1="$s1" -v s2="$s2" 'BEGIN { printf "%.4f", (b - a) / (s2 - s1) }'
}
TORCH_PY=
for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c "import torch" >/dev/null 2>&1; then
        TORCH_PY=$py; break
    fi
done
echo
set -- $("$PEAK" "$THREADS" 2>/dev/null || echo "nan ?")
PEAK_GF=$1; ISA=$2
echo "seconds per training step (plain, fp32), $THREADS threads, cpu ISA path $ISA;"
echo "measured sgemm peak (cpu backend, 1536^3): $PEAK_GF GFLOP/s"
[ -n "$TORCH_PY" ] || echo "(PyTorch not found: python3 -c 'import torch' fails, also /usr/bin/python3; its columns are skipped)"
printf '%-20s %9s %9s %9s %9s %9s %9s %9s %7s\n' model GFLOP ref_s cpu_s torch_s cpu/ref cpu/torch cpu_GF/s %peak
# model CASE TORCH_NAME GFLOP: GFLOP of one step (forward + backward, no gradient for the
# model input): mlp 11 GEMMs of 2*256*1024*1024; seed 2 * (2 * 14.16M + 59 * 3 * 56.62M)
# MACs; unet2d 2 * 4 * (2 * 1524.63M + 1510.47M) MACs (per-layer counts in torch_bench.py)
model() {
    f="$ROOT/tests/bench/cases/$1.json"
    ref_s=$(step_time "$f" ref 1 2)
    cpu_s=$(step_time "$f" cpu 1 3 --threads "$THREADS")
    torch_s=nan
    if [ -n "$TORCH_PY" ]; then
        torch_s=$("$TORCH_PY" "$ROOT/tests/bench/torch_bench.py" --threads "$THREADS" "$2" 2>/dev/null | awk '{print $2}')
        [ -n "$torch_s" ] || torch_s=nan
    fi
    awk -v m="$1" -v gf="$3" -v r="$ref_s" -v c="$cpu_s" -v t="$torch_s" -v pk="$PEAK_GF" 'BEGIN {
        printf "%-20s %9.2f %9.3f %9.3f %9s %9s %9s %9.1f %6.0f%%\n", m, gf, r, c,
               (t == "nan" ? "-" : sprintf("%.3f", t)),
               (r > 0 ? sprintf("%.3f", c / r) : "-"),
               (t != "nan" && t > 0 ? sprintf("%.3f", c / t) : "-"),
               (c > 0 ? gf / c : 0), (c > 0 && pk > 0 ? 100 * gf / c / pk : 0) }'
}
model mlp_4x1024 mlp 5.905580032
model seed_unet_64x64x32 seed 20.10120192
model unet2d_128 unet2d 36.477861888

# ---- 3. activation memory against PyTorch's saved-for-backward bytes ----------------------
echo
sh "$ROOT/tests/bench/memory.sh" "$PROG" "${TORCH_PY:-/usr/bin/python3}"
