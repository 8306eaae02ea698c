#!/usr/bin/env bash
# The GPU machine's script (docs/cuda.md): builds ckpt-harness with the CUDA backend, runs
# the GPU test program, every shipped case on CUDA (plain vs checkpointed, bitwise under
# --algo deterministic where the case expects identity), CUDA against CPU within tolerance
# (tensor dumps compared file by file), and the seed's model at full size in fp32 and fp16,
# then prints a table of step time and peak activation memory, plain and checkpointed.
#
#   tests/gpu/run.sh OUT_DIR
#
# Everything it writes goes under OUT_DIR: run.log (this whole output), build/, logs/,
# reports/ (JSON), dumps/, compare/, seed/. Each stage has a timeout; the whole script aims
# to finish within CK_GPU_BUDGET_S (default 340 s) and skips what no longer fits, saying
# so. Exit status: 0 when every stage that ran passed, 1 otherwise, 2 on usage.
#
# Knobs (environment): CUDA_HOME, CUDNN_HOME (found with `find` when unset and not in the
# usual places), CK_DEBS_DIR (Debian packages to unpack when libcjson or zlib's headers are
# missing; tests/gpu/fetch-debs.sh fetches them), CK_DEVICE (0), CK_ALGO (deterministic),
# CK_BACKEND (cuda; `cpu` rehearses the script's plumbing on a machine without a GPU),
# CK_SEED_CASE (tests/gpu/cases/seed_unet_full.json), JOBS (nproc).
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: tests/gpu/run.sh OUT_DIR" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
mkdir -p "$OUT/logs" "$OUT/reports" "$OUT/dumps" "$OUT/compare" "$OUT/seed"
LOG="$OUT/run.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

START=$(date +%s)
BUDGET=${CK_GPU_BUDGET_S:-340}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
DEVICE=${CK_DEVICE:-0}
ALGO=${CK_ALGO:-deterministic}
BACKEND=${CK_BACKEND:-cuda}
SEED_CASE=${CK_SEED_CASE:-$ROOT/tests/gpu/cases/seed_unet_full.json}
B="$OUT/build"
PROG="$B/ckpt-harness"
TESTGPU="$B/test_gpu"
FAILED=0
SUMMARY=()

elapsed() { echo $(($(date +%s) - START)); }
log() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }
# stage NAME STATUS DETAIL: one row of the closing summary; FAIL marks the script failed
stage() {
    SUMMARY+=("$(printf '%-46s %-8s %s' "$1" "$2" "$3")")
    if [ "$2" = FAIL ]; then FAILED=1; fi
    log "$1: $2 $3"
}
# fits SECONDS: whether a stage needing that long still fits the budget
fits() { [ $((BUDGET - $(elapsed))) -ge "$1" ]; }
# bounded SECONDS CMD...: CMD with a timeout, cut to what is left of the budget (>= 10 s)
bounded() {
    local t=$1 left
    shift
    left=$((BUDGET - $(elapsed)))
    if [ "$left" -lt "$t" ]; then t=$left; fi
    if [ "$t" -lt 10 ]; then t=10; fi
    timeout --kill-after=10 "$t" "$@"
}
# jtop FILE KEY: a top-level scalar of a report (cJSON indents top-level keys by one tab)
jtop() {
    awk -v key="\"$2\":" 'index($0, "\t" key) == 1 { v = $0; sub(/^[^:]*:[ \t]*/, "", v);
        sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }' "$1"
}
# jrun FILE RUN KEY: a scalar inside runs.RUN of a report
jrun() {
    awk -v run="\"$2\":" -v key="\"$3\":" 'index($0, run) { inrun = 1 }
        inrun && index($0, key) { v = $0; sub(/.*:[ \t]*/, "", v); sub(/,.*/, "", v); print v; exit }' "$1"
}

log "ckpt-harness GPU run in $OUT (budget ${BUDGET}s, backend $BACKEND, algo $ALGO, device $DEVICE)"

