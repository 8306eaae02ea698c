#!/bin/sh
# tests/gpu/run.sh end to end with the CPU standing in for CUDA (CK_BACKEND=cpu):
#  1-6. on tiny cases with a prebuilt program: its table and exit status in every branch —
#     all required stages pass; the seed run writes no report; a run whose verdict is
#     identical but whose CLI exit is 1 (a memory expectation); a build that fails
#     (everything after it SKIPPED); a budget that kills a stage (BUDGET) and leaves the
#     rest unstarted (BUDGET); usage errors;
#  7. the rehearsal of the GPU run: the same make targets in make's own build folder (the
#     CUDA module and test_gpu included where this build has them, checked to exist), the
#     op table with the CPU standing in, the whole cases/ folder (cases CUDA does not run
#     skipped and named), the stage list and budget arithmetic of the GPU run, the seed
#     model's full-size peak predicted; every required stage must pass.
# Usage: CK_PROG=build/ckpt-harness [CK_GPU_BUILD_DIR=build] sh tests/cli/gpu_script.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SCRIPT="$ROOT/tests/gpu/run.sh"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

if ! command -v bash >/dev/null 2>&1 || ! command -v timeout >/dev/null 2>&1; then
    echo "gpu_script.sh: needs bash and timeout"; exit 1
fi

# two small shipped cases, and the seed model at 6x5x4
mkdir -p "$TMP/cases"
cp "$ROOT/cases/conv1d_seq.json" "$TMP/cases/"
mkdir -p "$TMP/empty"
SEED="$ROOT/tests/gpu/cases/seed_unet_tiny.json"

# run_script NAME ENV... : tests/gpu/run.sh into $TMP/NAME with CK_BACKEND=cpu; $rc, $out
run_script() {
    name=$1
    shift
    out="$TMP/$name"
    env -u CK_GPU_BUILD_DIR CK_BACKEND=cpu CK_GPU_PROG="$PROG" CK_CASES_DIR="$TMP/cases" CK_SEED_CASE="$SEED" \
        CK_DEBS_DIR="$TMP/no-debs" "$@" bash "$SCRIPT" "$out" >"$TMP/$name.stdout" 2>&1
    rc=$?
}
# row STATUS STAGE-PREFIX: the summary has a row for the stage with that status
row() {
    if grep -E "^$2 +$1 " "$out/summary.txt" >/dev/null 2>&1; then ok; else
        bad "$name: no row '$2 ... $1' in the summary"; sed 's/^/    /' "$out/summary.txt" 2>/dev/null | tail -n 16
    fi
}
exit_is() {
    if [ "$rc" -eq "$1" ]; then ok; else bad "$name: exit $rc, want $1"; tail -n 20 "$TMP/$name.stdout" | sed 's/^/    /'; fi
}
summary_printed() {
    if grep -q "^tests/gpu/run.sh: $1" "$TMP/$name.stdout" && [ -s "$out/summary.txt" ] &&
        grep -q "tests/gpu/run.sh summary" "$out/run.log"; then ok; else
        bad "$name: summary line '$1' not printed, or summary.txt/run.log missing"
    fi
}

# 1. everything required passes
run_script allpass
exit_is 0
summary_printed PASSED
row PASS "build dependencies"
row SKIPPED "build"
row SKIPPED "op table \(test_gpu\)"
row PASS "shipped cases on cpu-as-cuda"
row PASS "cpu-as-cuda vs cpu, every dumped tensor, fp32"
for dt in fp16 bf16; do row PASS "cpu-as-cuda vs cpu, harness judgement, $dt"; done
row PASS "seed model predicted peak \(full size\)"
row PASS "seed model via the CLI, fp32"
row PASS "seed model via the CLI, fp16"
row SKIPPED "seed model step timing, fp32"
[ "$(ls "$out"/reports/cases/*.json 2>/dev/null | wc -l)" -ge 1 ] && ok || bad "allpass: no case report under OUT"
[ -f "$out/reports/seed_unet_tiny.fp16.json" ] && ok || bad "allpass: no seed report under OUT"
[ -f "$out/seed/he_init.safetensors" ] || command -v python3 >/dev/null 2>&1 || ok
grep -q '"schema_version":	2' "$out/reports/seed_unet_tiny.fp32.json" && ok || bad "allpass: seed report schema"
[ -n "$(ls "$out/compare/fp32" 2>/dev/null)" ] && ok || bad "allpass: nothing compared under OUT/compare"

