#!/bin/sh
# make bench-origin: the origin's 3-D U-Net at full size (tests/bench/origin/
# origin_unet3d_fullsize.json, input 1x1x368x368x224) on the cpu backend, verified without
# ever holding its plain run. Not part of make check or make bench: it trains the model five
# times at full size (the checkpointed run and one run per segment) and needs about 16 GB.
#
#   1. `plan` predicts every run's peak (nothing allocated): the plain run over the limit;
#   2. the same model at 1/64 of the voxels (origin_unet3d_small.json) runs first, for a
#      time estimate (its wall time x 64);
#   3. the full size runs under --memory-limit $CK_MEMORY_LIMIT (default 24000000000, the
#      24 GB machine): the plan skips the plain run with one line and establishes
#      plain-equivalence segment by segment; progress and an ETA go to stderr.
# Outputs (report JSON, text, timings) go to $CK_OUT (default build/bench-origin).
# usage: sh tests/bench/origin.sh PROG
set -u
PROG=${1:?usage: origin.sh PROG}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${CK_OUT:-build/bench-origin}
LIMIT=${CK_MEMORY_LIMIT:-24000000000}
NICE=${CK_NICE:-nice -n 10}
mkdir -p "$OUT"
FULL=$ROOT/tests/bench/origin/origin_unet3d_fullsize.json
SMALL=$ROOT/tests/bench/origin/origin_unet3d_small.json
now() { date +%s; }

echo "== plan (predicted, nothing allocated)"
"$PROG" plan "$FULL" | tee "$OUT/plan.txt" || exit 1

echo "== estimate: the same model at 1/64 of the voxels"
t0=$(now)
$NICE "$PROG" run "$SMALL" --backend cpu --plain segment-by-segment --rows 0 \
    --report "$OUT/small.json" >"$OUT/small.txt" 2>&1 || { cat "$OUT/small.txt"; exit 1; }
t1=$(now)
cat "$OUT/small.txt"
echo "small: $((t1 - t0)) s wall; full size estimated at about $(( (t1 - t0) * 64 )) s at this load"

echo "== full size, --memory-limit $LIMIT, load: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(now)
$NICE "$PROG" run "$FULL" --backend cpu --memory-limit "$LIMIT" --rows 4 \
    --report "$OUT/full.json" >"$OUT/full.txt" 2>"$OUT/full.err"
rc=$?
t1=$(now)
cat "$OUT/full.err" "$OUT/full.txt"
echo "full: exit $rc, $((t1 - t0)) s wall, load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/full.time"
exit $rc