# ---------------------------------------------------------------------------------------
# 0. the machine and the toolchain
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv || true
fi
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -x "$CUDA_HOME/bin/nvcc" ]; then "$CUDA_HOME/bin/nvcc" --version | tail -n 2; fi
if [ -z "${CUDNN_HOME:-}" ] && [ ! -e /usr/include/x86_64-linux-gnu/cudnn.h ] &&
    [ ! -e /usr/include/cudnn.h ] && [ ! -e "$CUDA_HOME/include/cudnn.h" ]; then
    hdr=$(find / -xdev -name cudnn.h -path '*include*' 2>/dev/null | head -n 1 || true)
    if [ -n "$hdr" ]; then
        CUDNN_HOME=$(dirname "$(dirname "$hdr")")
        export CUDNN_HOME
        log "cuDNN found under $CUDNN_HOME"
    fi
fi
find / -xdev \( -name 'libcudnn.so.9' -o -name 'cudnn_version.h' \) 2>/dev/null | head -n 4 || true

# Missing build dependencies come from Debian packages unpacked under OUT/deps.
DEPS="$OUT/deps"
DEBS=${CK_DEBS_DIR:-$ROOT/tests/gpu/debs}
unpack() { # unpack PACKAGE-GLOB: dpkg -x the first matching .deb in DEBS into DEPS
    local deb
    deb=$(ls "$DEBS"/$1 2>/dev/null | head -n 1 || true)
    if [ -z "$deb" ]; then
        log "missing $1 in $DEBS (run tests/gpu/fetch-debs.sh on a machine with apt)"
        return 1
    fi
    dpkg -x "$deb" "$DEPS"
}
if ! pkg-config --exists libcjson 2>/dev/null; then
    log "libcjson not installed: unpacking it from $DEBS"
    mkdir -p "$DEPS"
    unpack 'libcjson1_*.deb' || true
    unpack 'libcjson-dev_*.deb' || true
    for pc in "$DEPS"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
        [ -e "$pc" ] && sed -i "s|=/usr/|=$DEPS/usr/|" "$pc"
    done
    export PKG_CONFIG_PATH="$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! printf '#include <zlib.h>\nint main(void){return (int)zlibVersion()[0];}\n' |
    cc -x c - -o /dev/null -lz >/dev/null 2>&1; then
    log "zlib headers or libz.so missing: using $DEBS and the system's libz.so.1"
    mkdir -p "$DEPS/zlib/lib"
    if ls "$DEBS"/zlib1g-dev_*.deb >/dev/null 2>&1; then
        dpkg -x "$(ls "$DEBS"/zlib1g-dev_*.deb | head -n 1)" "$DEPS/zlib"
    fi
    so=$( (ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64/ { print $NF; exit }') || true)
    [ -n "$so" ] && ln -sf "$so" "$DEPS/zlib/lib/libz.so"
    export CPATH="$DEPS/zlib/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$DEPS/zlib/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
fi

# ---------------------------------------------------------------------------------------
# 1. build
CUDA_FLAG=1
TARGETS=("$PROG" "$TESTGPU")
if [ "$BACKEND" = cpu ]; then
    CUDA_FLAG=auto
    TARGETS=("$PROG")
fi
if bounded 300 make -C "$ROOT" -j"$JOBS" CUDA=$CUDA_FLAG BUILD="$B" "${TARGETS[@]}" \
    >"$OUT/logs/build.log" 2>&1; then
    stage "build (CUDA=$CUDA_FLAG)" PASS "$(grep -c 'nvcc ' "$OUT/logs/build.log" || true) nvcc compiles"
else
    tail -n 30 "$OUT/logs/build.log"
    stage "build (CUDA=$CUDA_FLAG)" FAIL "see logs/build.log"
    printf '%s\n' "${SUMMARY[@]}"
    exit 1
fi
"$PROG" --version || true

# ---------------------------------------------------------------------------------------
# 2. the GPU test program: every op vs the CPU, masks, determinism, gradchecks, records
if [ -x "$TESTGPU" ]; then
    if bounded 180 "$TESTGPU" --device "$DEVICE" --algo "$ALGO" >"$OUT/logs/test_gpu.log" 2>&1; then
        stage "GPU op suite (test_gpu)" PASS "$(tail -n 1 "$OUT/logs/test_gpu.log")"
    else
        grep -E '^FAIL' "$OUT/logs/test_gpu.log" | head -n 40 || true
        stage "GPU op suite (test_gpu)" FAIL "$(tail -n 1 "$OUT/logs/test_gpu.log")"
    fi
else
    stage "GPU op suite (test_gpu)" SKIPPED "not built ($BACKEND)"
fi

BACKEND_ARGS=(--backend "$BACKEND")
if [ "$BACKEND" = cuda ]; then
    # --device and --algo where this CLI has them (they arrive with the CLI's CUDA wiring)
    help=$("$PROG" run --help 2>&1 || true)
    case "$help" in *--device*) BACKEND_ARGS+=(--device "$DEVICE") ;; esac
    case "$help" in *--algo*) BACKEND_ARGS+=(--algo "$ALGO") ;; esac
    case "$help" in *cuda*) ;; *) log "note: 'run --help' does not mention cuda; --backend cuda may be refused" ;; esac
