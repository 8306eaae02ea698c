#!/usr/bin/env bash
# The GPU machine's script (docs/cuda.md, "A GPU run"): builds ckpt-harness with the CUDA
# backend (the program, the module ckpt-harness-cuda.so, checked to exist, and the GPU test
# program), runs the op table on CUDA against ref (test_gpu), every shipped case on CUDA
# (plain vs checkpointed; cases CUDA does not run are skipped and named), CUDA against the
# CPU (fp32: every dumped tensor; fp16/bf16: the harness's own judgements), the seed's model
# at full size in fp32 and fp16 after printing its predicted activation peak, then prints
# one table: stage, PASS/FAIL/SKIPPED/BUDGET, seconds, detail.
#
#   tests/gpu/run.sh OUT_DIR
#
# Everything it writes goes under OUT_DIR: run.log (this whole output), summary.txt (the
# table), deps/ (unpacked Debian packages), build/, logs/, reports/, dumps/, compare/,
# seed/. The whole script stays within CK_GPU_BUDGET_S seconds (default 330, so that it
# fits 6 minutes with the machine's start): every command runs under `timeout`, cut to what
# is left; a stage killed by that is BUDGET, a stage that no longer fits is not started and
# is BUDGET too; a stage that does not apply is SKIPPED. Neither counts as passed.
# Exit status: 0 when every required stage passed, 1 otherwise, 2 on usage. The table is
# printed on every path, including a failed build or an unexpected error.
#
# Knobs (environment):
#   CK_BACKEND      cuda (default) | cpu: the rehearsal, on a machine without a GPU
#                   (tests/cli/gpu_script.sh runs it in make check): every stage of the GPU
#                   run, with the same make targets, cases, budget and stage estimates, with
#                   the CPU standing in: the registry's cpu-as-cuda backend (the fast CPU
#                   backend refusing what CUDA refuses) for --backend cuda, and
#                   test_gpu --cpu-as-gpu; the seed model at CK_SEED_CASE's size (the full
#                   size needs a GPU), its full-size peak still predicted
#   CK_GPU_BUDGET_S whole-script budget in seconds (330)
#   CK_DEBS_DIR     Debian packages to unpack when libcjson or Check is missing
#                   (default tests/gpu/debs, filled by tests/gpu/fetch-debs.sh)
#   CK_DEVICE (0), CK_ALGO (deterministic), CUDA_HOME, CUDNN_HOME, JOBS (nproc)
#   CK_CASES_DIR    the cases to run (default cases/)
#   CK_SEED_CASE    the seed model (default tests/gpu/cases/seed_unet_full.json)
#   CK_GPU_BUILD_DIR  the build folder (default OUT/build; the rehearsal in make check
#                   passes make's own, so the build stage finds it up to date)
#   CK_SEED_FULL_CASE  the full-size seed model whose peak is predicted (default
#                   tests/gpu/cases/seed_unet_full.json)
#   CK_GPU_PROG     a ckpt-harness already built: no build stage (SKIPPED; tests use it)
#   CK_MAKE         the make command (default make)
#   CK_GPU_STAGE_NEED_S  the seconds every stage needs left to start (default: each
#                   stage's own estimate; tests set 1)
set -u
set -o pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: tests/gpu/run.sh OUT_DIR" >&2
    exit 2
fi
BACKEND=${CK_BACKEND:-cuda}
case "$BACKEND" in
cuda | cpu) ;;
*)
    echo "tests/gpu/run.sh: CK_BACKEND=$BACKEND: expected cuda or cpu" >&2
    exit 2
    ;;
esac
BUDGET=${CK_GPU_BUDGET_S:-330}
case "$BUDGET" in
'' | *[!0-9]*)
    echo "tests/gpu/run.sh: CK_GPU_BUDGET_S=$BUDGET: expected whole seconds" >&2
    exit 2
    ;;
esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! mkdir -p "$1" 2>/dev/null || ! OUT=$(cd "$1" && pwd); then
    echo "tests/gpu/run.sh: cannot create $1" >&2
    exit 2
fi
mkdir -p "$OUT/logs" "$OUT/reports" "$OUT/dumps" "$OUT/compare" "$OUT/seed"
LOG="$OUT/run.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!

