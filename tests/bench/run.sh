#!/bin/sh
# Benchmarks, four tables; asserts nothing (timings on shared machines are noisy: the load
# average is printed with the tables, and every figure is a best-of or a median).
#  1. wall time and measured peak activation memory of the plain and checkpointed runs of
#     every shipped case and of the bench models (tests/bench/cases/), default backend;
#  2. GEMM GFLOP/s of the cpu backend (tests/bench/sgemm_peak.c) and of numpy's BLAS
#     (tests/bench/numpy_sgemm.py) on the same shapes, run one after the other for
#     CK_BENCH_ROUNDS rounds (default 3), medians and their ratio; numpy at 1536^3 is the
#     peak the model table relates GFLOP/s to;
#  3. seconds per training step of the bench models on `ref`, on `cpu` (plain and
#     checkpointed: the checkpoint overhead) and in PyTorch (tests/bench/torch_bench.py:
#     the same models, same threads), cpu and PyTorch back to back in each round, the
#     ratios taken within a round, and GFLOP/s against the peak.
# Each Python anchor's BLAS is printed (tests/bench/anchor_info.py).
#  4. activation memory, predicted and measured, next to PyTorch's saved-for-backward bytes
#     for the seed model, a GPT block and a 2-D U-Net (tests/bench/memory.sh).
# Usage: sh tests/bench/run.sh [build/ckpt-harness [build/sgemm_peak]]
# CK_BENCH_THREADS (default: every core) sets the threads of cpu, numpy and PyTorch.
# CK_BENCH_PYTHON: the Python to try first for numpy and PyTorch (then python3 and
# /usr/bin/python3); a PyTorch whose BLAS is not the generic reference one is preferred.
# The anchors run with OPENBLAS_CORETYPE unset (a forced core type would slow the anchor).
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

# ---- 2. GEMM: cpu backend vs numpy, same shapes -------------------------------------------
THREADS=${CK_BENCH_THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
ROUNDS=${CK_BENCH_ROUNDS:-3}
CANDIDATES="${CK_BENCH_PYTHON:-} python3 /usr/bin/python3"
# pyenv PY: the environment a candidate runs in - the CUDA build of a PyPI torch needs its
# nvidia/*/lib folders (and the CUDA toolkit's lib64) on LD_LIBRARY_PATH even on the CPU
pyrun() {
    py=$1; shift
    libs=$("$py" -c 'import glob, sysconfig; print(":".join(glob.glob(sysconfig.get_paths()["purelib"] + "/nvidia/*/lib")))' 2>/dev/null || true)
    [ -d /usr/local/cuda/lib64 ] && libs="/usr/local/cuda/lib64${libs:+:$libs}"
    env -u OPENBLAS_CORETYPE LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        OPENBLAS_NUM_THREADS="$THREADS" OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" \
        "$py" "$@"
}
# pick MODULE: the first candidate importing MODULE whose BLAS is not the reference one,
# else the first importing it at all; prints "PY" or nothing
pick() {
    first=
    for py in $CANDIDATES; do
        command -v "$py" >/dev/null 2>&1 || continue
        info=$(pyrun "$py" "$ROOT/tests/bench/anchor_info.py" "$1" 2>/dev/null) || continue
        case $info in *"not importable"*|"") continue ;; esac
        [ -n "$first" ] || first=$py
        case $info in *BLAS_INFO=generic*|*"BLAS blas "*|*"BLAS cblas "*) ;; *) echo "$py"; return ;; esac
    done
    echo "$first"
}
NUMPY_PY=$(pick numpy)
TORCH_PY=$(pick torch)
echo
echo "machine: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //'), $(getconf _NPROCESSORS_ONLN) cores; load average at start:$(uptime | sed 's/.*load average://')"
[ -n "${OPENBLAS_CORETYPE:-}" ] && echo "(OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set here; the anchors run without it)"
if [ -n "$NUMPY_PY" ]; then echo "numpy anchor ($NUMPY_PY): $(pyrun "$NUMPY_PY" "$ROOT/tests/bench/anchor_info.py" numpy)"
else echo "numpy anchor: none (no candidate of: $CANDIDATES imports numpy)"; fi
if [ -n "$TORCH_PY" ]; then echo "PyTorch anchor ($TORCH_PY): $(pyrun "$TORCH_PY" "$ROOT/tests/bench/anchor_info.py" torch)"
else echo "PyTorch anchor: none (no candidate of: $CANDIDATES imports torch)"; fi
case $(pyrun "${TORCH_PY:-true}" "$ROOT/tests/bench/anchor_info.py" torch 2>/dev/null) in
    *BLAS_INFO=generic*) echo "  warning: this PyTorch uses the generic reference BLAS: a weak anchor for GEMM-bound models (set CK_BENCH_PYTHON to a Python with a current PyTorch)" ;;
esac