fi

# ---------------------------------------------------------------------------------------
# 3. every shipped case on the backend: plain vs checkpointed as each case expects
if fits 60; then
    rc=0
    bounded 150 "$PROG" run "$ROOT/cases" "${BACKEND_ARGS[@]}" --report "$OUT/reports/cases" \
        --rows 3 >"$OUT/logs/cases.log" 2>&1 || rc=$?
    passed=$(grep -l '"status":[[:space:]]*"pass"' "$OUT"/reports/cases/*.json 2>/dev/null | wc -l)
    total=$(ls "$OUT"/reports/cases/*.json 2>/dev/null | wc -l)
    if [ "$rc" -eq 0 ]; then
        stage "shipped cases on $BACKEND (plain vs ckpt)" PASS "$passed/$total reports pass"
    else
        tail -n 20 "$OUT/logs/cases.log"
        stage "shipped cases on $BACKEND (plain vs ckpt)" FAIL "exit $rc, $passed/$total reports pass"
    fi
else
    stage "shipped cases on $BACKEND (plain vs ckpt)" SKIPPED "time budget"
fi

# ---------------------------------------------------------------------------------------
# 4. the backend against the CPU: every dumped tensor of every case, per dtype
for dt in fp32 fp16 bf16; do
    name="$BACKEND vs cpu, shipped cases, $dt"
    if ! fits 45; then
        stage "$name" SKIPPED "time budget"
        continue
    fi
    for side in cpu "$BACKEND"; do
        args=(--backend "$side")
        if [ "$side" = cuda ]; then args=("${BACKEND_ARGS[@]}"); fi
        rm -rf "$OUT/dumps/$side-$dt"
        bounded 120 "$PROG" run "$ROOT/cases" "${args[@]}" --dtype "$dt" --quiet \
            --dump "$OUT/dumps/$side-$dt" >"$OUT/logs/dump-$side-$dt.log" 2>&1 || true
    done
    files=0
    bad=0
    mkdir -p "$OUT/compare/$dt"
    while IFS= read -r f; do
        rel=${f#"$OUT/dumps/$BACKEND-$dt/"}
        ref="$OUT/dumps/cpu-$dt/$rel"
        files=$((files + 1))
        tag=$(echo "$rel" | tr '/' '_')
        if [ ! -e "$ref" ] ||
            ! "$PROG" compare "$f" "$ref" --quiet \
                --tolerances "$ROOT/tests/gpu/tolerances/cuda_vs_cpu.$dt.json" \
                --report "$OUT/compare/$dt/${tag%.safetensors}.json" \
                >"$OUT/compare/$dt/${tag%.safetensors}.log" 2>&1; then
            bad=$((bad + 1))
            echo "  outside tolerance or missing: $rel"
        fi
    done < <(find "$OUT/dumps/$BACKEND-$dt" -name '*.safetensors' 2>/dev/null | sort)
    if [ "$files" -eq 0 ]; then
        stage "$name" FAIL "no dumps (see logs/dump-$BACKEND-$dt.log)"
    elif [ "$bad" -eq 0 ]; then
        stage "$name" PASS "$files files within tests/gpu/tolerances/cuda_vs_cpu.$dt.json"
    else
        stage "$name" FAIL "$bad of $files files outside tolerance (compare/$dt/)"
    fi
done

# ---------------------------------------------------------------------------------------
# 5. the seed's model at full size: step time and peak activation memory
seed_name=$(basename "$SEED_CASE" .json)
for dt in fp32 fp16; do
    if [ -x "$TESTGPU" ] && fits 60; then
        if bounded 150 "$TESTGPU" --bench "$SEED_CASE" --dtype "$dt" --device "$DEVICE" \
            --algo "$ALGO" --out "$OUT/seed/bench.txt" >"$OUT/logs/bench-$dt.log" 2>&1; then
            stage "seed model step timing, $dt" PASS "plain and checkpointed gradients bitwise equal"
        else
            tail -n 5 "$OUT/logs/bench-$dt.log"
            stage "seed model step timing, $dt" FAIL "see logs/bench-$dt.log"
        fi
    elif [ -x "$TESTGPU" ]; then
        stage "seed model step timing, $dt" SKIPPED "time budget"
    fi
    if fits 60; then
        rc=0
        bounded 170 "$PROG" run "$SEED_CASE" "${BACKEND_ARGS[@]}" --dtype "$dt" \
            --report "$OUT/reports/$seed_name.$dt.json" >"$OUT/logs/seed-$dt.log" 2>&1 || rc=$?
        r="$OUT/reports/$seed_name.$dt.json"
        if [ -f "$r" ] && [ "$(jtop "$r" verdict)" = identical ]; then
            stage "seed model via the CLI, $dt" PASS "plain vs checkpointed identical (exit $rc)"
        else
            tail -n 5 "$OUT/logs/seed-$dt.log"
            stage "seed model via the CLI, $dt" FAIL "verdict '$( [ -f "$r" ] && jtop "$r" verdict)', exit $rc"
        fi
    else
        stage "seed model via the CLI, $dt" SKIPPED "time budget"
    fi
done

# ---------------------------------------------------------------------------------------
# the table
echo
echo "seed model $(basename "$SEED_CASE"): $BACKEND, algo $ALGO, one training step"
printf '%-6s %-13s %13s %13s %16s %12s\n' dtype run "step_s(warm)" "step_s(first)" \
    peak_activations cli_run_s
for dt in fp32 fp16; do
    r="$OUT/reports/$seed_name.$dt.json"
    for run in plain checkpointed; do
        warm=-
        first=-
        peak=-
        cli=-
        if [ -f "$OUT/seed/bench.txt" ]; then
            line=$(awk -v d="$dt" -v r="$run" '$2 == d && $3 == r' "$OUT/seed/bench.txt" | tail -n 1)
            if [ -n "$line" ]; then
                first=$(echo "$line" | awk '{ print $5 }')
                warm=$(echo "$line" | awk '{ print $7 }')
                peak=$(echo "$line" | awk '{ printf "%.2f GiB", $9 / 1073741824 }')
            fi
        fi
        if [ -f "$r" ]; then
            cli=$(jrun "$r" "$run" wall_time_s | awk '{ printf "%.3f", $1 }')
            if [ "$peak" = - ]; then
                peak=$(jrun "$r" "$run" peak_activation_bytes | awk '{ printf "%.2f GiB", $1 / 1073741824 }')
            fi
        fi
        printf '%-6s %-13s %13s %13s %16s %12s\n' "$dt" "$run" "$warm" "$first" "$peak" "$cli"
    done
done
echo "(step_s: test_gpu --bench, GPU work of one step, data drawn beforehand; first includes"
echo " algorithm selection. cli_run_s: the CLI's wall time of the whole run, data included.)"
echo
echo "summary ($(elapsed) s):"
printf '  %s\n' "${SUMMARY[@]}"
if [ "$FAILED" -ne 0 ]; then
    echo "tests/gpu/run.sh: FAILED (logs and reports under $OUT)"
    exit 1
fi
echo "tests/gpu/run.sh: passed (logs and reports under $OUT)"