START=$(date +%s)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
DEVICE=${CK_DEVICE:-0}
ALGO=${CK_ALGO:-deterministic}
CASES=${CK_CASES_DIR:-$ROOT/cases}
SEED_FULL=${CK_SEED_FULL_CASE:-$ROOT/tests/gpu/cases/seed_unet_full.json}
SEED_CASE=${CK_SEED_CASE:-$SEED_FULL}
MAKE_CMD=${CK_MAKE:-make}
B_MAKE=${CK_GPU_BUILD_DIR:-$OUT/build} # as make spells it (relative to the repository)
case "$B_MAKE" in "$ROOT"/*) B_MAKE=${B_MAKE#"$ROOT"/} ;; esac # make's own spelling: build/...
B=$B_MAKE
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
PROG=${CK_GPU_PROG:-$B/ckpt-harness}
TESTGPU="$B/test_gpu"
MODULE="$B/ckpt-harness-cuda.so"
GPU=0
RUN_BACKEND=cpu-as-cuda # the CLI's stand-in for cuda in the rehearsal
TESTGPU_ARGS=(--cpu-as-gpu)
if [ "$BACKEND" = cuda ]; then
    GPU=1
    RUN_BACKEND=cuda
    TESTGPU_ARGS=(--device "${CK_DEVICE:-0}" --algo "${CK_ALGO:-deterministic}")
fi

elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET - $(elapsed))); }
log() { printf '[%4ss] %s\n' "$(elapsed)" "$*"; }

# ---------------------------------------------------------------------------------------
# the table: one row per stage

ROW_NAME=()
ROW_STATUS=()
ROW_TIME=()
ROW_REQ=()
ROW_DETAIL=()
# record NAME REQUIRED(1|0) STATUS SECONDS DETAIL
record() {
    ROW_NAME+=("$1")
    ROW_REQ+=("$2")
    ROW_STATUS+=("$3")
    ROW_TIME+=("$4")
    ROW_DETAIL+=("$5")
    log "$1: $3${5:+ ($5)}"
}

FINISHED=0
finish() {
    local rc=$? failed=0 i req
    [ "$FINISHED" -eq 1 ] && return
    FINISHED=1
    if [ "$rc" -ne 0 ]; then
        record "script" 1 FAIL 0 "stopped early: exit $rc (see run.log)"
    fi
    for i in "${!ROW_NAME[@]}"; do
        if [ "${ROW_REQ[$i]}" -eq 1 ] && [ "${ROW_STATUS[$i]}" != PASS ]; then
            failed=$((failed + 1))
        fi
    done
    [ "${#ROW_NAME[@]}" -eq 0 ] && failed=1
    {
        echo
        echo "tests/gpu/run.sh summary ($BACKEND, algo $ALGO, $(elapsed) s of ${BUDGET} s budget):"
        printf '%-44s %-8s %-8s %6s  %s\n' stage status required time_s detail
        for i in "${!ROW_NAME[@]}"; do
            req=no
            [ "${ROW_REQ[$i]}" -eq 1 ] && req=yes
            printf '%-44s %-8s %-8s %6s  %s\n' "${ROW_NAME[$i]}" "${ROW_STATUS[$i]}" "$req" \
                "${ROW_TIME[$i]}" "${ROW_DETAIL[$i]}"
        done
        [ "${#ROW_NAME[@]}" -eq 0 ] && echo "(no stage ran)"
        if [ "$failed" -ne 0 ]; then
            echo "tests/gpu/run.sh: FAILED: $failed required stage(s) did not pass (logs under $OUT)"
        else
            echo "tests/gpu/run.sh: PASSED: every required stage passed (logs under $OUT)"
        fi
    } >"$OUT/summary.txt"
    cat "$OUT/summary.txt"
    exec 1>&- 2>&-
    wait "$TEE_PID" 2>/dev/null
    if [ "$failed" -ne 0 ]; then exit 1; fi
    exit 0
}
trap finish EXIT
trap 'exit 1' INT TERM

# bounded LIMIT CMD...: CMD under `timeout`, LIMIT cut to what is left of the budget;
# returns CMD's status, or 124/137 when it was killed
bounded() {
    local t=$1 l
    shift
    l=$(left)
    [ "$l" -lt "$t" ] && t=$l
    [ "$t" -lt 1 ] && return 124
    timeout --kill-after=5 "$t" "$@"
}
killed() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
# jnum FILE KEY: the first number a key holds anywhere in a report
jnum() { grep -m 1 -o "\"$2\":[[:space:]]*[0-9]*" "$1" | grep -o '[0-9]*$'; }
# jtop FILE KEY: a top-level scalar of a report (cJSON indents top-level keys by one tab)
jtop() {
    awk -v key="\"$2\":" 'index($0, "\t" key) == 1 { v = $0; sub(/^[^:]*:[ \t]*/, "", v);
        sub(/,$/, "", v); gsub(/"/, "", v); print v; exit }' "$1"
}