# 2. nothing writes a report (no cases; a broken seed case): every stage FAILs, the table
#    is still printed, exit 1
printf '{"name": "broken",' >"$TMP/broken.json"
run_script noreport CK_SEED_CASE="$TMP/broken.json" CK_CASES_DIR="$TMP/empty"
exit_is 1
summary_printed FAILED
row FAIL "seed model via the CLI, fp32"
row FAIL "shipped cases on cpu-as-cuda"
row FAIL "cpu-as-cuda vs cpu, every dumped tensor, fp32"
grep -E '^seed model via the CLI, fp32 +FAIL .*no report' "$out/summary.txt" >/dev/null && ok ||
    bad "noreport: the row does not say 'no report'"

# 3. verdict identical but the CLI exits 1 (memory expectation not met): FAIL, not PASS
sed 's/"min_memory_saving": 0.5/"min_memory_saving": 0.99/' "$SEED" >"$TMP/seed_mem.json"
grep -q '"min_memory_saving": 0.99' "$TMP/seed_mem.json" || bad "memexit: could not make the case"
mkdir -p "$TMP/failcases"
sed 's/"expect": "identical"/"expect": "mismatch"/' "$ROOT/cases/conv1d_seq.json" >"$TMP/failcases/conv1d_seq.json"
run_script memexit CK_SEED_CASE="$TMP/seed_mem.json" CK_CASES_DIR="$TMP/failcases"
exit_is 1
summary_printed FAILED
grep -E '^seed model via the CLI, fp32 +FAIL .*exit 1.*verdict .identical.' "$out/summary.txt" >/dev/null && ok ||
    bad "memexit: the seed row should FAIL with exit 1 and verdict identical"
grep -E '^shipped cases on cpu-as-cuda +FAIL .*0/1 reports pass' "$out/summary.txt" >/dev/null && ok ||
    bad "memexit: the cases row should FAIL with 0/1 reports passing"

# 4. the build fails: FAIL, everything needing the program SKIPPED, exit 1
run_script nobuild CK_GPU_PROG= CK_MAKE=false
exit_is 1
summary_printed FAILED
row FAIL "build"
row SKIPPED "shipped cases on cpu-as-cuda"
row SKIPPED "seed model via the CLI, fp16"
[ "$(grep -cE ' PASS ' "$out/summary.txt")" -eq 1 ] && ok || bad "nobuild: only the dependencies should pass"

# 5. a budget that kills a stage: BUDGET (not FAIL, not PASS), the rest not started, exit 1
cat >"$TMP/slowprog" <<EOS
#!/bin/sh
exec sleep 30
EOS
chmod +x "$TMP/slowprog"
run_script budget CK_GPU_PROG="$TMP/slowprog" CK_GPU_BUDGET_S=3 CK_GPU_STAGE_NEED_S=1
exit_is 1
summary_printed FAILED
grep -E '^shipped cases on cpu-as-cuda +BUDGET .*killed at the time limit' "$out/summary.txt" >/dev/null && ok ||
    bad "budget: the cases stage should be killed (BUDGET)"
grep -E '^seed model via the CLI, fp16 +BUDGET .*not started' "$out/summary.txt" >/dev/null && ok ||
    bad "budget: the last seed stage should not start (BUDGET)"

