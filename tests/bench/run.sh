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

printf '%-24s %10s %10s %8s %12s %12s %8s\n' case plain_s ckpt_s overhead plain_peak ckpt_peak saving
for f in "$ROOT"/cases/*.json "$ROOT"/tests/bench/cases/*.json; do
    name=$(basename "$f" .json)
    "$PROG" run "$f" --quiet --report "$OUT/$name.json" >/dev/null 2>&1 || true
    r="$OUT/$name.json"
    if [ ! -f "$r" ]; then printf '%-24s (failed to run)\n' "$name"; continue; fi
    pt=$(field "$r" plain wall_time_s); ct=$(field "$r" checkpointed wall_time_s)
    pp=$(field "$r" plain peak_activation_bytes); cp=$(field "$r" checkpointed peak_activation_bytes)
    awk -v n="$name" -v pt="$pt" -v ct="$ct" -v pp="$pp" -v cp="$cp" 'BEGIN {
        printf "%-24s %10.3f %10.3f %7.0f%% %11.2fM %11.2fM %7.1f%%\n", n, pt, ct,
               (pt > 0 ? 100 * (ct / pt - 1) : 0), pp / 1048576, cp / 1048576,
               (pp > 0 ? 100 * (1 - cp / pp) : 0) }'
done