# stage NAME REQUIRED NEED_S FUNCTION: runs FUNCTION (which sets ST and DETAIL) when at
# least NEED_S seconds are left, else records BUDGET without starting it
stage() {
    local name=$1 req=$2 need=${CK_GPU_STAGE_NEED_S:-$3} fn=$4 t0
    if [ "$(left)" -lt "$need" ]; then
        record "$name" "$req" BUDGET 0 "not started: $(left) s left, needs about $need s"
        return
    fi
    t0=$(date +%s)
    ST=FAIL
    DETAIL=""
    "$fn"
    record "$name" "$req" "$ST" $(($(date +%s) - t0)) "$DETAIL"
}

log "ckpt-harness GPU script in $OUT (budget ${BUDGET} s, backend $RUN_BACKEND, algo $ALGO, device $DEVICE)"

# The stage list with each stage's estimate (the seconds it needs left to start): the same
# in the GPU run and the rehearsal. Their sum must fit the budget, or the plan is wrong
# before anything runs.
STAGE_PLAN=("build dependencies:1" "build:60" "op table (test_gpu):30" "shipped cases:20"
    "vs cpu fp32:15" "vs cpu fp16:15" "vs cpu bf16:15" "seed predicted peak:10"
    "seed fp32:40" "seed fp16:40" "seed timing fp32:40" "seed timing fp16:40")