# the shapes: square 1024-2048; the MLP's GEMMs (x W^T, dy W, dy^T x); the GPT block's
# (512 tokens, width 384, MLP 1536); the U-Net's 3x3 convolutions as implicit GEMMs
SHAPES="1024x1024x1024 1536x1536x1536 2048x2048x2048 256x1024x1024t 256x1024x1024 1024x1024x256a 512x384x384t 512x1536x384t 512x384x1536t 384x384x512a 1536x384x512a conv:4,32,32,128,128 conv:4,64,64,64,64 conv:4,128,128,32,32"
: >"$OUT/gemm.cpu"; : >"$OUT/gemm.np"
ISA=?
# lines "ROUND SHAPE GFLOP/s", so that the ratio can be taken within a round
for r in $(seq "$ROUNDS"); do
    "$PEAK" "$THREADS" $SHAPES >"$OUT/g.cpu" 2>/dev/null && {
        ISA=$(awk '$1 == "isa" { print $2 }' "$OUT/g.cpu"); grep -v '^isa ' "$OUT/g.cpu" | sed "s/^/$r /" >>"$OUT/gemm.cpu"; }
    [ -n "$NUMPY_PY" ] && pyrun "$NUMPY_PY" "$ROOT/tests/bench/numpy_sgemm.py" $SHAPES 2>/dev/null | sed "s/^/$r /" >>"$OUT/gemm.np"
done
# median SHAPE FILE: the median GFLOP/s of SHAPE's lines in FILE, or nan
median() {
    awk -v s="$1" 'BEGIN { n = 0 } $2 == s { v[n++] = $3 } END {
        if (!n) { print "nan"; exit }
        for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        print (n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2) }' "$2"
}
# ratio_median SHAPE: the median over the rounds of cpu / numpy within the round, or nan
ratio_median() {
    awk -v s="$1" 'BEGIN { k = 0 } FNR == 1 { f++ } $2 == s { if (f == 1) c[$1] = $3; else np[$1] = $3 }
        END {
            for (r in c) if ((r in np) && np[r] > 0) v[k++] = c[r] / np[r]
            if (!k) { print "nan"; exit }
            for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
            print (k % 2 ? v[int(k / 2)] : (v[k / 2 - 1] + v[k / 2]) / 2) }' "$OUT/gemm.cpu" "$OUT/gemm.np"
}
echo
echo "GEMM GFLOP/s, $THREADS threads, median of $ROUNDS rounds (cpu ISA path $ISA; conv: implicit GEMM"
echo "with padding and packing, numpy: the bare GEMMs, im2col not counted); cpu/numpy: the median"
echo "of the rounds' ratios (cpu and numpy run back to back in each round)"
printf '%-24s %10s %10s %10s\n' shape cpu numpy cpu/numpy
for sh in $SHAPES; do
    c=$(median "$sh" "$OUT/gemm.cpu"); n=$(median "$sh" "$OUT/gemm.np"); q=$(ratio_median "$sh")
    awk -v s="$sh" -v c="$c" -v n="$n" -v q="$q" 'BEGIN { printf "%-24s %10s %10s %10s\n", s, c,
        (n == "nan" ? "-" : n), (q == "nan" ? "-" : sprintf("%.2f", q)) }'
done
PEAK_GF=$(median 1536x1536x1536 "$OUT/gemm.np")
PEAK_FROM="numpy at 1536^3"
if [ "$PEAK_GF" = nan ]; then PEAK_GF=$(median 1536x1536x1536 "$OUT/gemm.cpu"); PEAK_FROM="cpu backend at 1536^3 (no numpy)"; fi