# 6. usage
bash "$SCRIPT" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "no argument: want exit 2"
CK_BACKEND=tpu bash "$SCRIPT" "$TMP/x" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "CK_BACKEND=tpu: want exit 2"
CK_GPU_BUDGET_S=soon bash "$SCRIPT" "$TMP/x" >/dev/null 2>&1
[ $? -eq 2 ] && ok || bad "CK_GPU_BUDGET_S=soon: want exit 2"

# 7. the rehearsal of the GPU run (make check passes its build folder)
BUILD_DIR=${CK_GPU_BUILD_DIR:-$(dirname "$PROG")}
name=rehearsal
out="$TMP/$name"
env -u CK_GPU_PROG -u CK_CASES_DIR -u CK_GPU_STAGE_NEED_S -u CK_GPU_BUDGET_S CK_BACKEND=cpu \
    CK_GPU_BUILD_DIR="$BUILD_DIR" CK_SEED_CASE="$SEED" CK_DEBS_DIR="$TMP/no-debs" \
    bash "$SCRIPT" "$out" >"$TMP/$name.stdout" 2>&1
rc=$?
exit_is 0
summary_printed PASSED
row PASS "build"
TARGETS=$(cd "$ROOT" && env -u MAKEFLAGS make -s print-gpu-targets BUILD="${BUILD_DIR#"$ROOT"/}" 2>/dev/null)
if printf '%s\n' "$TARGETS" | grep -q 'ckpt-harness-cuda.so$'; then
    # a build with the CUDA backend: the module is one of the rehearsal's targets, built and
    # there, and the op table ran with the CPU standing in
    grep -E '^build +PASS .*ckpt-harness-cuda\.so' "$out/summary.txt" >/dev/null && ok ||
        bad "rehearsal: the build stage did not build the CUDA module: $(grep '^build ' "$out/summary.txt")"
    row PASS "op table \(test_gpu\)"
    grep -E '^op table \(test_gpu\) +PASS .*op table on cpu-as-cuda: [0-9]+ passed, 0 failed' "$out/summary.txt" >/dev/null && ok ||
        bad "rehearsal: the op table did not run on the stand-in"
else
    row SKIPPED "op table \(test_gpu\)"
fi
row PASS "shipped cases on cpu-as-cuda"
grep -E '^shipped cases on cpu-as-cuda +PASS .*skipped: canary_lowp_reduction fp16' "$out/summary.txt" >/dev/null && ok ||
    bad "rehearsal: the case CUDA does not run is not named as skipped"
[ "$(ls "$out"/reports/cases/*.json | wc -l)" -gt "$(ls "$ROOT"/cases/*.json | wc -l)" ] && ok ||
    bad "rehearsal: not every shipped case ran"
row PASS "cpu-as-cuda vs cpu, every dumped tensor, fp32"
for dt in fp16 bf16; do row PASS "cpu-as-cuda vs cpu, harness judgement, $dt"; done
row PASS "seed model predicted peak \(full size\)"
grep -E '^seed model predicted peak \(full size\) +PASS .*fp32 plain [0-9.]+ GiB, checkpointed [0-9.]+ GiB' "$out/summary.txt" >/dev/null && ok ||
    bad "rehearsal: no predicted peak"
row PASS "seed model via the CLI, fp32"
row PASS "seed model via the CLI, fp16"
grep -q 'stage plan: 12 stages, estimates summing to [0-9]* s of the 330 s budget' "$out/run.log" && ok ||
    bad "rehearsal: the stage plan is not the GPU run's"
[ "$(grep -cE ' (PASS|FAIL|SKIPPED|BUDGET) +(yes|no) ' "$out/summary.txt")" -eq 12 ] && ok ||
    bad "rehearsal: the table does not have the plan's 12 stages"
grep -q ' BUDGET ' "$out/summary.txt" && bad "rehearsal: a stage ran out of budget" || ok

echo "gpu_script.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
