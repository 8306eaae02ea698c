#!/bin/sh
# Benchmarks: wall time and measured peak activation memory of the plain and checkpointed
# runs of every shipped case and of the seed's model at 64x64x32 (tests/bench/cases/).
# Prints a table; asserts nothing (timings on shared machines are noisy).
# Usage: sh tests/bench/run.sh [build/ckpt-harness]
set -eu
PROG=${1:-build/ckpt-harness}
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