PLAN_S=0
for st in "${STAGE_PLAN[@]}"; do PLAN_S=$((PLAN_S + ${st##*:})); done
log "stage plan: ${#STAGE_PLAN[@]} stages, estimates summing to $PLAN_S s of the $BUDGET s budget"
if [ -z "${CK_GPU_STAGE_NEED_S:-}" ] && [ "$PLAN_S" -gt "$BUDGET" ]; then
    record "stage plan" 1 FAIL 0 "the stage estimates sum to $PLAN_S s, over the $BUDGET s budget"
fi

# ---------------------------------------------------------------------------------------
# 0. the machine and the build dependencies (no search of the file system)

if [ "$GPU" -eq 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
    bounded 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
fi
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

deps_stage() {
    local debs=${CK_DEBS_DIR:-$ROOT/tests/gpu/debs} deps="$OUT/deps" deb unpacked=0 missing=""
    if [ "$GPU" -eq 1 ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then
        bounded 20 "$CUDA_HOME/bin/nvcc" --version | tail -n 1
    fi
    if [ -z "${CUDNN_HOME:-}" ]; then
        for d in /usr/local/cudnn /opt/nvidia/cudnn /usr/local/cuda/targets/x86_64-linux; do
            if [ -e "$d/include/cudnn.h" ]; then
                export CUDNN_HOME=$d
                break
            fi
        done
    fi
    # Debian packages for what pkg-config does not find: unpacked into OUT/deps with
    # dpkg -x, their .pc files pointed there
    if ! pkg-config --exists libcjson 2>/dev/null || ! pkg-config --exists check 2>/dev/null; then
        mkdir -p "$deps"
        for deb in "$debs"/libcjson1_*.deb "$debs"/libcjson-dev_*.deb "$debs"/check_*.deb \
            "$debs"/libsubunit0_*.deb "$debs"/libsubunit-dev_*.deb; do
            if [ -e "$deb" ] && dpkg -x "$deb" "$deps"; then unpacked=$((unpacked + 1)); fi
        done
        for pc in "$deps"/usr/lib/*/pkgconfig/*.pc "$deps"/usr/lib/pkgconfig/*.pc; do
            [ -e "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$deps/usr|; s|=/usr/|=$deps/usr/|" "$pc"
        done
        for d in "$deps"/usr/lib/*/pkgconfig "$deps"/usr/lib/pkgconfig; do
            [ -d "$d" ] && export PKG_CONFIG_PATH="$d${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
        done
        for d in "$deps"/usr/lib/x86_64-linux-gnu "$deps"/usr/lib; do
            if [ -d "$d" ]; then
                export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
                export LIBRARY_PATH="$d${LIBRARY_PATH:+:$LIBRARY_PATH}"
            fi
        done
    fi
    # zlib's headers (harness/io/npz.c): zlib1g-dev's, with zlib1g's library beside them
    if ! printf '#include <zlib.h>\n' | cc -E -x c - >/dev/null 2>&1; then
        mkdir -p "$deps"
        for deb in "$debs"/zlib1g_*.deb "$debs"/zlib1g-dev_*.deb; do
            if [ -e "$deb" ] && dpkg -x "$deb" "$deps"; then unpacked=$((unpacked + 1)); fi
        done
        if [ -e "$deps/usr/include/zlib.h" ]; then
            export CPATH="$deps/usr/include${CPATH:+:$CPATH}"
            for d in "$deps"/usr/lib/x86_64-linux-gnu "$deps"/lib/x86_64-linux-gnu; do
                [ -d "$d" ] && export LIBRARY_PATH="$d${LIBRARY_PATH:+:$LIBRARY_PATH}" &&
                    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            done
        else
            missing="$missing zlib.h"
        fi
    fi
    pkg-config --exists libcjson 2>/dev/null || missing="$missing libcjson"
    pkg-config --exists check 2>/dev/null || missing="$missing check"
    if [ -n "$missing" ]; then
        DETAIL="missing:$missing ($unpacked .deb unpacked from $debs; tests/gpu/fetch-debs.sh fetches them)"
        # Check is needed for make check only, not by this script
        case "$missing" in *libcjson* | *zlib*) ST=FAIL ;; *) ST=PASS ;; esac
        return
    fi
    ST=PASS
    DETAIL="libcjson and check found${CUDNN_HOME:+, CUDNN_HOME=$CUDNN_HOME}; $unpacked .deb unpacked"
}
stage "build dependencies" 1 1 deps_stage
DEPS_OK=$ST

# ---------------------------------------------------------------------------------------
# 1. build

BUILD_OK=0
build_stage() {
    # the GPU run insists on CUDA; the rehearsal builds what this machine's make builds
    # (CUDA from the environment, as make check passes it, else auto)
    local targets=() flag=${CUDA:-auto} rc=0 t missing=""
    [ "$GPU" -eq 1 ] && flag=1
    # the targets this build has: the program, and with the CUDA backend the module and
    # test_gpu (the Makefile says which; a CPU-only build here has no module to build)
    while IFS= read -r t; do
        case "$t" in "$B_MAKE"/*) targets+=("$t") ;; esac
    done < <(env -u MAKEFLAGS -u MFLAGS "$MAKE_CMD" -s -C "$ROOT" CUDA=$flag BUILD="$B_MAKE" \
        print-gpu-targets 2>"$OUT/logs/build-targets.log")
    if [ "${#targets[@]}" -eq 0 ]; then
        DETAIL="make print-gpu-targets named nothing (logs/build-targets.log)"
        return
    fi
    bounded 240 env -u MAKEFLAGS -u MFLAGS "$MAKE_CMD" -C "$ROOT" -j"$JOBS" CUDA=$flag \
        BUILD="$B_MAKE" "${targets[@]}" >"$OUT/logs/build.log" 2>&1 || rc=$?
    for t in "${targets[@]}"; do
        case "$t" in /*) ;; *) t="$ROOT/$t" ;; esac
        [ -f "$t" ] || missing="$missing ${t##*/}"
    done
    if [ "$GPU" -eq 1 ] && [ ! -f "$MODULE" ]; then missing="$missing ${MODULE##*/}"; fi
    if [ "$rc" -eq 0 ] && [ -z "$missing" ]; then
        ST=PASS
        DETAIL="CUDA=$flag, built ${#targets[@]} targets ($(for t in "${targets[@]}"; do printf '%s ' "${t##*/}"; done| sed 's/ $//'))"
        [ "${#targets[@]}" -eq 1 ] && DETAIL="$DETAIL; $(head -n 1 "$OUT/logs/build-targets.log")"
        BUILD_OK=1
    elif killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit (logs/build.log)"
    elif [ "$rc" -eq 0 ]; then
        DETAIL="make passed but did not produce:$missing (logs/build.log)"
    else
        tail -n 20 "$OUT/logs/build.log"
        DETAIL="exit $rc (logs/build.log)"
    fi
}
if [ -n "${CK_GPU_PROG:-}" ]; then
    if [ -x "$PROG" ]; then
        BUILD_OK=1
        record "build" 0 SKIPPED 0 "prebuilt program $PROG (CK_GPU_PROG)"
    else
        record "build" 1 FAIL 0 "CK_GPU_PROG=$PROG is not an executable"
    fi
elif [ "$DEPS_OK" != PASS ]; then
    record "build" 1 SKIPPED 0 "build dependencies missing"
else
    stage "build" 1 60 build_stage
fi

# later stages need the program; without it each is SKIPPED (and required ones fail)
need_prog() { # need_prog NAME REQUIRED: true when the program is there, else records SKIPPED
    if [ "$BUILD_OK" -ne 1 ]; then
        record "$1" "$2" SKIPPED 0 "no program (build did not pass)"
        return 1
    fi
    return 0
}

BACKEND_ARGS=(--backend "$RUN_BACKEND")
if [ "$GPU" -eq 1 ]; then BACKEND_ARGS+=(--device "$DEVICE" --algo "$ALGO"); fi

# ---------------------------------------------------------------------------------------
# 2. the GPU test program: every op against the CPU, masks, determinism, fp64 gradchecks

test_gpu_stage() {
    local rc=0 last
    bounded 120 "$TESTGPU" "${TESTGPU_ARGS[@]}" >"$OUT/logs/test_gpu.log" 2>&1 || rc=$?
    last=$(tail -n 1 "$OUT/logs/test_gpu.log")
    if killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit (logs/test_gpu.log)"
    elif grep -q '^test_gpu: SKIP' "$OUT/logs/test_gpu.log"; then
        ST=SKIPPED # no GPU: not a pass
        DETAIL=$last
    elif [ "$rc" -eq 0 ]; then
        ST=PASS
        DETAIL="$last; $(grep -m 1 '^op table on' "$OUT/logs/test_gpu.log")"
    else
        grep -E '^FAIL' "$OUT/logs/test_gpu.log" | head -n 20
        DETAIL="exit $rc: $last"
    fi
}
if need_prog "op table (test_gpu)" 1; then
    if [ -x "$TESTGPU" ]; then
        stage "op table (test_gpu)" 1 30 test_gpu_stage
    elif [ "$GPU" -eq 0 ] && [ -n "${CK_GPU_PROG:-}" ]; then
        record "op table (test_gpu)" 0 SKIPPED 0 "prebuilt program only (CK_GPU_PROG): no test_gpu"
    elif [ "$GPU" -eq 0 ]; then
        record "op table (test_gpu)" 0 SKIPPED 0 "no test_gpu in this build (no CUDA backend here)"
    else
        record "op table (test_gpu)" 1 FAIL 0 "no $TESTGPU"
    fi
fi

# ---------------------------------------------------------------------------------------
# 3. every shipped case on the backend: plain vs checkpointed as each case expects

cases_stage() {
    local rc=0 passed total skipped
    bounded 90 "$PROG" run "$CASES" "${BACKEND_ARGS[@]}" --report "$OUT/reports/cases/" \
        --rows 3 >"$OUT/logs/cases.log" 2>&1 || rc=$?
    # run reports only (the folder also holds the run's summary.json)
    total=$(grep -l '"schema":[[:space:]]*"ckpt-harness/report"' "$OUT"/reports/cases/*.json 2>/dev/null | wc -l)
    passed=$(grep -l '"schema":[[:space:]]*"ckpt-harness/report"' "$OUT"/reports/cases/*.json 2>/dev/null |
        while IFS= read -r f; do grep -l '"status":[[:space:]]*"pass"' "$f"; done | wc -l)
    # the cases the backend does not run: skipped, each named with its dtype
    skipped=$(grep '^SKIP ' "$OUT/logs/cases.log" | awk '{ printf "%s%s %s", (n++ ? ", " : ""), $2, $3 }' | sed 's/:$//; s/:,/,/g')
    if killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit, $passed/$total reports pass"
    elif [ "$rc" -eq 0 ] && [ "$total" -gt 0 ] && [ "$passed" -eq "$total" ]; then
        ST=PASS
        DETAIL="exit 0, $passed/$total reports pass${skipped:+; skipped: $skipped}"
    else
        tail -n 10 "$OUT/logs/cases.log"
        DETAIL="exit $rc, $passed/$total reports pass${skipped:+; skipped: $skipped} (logs/cases.log)"
    fi
}
if need_prog "shipped cases on $RUN_BACKEND" 1; then
    stage "shipped cases on $RUN_BACKEND" 1 20 cases_stage
fi

# ---------------------------------------------------------------------------------------
# 4. the backend against the CPU, per dtype. fp32: every tensor the CPU dumps, element by
#    element within tests/gpu/tolerances/cuda_vs_cpu.fp32.json. fp16/bf16: the harness's
#    own judgements, not element-wise tolerances (over a few Adam steps near-zero gradient
#    noise becomes whole steps): `run --against cpu`, each case's low-precision run judged
#    against its fp32 run by the calibrated precision judgement and the backend's plain
#    run against the CPU's by the cross-backend judgement.

DT=""
compare_stage() {
    local dt=$DT rc ref_rc=0 run_rc=0 files=0 bad=0 missing=0 f rel other tag
    local ref="$OUT/dumps/cpu-ref-$dt" mine="$OUT/dumps/$RUN_BACKEND-$dt"
    rm -rf "$ref" "$mine"
    bounded 60 "$PROG" run "$CASES" --backend cpu --dtype "$dt" --quiet --dump "$ref" \
        >"$OUT/logs/dump-cpu-ref-$dt.log" 2>&1 || ref_rc=$?
    if ! killed "$ref_rc"; then
        bounded 60 "$PROG" run "$CASES" "${BACKEND_ARGS[@]}" --dtype "$dt" --quiet --dump "$mine" \
            >"$OUT/logs/dump-$RUN_BACKEND-$dt.log" 2>&1 || run_rc=$?
    fi
    if killed "$ref_rc" || killed "$run_rc"; then
        ST=BUDGET
        DETAIL="a dump run was killed at the time limit (logs/dump-*-$dt.log)"
        return
    fi
    mkdir -p "$OUT/compare/$dt"
    while IFS= read -r f; do
        rel=${f#"$ref/"}
        other="$mine/$rel"
        files=$((files + 1))
        tag=$(printf '%s' "${rel%.safetensors}" | tr '/' '_')
        if [ ! -e "$other" ]; then
            # a case the backend does not run has no dump: skipped (named), not missing
            if grep -q "^SKIP ${rel%%/*} " "$OUT/logs/dump-$RUN_BACKEND-$dt.log" 2>/dev/null ||
                grep -q "^SKIP ${rel%%.*} $dt" "$OUT/logs/dump-$RUN_BACKEND-$dt.log" 2>/dev/null; then
                files=$((files - 1))
                continue
            fi
            missing=$((missing + 1))
            echo "  missing in the $RUN_BACKEND dump: $rel"
            continue
        fi
        if ! bounded 20 "$PROG" compare "$other" "$f" --quiet \
            --tolerances "$ROOT/tests/gpu/tolerances/cuda_vs_cpu.$dt.json" \
            --report "$OUT/compare/$dt/$tag.json" >"$OUT/compare/$dt/$tag.log" 2>&1; then
            bad=$((bad + 1))
            echo "  outside tolerance: $rel"
        fi
    done < <(find "$ref" -name '*.safetensors' 2>/dev/null | sort)
    if [ "$ref_rc" -ne 0 ] || [ "$run_rc" -ne 0 ]; then
        DETAIL="cpu run exit $ref_rc, $RUN_BACKEND run exit $run_rc (logs/dump-*-$dt.log); $bad of $files files outside tolerance, $missing missing"
    elif [ "$files" -eq 0 ]; then
        DETAIL="the CPU reference dumped nothing (logs/dump-cpu-ref-$dt.log)"
    elif [ "$bad" -ne 0 ] || [ "$missing" -ne 0 ]; then
        DETAIL="$bad of $files files outside tolerance, $missing missing (compare/$dt/)"
    else
        ST=PASS
        DETAIL="$files files within tests/gpu/tolerances/cuda_vs_cpu.$dt.json"
    fi
}
judged_stage() {
    local dt=$DT rc=0 line=""
    bounded 90 "$PROG" run "$CASES" "${BACKEND_ARGS[@]}" --dtype "$dt" --against cpu --quiet \
        --report "$OUT/reports/against-$dt/" >"$OUT/logs/against-cpu-$dt.log" 2>&1 || rc=$?
    local sum="$OUT/reports/against-$dt/summary.json"
    [ -f "$sum" ] && line="$(jnum "$sum" pass) passed, $(jnum "$sum" fail) failed, $(jnum "$sum" skipped) skipped"
    if killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit (logs/against-cpu-$dt.log)"
    elif [ "$rc" -eq 0 ] && [ -n "$line" ]; then
        ST=PASS
        DETAIL="run --against cpu: $line (calibrated precision and cross-backend judgements)"
    else
        grep -E '^(FAIL|ERROR|MISMATCH)' "$OUT/logs/against-cpu-$dt.log" | head -n 10
        DETAIL="run --against cpu exit $rc: ${line:-no summary} (logs/against-cpu-$dt.log)"
    fi
}
if need_prog "$RUN_BACKEND vs cpu, every dumped tensor, fp32" 1; then
    DT=fp32
    stage "$RUN_BACKEND vs cpu, every dumped tensor, fp32" 1 15 compare_stage
fi
for DT in fp16 bf16; do
    if need_prog "$RUN_BACKEND vs cpu, harness judgement, $DT" 1; then
        stage "$RUN_BACKEND vs cpu, harness judgement, $DT" 1 15 judged_stage
    fi
done

# ---------------------------------------------------------------------------------------
# 5. the seed's model at full size through the CLI: plain vs checkpointed, memory

SEED_NAME=$(basename "$SEED_CASE" .json)
INIT_ARGS=()
INIT_NOTE="default init"
if command -v python3 >/dev/null 2>&1 &&
    bounded 60 python3 "$ROOT/tests/gpu/he_init.py" "$SEED_CASE" "$OUT/seed/he_init.safetensors" \
        >"$OUT/logs/he_init.log" 2>&1; then
    INIT_ARGS=(--init "$OUT/seed/he_init.safetensors")
    INIT_NOTE="He-uniform init"
else
    log "no He-uniform weights (python3 missing or logs/he_init.log): the seed runs from the default init"
fi

# The full-size seed model's activation peak, predicted before any seed run: the engine's
# own accounting measured on the same layers at two small input sizes on the CPU, then
# scaled by the voxel ratio, which is exact when the two measurements scale exactly (every
# activation of this model is channels x voxels; checked here). It is the current engine's
# accounting (what the executor keeps for backward), beside PyTorch's measured peaks; cuDNN
# workspaces and the parameters come on top.
PREDICTED=""
predict_stage() {
    local dt sizes k probe r line=""
    if ! command -v python3 >/dev/null 2>&1; then
        DETAIL="needs python3 to write the probe cases"
        return
    fi
    for dt in fp32 fp16; do
        local peaks=()
        for sizes in "8 8 8" "16 8 8"; do
            probe="$OUT/seed/probe-${sizes// /x}.json"
            r="$OUT/seed/probe-${sizes// /x}.$dt.json"
            if ! python3 - "$SEED_FULL" "$probe" $sizes <<'PY'
import json, sys
case = json.load(open(sys.argv[1]))
shape = case["input"]["shape"]
sizes = [int(v) for v in sys.argv[3:]]
case["input"]["shape"] = shape[:2] + sizes[:len(shape) - 2]
case["name"] = "seed_probe"
json.dump(case, open(sys.argv[2], "w"))
PY
            then
                DETAIL="could not write a probe of $SEED_FULL"
                return
            fi
            if ! bounded 30 "$PROG" run "$probe" --backend cpu --dtype "$dt" --precision-check off \
                --quiet --report "$r" >"$OUT/logs/predict-$dt.log" 2>&1 && [ ! -f "$r" ]; then
                DETAIL="the probe run failed (logs/predict-$dt.log)"
                return
            fi
            peaks+=("$(jnum "$r" plain_peak_bytes) $(jnum "$r" checkpointed_peak_bytes)")
        done
        line="$line $(python3 - "$SEED_FULL" "$dt" "${peaks[0]}" "${peaks[1]}" <<'PY'
import json, sys
shape = json.load(open(sys.argv[1]))["input"]["shape"]
a = [int(v) for v in sys.argv[3].split()]
b = [int(v) for v in sys.argv[4].split()]
voxels = 1
for d in shape[2:]:
    voxels *= d
ratio = voxels / 512.0
exact = all(y == 2 * x for x, y in zip(a, b))
gib = [x * ratio / 2**30 for x in a]
torch = {"fp32": (28.5, 8.6), "fp16": (14.8, 4.8)}[sys.argv[2]]
print("%s plain %.1f GiB, checkpointed %.1f GiB (PyTorch on an H200: %.1f / %.1f GiB)%s;"
      % (sys.argv[2], gib[0], gib[1], torch[0], torch[1], "" if exact else " (approximate: the probes did not scale exactly)"))
PY
)"
    done
    PREDICTED=${line# }
    ST=PASS
    DETAIL="the current engine's activation accounting, before the run: ${PREDICTED%;}"
    log "seed model $(basename "$SEED_FULL" .json), predicted activation peak: ${PREDICTED%;}"
}
if need_prog "seed model predicted peak (full size)" 1; then
    stage "seed model predicted peak (full size)" 1 10 predict_stage
fi

seed_stage() {
    local dt=$DT rc=0 r="$OUT/reports/$SEED_NAME.$DT.json" verdict status
    rm -f "$r"
    bounded 150 "$PROG" run "$SEED_CASE" "${BACKEND_ARGS[@]}" "${INIT_ARGS[@]}" --dtype "$dt" \
        --report "$r" >"$OUT/logs/seed-$dt.log" 2>&1 || rc=$?
    if killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit (logs/seed-$dt.log)"
        return
    fi
    if [ ! -f "$r" ]; then
        tail -n 5 "$OUT/logs/seed-$dt.log"
        DETAIL="exit $rc, no report (logs/seed-$dt.log)"
        return
    fi
    verdict=$(jtop "$r" verdict)
    status=$(jtop "$r" status)
    if [ "$rc" -eq 0 ] && [ "$status" = pass ] && [ "$verdict" = identical ]; then
        ST=PASS
        DETAIL="exit 0, verdict identical, $INIT_NOTE"
    else
        tail -n 5 "$OUT/logs/seed-$dt.log"
        DETAIL="exit $rc, status '$status', verdict '$verdict', $INIT_NOTE (logs/seed-$dt.log)"
    fi
}
for DT in fp32 fp16; do
    if need_prog "seed model via the CLI, $DT" 1; then
        stage "seed model via the CLI, $DT" 1 40 seed_stage
    fi
done

# ---------------------------------------------------------------------------------------
# 6. step timing of the seed model (test_gpu --bench): informative, not required

bench_stage() {
    local rc=0
    bounded 90 "$TESTGPU" --bench "$SEED_CASE" --dtype "$DT" "${TESTGPU_ARGS[@]}" \
        --out "$OUT/seed/bench.txt" >"$OUT/logs/bench-$DT.log" 2>&1 || rc=$?
    if killed "$rc"; then
        ST=BUDGET
        DETAIL="killed at the time limit"
    elif [ "$rc" -eq 0 ]; then
        ST=PASS
        DETAIL="$(grep -m 1 ' checkpointed ' "$OUT/logs/bench-$DT.log")"
        [ "$GPU" -eq 1 ] && [ "$DT" = fp32 ] && DETAIL="$DETAIL (PyTorch 2.11 on an H200: 2450 ms plain, 2733 ms checkpointed)"
    else
        DETAIL="exit $rc (logs/bench-$DT.log)"
    fi
}
for DT in fp32 fp16; do
    if [ ! -x "$TESTGPU" ] && [ "$GPU" -eq 0 ]; then
        record "seed model step timing, $DT" 0 SKIPPED 0 "no test_gpu in this build"
    elif need_prog "seed model step timing, $DT" 0; then
        stage "seed model step timing, $DT" 0 40 bench_stage
    fi
done

# the seed model's memory, from the reports (the table above is the verdict)
for DT in fp32 fp16; do
    r="$OUT/reports/$SEED_NAME.$DT.json"
    [ -f "$r" ] && log "seed $DT: $(grep -m 1 -o '"saving":[^,]*' "$r" 2>/dev/null || true) $(grep -m 1 -o '"pool_peak_bytes":[^,]*' "$r" 2>/dev/null || true)"
done
exit 0