# ---- 3. seconds per training step: ref, cpu, PyTorch -------------------------------------
# A step's time is the median of a run's train_wall_s past its first step (the first pays the
# page faults of fresh buffers), the way torch_bench.py times PyTorch's steps: train_wall_s
# is the part of step_wall_s that does what torch_bench.py's step does (zero the gradients,
# forward, loss, backward, update); the rest of step_wall_s is the harness's own work (the
# seeded draw of the step's input and target, the records' copies), shown as cpu_step_s. Each round
# times cpu and then PyTorch back to back, and the ratios (cpu/torch, checkpointed/plain)
# are taken within a round: on a shared machine the speed drifts by tens of percent over
# minutes, and a ratio of two figures taken minutes apart would carry that drift.
# steps_median FILE RUN KEY: the median of RUN's KEY (step_wall_s, train_wall_s) without
# its first step
steps_median() {
    awk -v run="\"$2\":" -v key="\"$3\":" '
        index($0, run) { inrun = 1 }
        inrun && index($0, key) {
            v = $0; sub(/.*\[/, "", v); sub(/\].*/, "", v)
            k = split(v, a, /, */); n = 0
            for (i = (k > 1 ? 2 : 1); i <= k; i++) t[n++] = a[i] + 0
            for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (t[j] < t[i]) { x = t[i]; t[i] = t[j]; t[j] = x }
            print (n % 2 ? t[int(n / 2)] : (t[n / 2 - 1] + t[n / 2]) / 2); exit }
        END { if (!inrun) print "nan" }' "$1"
}
# step_times CASE BACKEND STEPS [extra options]: prints "plain checkpointed plain_whole":
# the training times of the plain and checkpointed steps, and the plain run's whole step
step_times() {
    f=$1; be=$2; s=$3; shift 3
    "$PROG" run "$f" --backend "$be" "$@" --dtype fp32 --steps "$s" --quiet \
        --report "$OUT/st.json" >/dev/null 2>&1 || { echo "nan nan nan"; return; }
    echo "$(steps_median "$OUT/st.json" plain train_wall_s)" \
        "$(steps_median "$OUT/st.json" checkpointed train_wall_s)" \
        "$(steps_median "$OUT/st.json" plain step_wall_s)"
}
echo
echo "seconds per training step (fp32, one SGD step), $THREADS threads, cpu ISA path $ISA; the median"
echo "of 3 steps after a first, cpu and PyTorch timed back to back in each of $ROUNDS rounds; ref_s,"
echo "cpu_s: the training part of the step (train_wall_s: zero grads, forward, loss, backward,"
echo "update, what torch_s times); cpu_step_s: the whole plain step (step_wall_s: also the seeded"
echo "draw of the step's data and the records' copies); cpu_s, cpu_step_s, torch_s: medians over"
echo "the rounds; ckpt/pl (the checkpointed training over the plain one's; floor about 1.33 for"
echo "one extra forward), cpu/torch and step/torch: medians of the rounds' ratios; peak:"
echo "$PEAK_FROM, $PEAK_GF GFLOP/s"
[ -n "$TORCH_PY" ] || echo "(no PyTorch: its columns are skipped)"
printf '%-20s %7s %8s %8s %8s %10s %9s %8s %9s %10s %8s %6s  %s\n' model GFLOP ref_s cpu_s ckpt/pl cpu_step_s torch_s cpu/ref cpu/torch step/torch cpu_GF/s %peak "rounds' ckpt/pl, cpu/torch"
# model CASE TORCH_NAME GFLOP: GFLOP of one step (forward + backward, no gradient for the
# model input): mlp 11 GEMMs of 2*256*1024*1024; seed 2 * (2 * 14.16M + 59 * 3 * 56.62M)
# MACs; unet2d 2 * 4 * (2 * 1524.63M + 1510.47M) MACs; gpt 2 * 2868.9M MACs (per-layer
# counts in torch_bench.py)
model() {
    f="$ROOT/tests/bench/cases/$1.json"
    ref_s=$(step_times "$f" ref 2 | awk '{print $1}')
    : >"$OUT/rounds"
    for r in $(seq "$ROUNDS"); do
        t=$(step_times "$f" cpu 4 --threads "$THREADS")
        torch_s=nan
        if [ -n "$TORCH_PY" ]; then
            torch_s=$(pyrun "$TORCH_PY" "$ROOT/tests/bench/torch_bench.py" --threads "$THREADS" "$2" 2>/dev/null | awk '{print $2}')
            [ -n "$torch_s" ] || torch_s=nan
        fi
        echo "$t $torch_s" >>"$OUT/rounds"
    done
    awk -v m="$1" -v gf="$3" -v r="$ref_s" -v pk="$PEAK_GF" '
        function med(v, n,   i, j, x) {
            for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
            return n ? (n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2) : "nan" }
        BEGIN { n = 0; nt = 0 } # numeric: an unset n as a subscript is "", not 0 (mawk)
        # a round: plain training, checkpointed training, plain whole step, torch
        $1 != "nan" && $1 > 0 {
            p[n] = $1; k[n] = $2 / $1; w[n] = $3; n++
            if ($4 != "nan" && $4 > 0) { t[nt] = $4; q[nt] = $1 / $4; qw[nt] = $3 / $4; nt++ } }
        END {
            c = med(p, n); o = med(k, n); cw = med(w, n) # med sorts
            ts = med(t, nt); ct = med(q, nt); cwt = med(qw, nt)
            printf "%-20s %7.2f %8.3f %8.3f %8s %10.3f %9s %8s %9s %10s %8.1f %5.0f%%  %s, %s\n", m, gf, r, c,
                (n ? sprintf("%.2f", o) : "-"), cw,
                (nt ? sprintf("%.3f", ts) : "-"),
                (r > 0 && c > 0 ? sprintf("%.3f", c / r) : "-"),
                (nt ? sprintf("%.3f", ct) : "-"),
                (nt ? sprintf("%.3f", cwt) : "-"),
                (c > 0 ? gf / c : 0), (c > 0 && pk > 0 ? 100 * gf / c / pk : 0),
                (n ? sprintf("%.2f-%.2f", k[0], k[n - 1]) : "-"),
                (nt ? sprintf("%.2f-%.2f", q[0], q[nt - 1]) : "-") }' "$OUT/rounds"
}
model mlp_4x1024 mlp 5.905580032
model seed_unet_64x64x32 seed 20.10120192
model unet2d_128 unet2d 36.477861888
model gpt_block gpt 5.7378

# ---- 4. activation memory against PyTorch's saved-for-backward bytes ----------------------
echo
sh "$ROOT/tests/bench/memory.sh" "$PROG" /usr/bin/python3
echo "load average at end:$(uptime | sed 's/.*load average://')"
