#!/bin/sh
# The CI features end to end (docs/ci.md): JUnit checked against tests/junit/junit.xsd,
# summary.json, --shard/--jobs/--filter and merge (4 shards with --jobs 2 --bisect merged
# equal the serial run), non-case files in a cases folder, --keep-going, --reproducible,
# GitHub annotations and step summary (of run and of merge), the HTML page (failures first,
# the bisect story with its code spans), progress on a terminal, gradcheck/compare --junit.
# Usage: CK_PROG=build/ckpt-harness CK_OUT=build/test-out sh tests/cli/ci.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
PY=python3
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# run WANT-EXIT DESC -- command...: stdout in $TMP/out, stderr in $TMP/err
run() {
    want=$1; desc=$2; shift 3
    "$@" >"$TMP/out" 2>"$TMP/err"
    got=$?
    if [ "$got" -eq "$want" ]; then ok; else bad "$desc: exit $got, want $want"; sed 's/^/    /' "$TMP/err" | head -5; fi
}

junit_ok() { # FILE TESTS FAILURES ERRORS SKIPPED [FAILING...]
    f=$1
    if $PY "$ROOT/tests/junit/check_junit.py" "$@"; then ok; else bad "junit $f"; fi
    if command -v xmllint >/dev/null 2>&1; then
        if xmllint --noout --schema "$ROOT/tests/junit/junit.xsd" "$f" 2>"$TMP/xsd"; then ok
        else bad "junit $f against junit.xsd: $(head -3 "$TMP/xsd")"; fi
    fi
}

# a small cases folder: three passing cases (one in three dtypes), a canary made to fail,
# and a tolerance file that is not a case
C="$TMP/cases"
mkdir -p "$C"
cp "$ROOT/cases/mlp_dropout.json" "$ROOT/cases/conv1d_seq.json" "$ROOT/cases/canary_no_saving.json" "$C/"
sed 's/"expect": "mismatch"/"expect": "identical"/; s/"name": "canary_dropout_stateful"/"name": "canary_fails"/' \
    "$ROOT/cases/canary_dropout_stateful.json" >"$C/canary_fails.json"
printf '{"default": {"rtol": 1e-5, "atol": 1e-8}}\n' >"$C/tolerances.json"

# ---- serial run: JUnit, summary, HTML; the tolerance file is skipped with a notice ----------
run 1 "serial run with a failing canary" -- "$PROG" run "$C" --report "$TMP/serial/" \
    --junit "$TMP/serial.xml" --html "$TMP/serial.html" --reproducible --quiet --bisect
grep -q "tolerances.json is not a case file" "$TMP/err" && ok || bad "non-case file notice: $(cat "$TMP/err")"
cp "$TMP/out" "$TMP/serial.out"
junit_ok "$TMP/serial.xml" 6 1 0 0 canary_fails
grep -q '"fail":	1' "$TMP/serial/summary.json" && grep -q '"pass":	5' "$TMP/serial/summary.json" && ok \
    || bad "summary.json counts"
[ "$(ls "$TMP/serial" | wc -l)" -eq 7 ] && ok || bad "serial report folder: $(ls "$TMP/serial")"
grep -q 'class="case-name">canary_fails<' "$TMP/serial.html" && ok || bad "html names the failing case"
# the page says why (--bisect, as docs/ci.md's workflow runs): failures first, the bisect
# story of the failing canary with its layer names set as code, no Markdown backticks
$PY - "$TMP/serial.html" <<'PYEOF' && ok || bad "html: failures first, bisect cause as code"
import re, sys
t = open(sys.argv[1], encoding="utf-8").read()
rows = re.findall(r'<tr class="item" data-status="(\w+)">', t)
sections = re.findall(r'<section class="case" id="case-\d+" data-status="(\w+)"><h2>.*?class="case-name">([^<]*)<', t)
assert rows[0] == "fail" and rows.count("fail") == 1, rows
assert sections[0] == ("fail", "canary_fails"), sections
story = t[t.index("<h3>bisect</h3>"):]
story = story[:story.index("</ul>")]
assert "<b>cause:</b> dropout <code>drop1</code> drew a different mask" in story, story
assert "rng policy <code>stateful</code>" in story and "`" not in story, story
assert "checkpointing segment 0 (<code>fc1</code>" in story, story
PYEOF

# ---- text for people: 80 columns, one line per passing case, progress lines, colour -------
run 1 "default text" -- "$PROG" run "$C"
awk 'length($0) > 80 { n++ } END { exit n > 0 }' "$TMP/out" && ok || bad "lines wider than 80 columns: $(awk 'length($0) > 80' "$TMP/out" | head -2)"
[ "$(grep -c '^PASS ' "$TMP/out")" -eq 5 ] && ok || bad "a passing case prints one line"
grep -q '^step kind' "$TMP/out" && ok || bad "the failing case prints its rows"
[ "$(grep -c '^\[[0-9]/6\] ' "$TMP/err")" -eq 6 ] && ok || bad "one progress line per case on stderr (not a terminal): $(cat "$TMP/err")"
grep -q "$(printf '\033')" "$TMP/out" && bad "colour when stdout is not a terminal" || ok
"$PROG" run "$C/canary_no_saving.json" --color always >"$TMP/out" 2>/dev/null
grep -q "$(printf '\033')\[32m" "$TMP/out" && ok || bad "--color always colours PASS"
NO_COLOR=1 "$PROG" run "$C/canary_no_saving.json" --color always >"$TMP/out" 2>/dev/null
grep -q "$(printf '\033')" "$TMP/out" && bad "NO_COLOR still coloured" || ok
run 2 "--color sometimes" -- "$PROG" run "$C" --color sometimes
# on a terminal (script(1) gives one): the progress line is drawn in place and cleared
if command -v script >/dev/null 2>&1; then
    script -qc "\"$PROG\" run \"$C/canary_no_saving.json\" >/dev/null" "$TMP/typescript" >/dev/null 2>&1 </dev/null
    if [ -s "$TMP/typescript" ]; then
        grep -q "$(printf '\r')\[1/1\] canary_no_saving fp32 " "$TMP/typescript" && \
            grep -q "$(printf '\033')\[K" "$TMP/typescript" && ok || bad "no live progress line on a terminal: $(cat -A "$TMP/typescript" | head -3)"
    fi
    # a low-precision case (about 2 s): its fp32 reference and calibration runs are named
    # as they train, with an ETA, every frame within 79 columns; --quiet draws nothing
    cat >"$TMP/progress_mlp.json" <<'EOF'
{"name": "progress_mlp_with_a_name_long_enough_to_be_shortened", "seed": 1,
 "input": {"shape": [128, 512]},
 "layers": [{"name": "l0", "op": "linear", "units": 512}, {"name": "a0", "op": "tanh"},
            {"name": "l1", "op": "linear", "units": 512}, {"name": "a1", "op": "tanh"},
            {"name": "l2", "op": "linear", "units": 512}, {"name": "a2", "op": "tanh"},
            {"name": "out", "op": "linear", "units": 4}],
 "loss": {"op": "mse"}, "checkpoint": {"segments": [["l0", "a1"]]}, "train": {"steps": 4}}
EOF
    script -qc "\"$PROG\" run \"$TMP/progress_mlp.json\" --dtype fp16 >/dev/null" "$TMP/typescript" >/dev/null 2>&1 </dev/null
    tr '\r' '\n' <"$TMP/typescript" | sed "s/$(printf '\033')\[K//g" | grep '^\[1/1\] ' >"$TMP/frames"
    grep -Eq ' fp16  (fp32 reference|calibration [123]/3) step [1-4]/4 .*ETA [0-9]+s$' "$TMP/frames" && ok \
        || bad "the fp32 reference and calibration runs are not named with an ETA: $(tail -3 "$TMP/frames")"
    awk 'length($0) > 79 { n++ } END { exit n > 0 }' "$TMP/frames" && ok || bad "progress frames over 79 columns: $(awk 'length($0) > 79' "$TMP/frames" | head -2)"
    script -qc "\"$PROG\" run \"$TMP/progress_mlp.json\" --dtype fp16 --quiet >/dev/null" "$TMP/typescript" >/dev/null 2>&1 </dev/null
    grep -q '\[1/1\]' "$TMP/typescript" && bad "--quiet draws progress on a terminal" || ok
    # bisect is a stage of the live line, not a line written into it
    script -qc "\"$PROG\" run \"$C/canary_fails.json\" --bisect --rows 0 >/dev/null" "$TMP/typescript" >/dev/null 2>&1 </dev/null
    tr '\r' '\n' <"$TMP/typescript" | sed "s/$(printf '\033')\[K//g" >"$TMP/frames"
    grep -q '^\[1/1\] canary_fails fp32  bisecting  ' "$TMP/frames" && ! grep -q 'canary_fails: bisecting' "$TMP/frames" && ok \
        || bad "bisect on a terminal: $(cat "$TMP/frames" | head -5)"
    # bisect's own trainings show their step and layer, numbered, with the ETA
    cat >"$TMP/progress_bisect.json" <<'EOF'
{"name": "progress_bisect", "seed": 1, "input": {"shape": [128, 512]},
 "layers": [{"name": "l0", "op": "linear", "units": 512}, {"name": "a0", "op": "tanh"},
            {"name": "d0", "op": "dropout", "rate": 0.2},
            {"name": "l1", "op": "linear", "units": 512}, {"name": "a1", "op": "tanh"},
            {"name": "l2", "op": "linear", "units": 512}, {"name": "a2", "op": "tanh"},
            {"name": "out", "op": "linear", "units": 4}],
 "loss": {"op": "mse"}, "checkpoint": {"segments": [["l0", "d0"], ["l1", "a1"]]},
 "policies": {"rng": "stateful"}, "expect": "mismatch", "train": {"steps": 4}}
EOF
    script -qc "\"$PROG\" bisect \"$TMP/progress_bisect.json\" --rows 0 >/dev/null" "$TMP/typescript" >/dev/null 2>&1 </dev/null
    tr '\r' '\n' <"$TMP/typescript" | sed "s/$(printf '\033')\[K//g" | grep '^\[1/1\] ' >"$TMP/frames"
    grep -Eq ' fp32  bisect [0-9]+ [a-z ]+ step [1-4]/4  (forward|backward|recompute) [0-9]+/8 .*ETA [0-9]+s$' "$TMP/frames" && ok \
        || bad "bisect's trainings show no step progress: $(tail -3 "$TMP/frames")"
    awk 'length($0) > 79 { n++ } END { exit n > 0 }' "$TMP/frames" && ok || bad "bisect progress frames over 79 columns"
fi

# ---- --jobs 2 gives the serial output and files ------------------------------------------
run 1 "--jobs 2" -- "$PROG" run "$C" --report "$TMP/jobs/" --junit "$TMP/jobs.xml" \
    --html "$TMP/jobs.html" --reproducible --quiet --bisect --jobs 2
cmp -s "$TMP/out" "$TMP/serial.out" && ok || bad "--jobs 2 stdout differs from the serial run"
cmp -s "$TMP/jobs.xml" "$TMP/serial.xml" && ok || bad "--jobs 2 JUnit differs"
cmp -s "$TMP/jobs/summary.json" "$TMP/serial/summary.json" && ok || bad "--jobs 2 summary differs"
# the workers' typed results render the page and every report as the serial run does
as_serial() { sed 's# --jobs 2##; s#/jobs/#/serial/#; s#jobs\.xml#serial.xml#; s#jobs\.html#serial.html#' "$1"; }
as_serial "$TMP/jobs.html" | cmp -s - "$TMP/serial.html" && ok || bad "--jobs 2 HTML differs (command line aside)"
diff_reports=0
for f in "$TMP"/serial/*.json; do
    [ "$(basename "$f")" = summary.json ] && continue
    as_serial "$TMP/jobs/$(basename "$f")" | cmp -s - "$f" || diff_reports=1
done
[ $diff_reports = 0 ] && ok || bad "--jobs 2 reports differ from the serial run's (command line aside)"

# ---- docs/ci.md's workflow: 4 shards with --jobs 2 --bisect, then merge == the serial run ---
n_items=0
for i in 1 2 3 4; do
    "$PROG" run "$C" --shard "$i/4" --jobs 2 --report "$TMP/shard$i/" --reproducible --quiet --bisect >"$TMP/shard$i.out" 2>&1
    rc=$?
    [ "$rc" -le 1 ] && ok || bad "shard $i/4: exit $rc"
    k=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['items']))" "$TMP/shard$i/summary.json")
    n_items=$((n_items + k))
done
[ "$n_items" -eq 6 ] && ok || bad "the shards hold $n_items items, want 6"
: >"$TMP/merge_summary.md"
run 1 "merge of 4 shards" -- env GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/merge_summary.md" \
    "$PROG" merge "$TMP/shard1" "$TMP/shard2" "$TMP/shard3" "$TMP/shard4" \
    --report "$TMP/merged/" --junit "$TMP/merged.xml" --html "$TMP/merged.html"
# the merge job's GitHub outputs: one annotation for the one failure, the step summary
[ "$(grep -c "^::error file=$C/canary_fails.json," "$TMP/out")" -eq 1 ] && ok || bad "merge: ::error annotation: $(grep '::' "$TMP/out")"
grep -q '| :x: | canary_fails | fp32 |' "$TMP/merge_summary.md" && ok || bad "merge step summary: $(cat "$TMP/merge_summary.md")"
grep -q "5 passed, 1 failed, 0 errors, 0 skipped" "$TMP/out" && ok || bad "merge totals: $(tail -3 "$TMP/out")"
cmp -s "$TMP/merged.xml" "$TMP/serial.xml" && ok || { bad "merged JUnit differs from the serial run"; diff "$TMP/merged.xml" "$TMP/serial.xml" | head -5; }
cmp -s "$TMP/merged/summary.json" "$TMP/serial/summary.json" && ok || bad "merged summary.json differs"
for f in "$TMP"/serial/*.json; do
    g="$TMP/merged/$(basename "$f")"
    # the command line is the one field that names the shard
    grep -v '"command_line"' "$f" >"$TMP/a.json"; grep -v '"command_line"' "$g" >"$TMP/b.json" 2>/dev/null
    cmp -s "$TMP/a.json" "$TMP/b.json" && ok || bad "merged report $(basename "$f") differs"
done
grep -v 'command_line' "$TMP/serial.html" >"$TMP/a.html"; grep -v 'command_line' "$TMP/merged.html" >"$TMP/b.html"
cmp -s "$TMP/a.html" "$TMP/b.html" && ok || bad "merged HTML differs from the serial run's"
run 2 "merge of one shard twice" -- "$PROG" merge "$TMP/shard1" "$TMP/shard1"
grep -q "appears twice" "$TMP/err" && ok || bad "duplicate merge message: $(cat "$TMP/err")"
run 2 "merge of a folder without summary" -- "$PROG" merge "$C"
[ "$(wc -l <"$TMP/err")" -eq 1 ] && ok || bad "merge without summary: one line"
# a shard with nothing to run is fine: exit 0 and an empty summary
empty=0
for i in 1 2; do
    "$PROG" run "$C" --filter canary_no_saving --shard "$i/2" --report "$TMP/one$i/" --quiet >/dev/null 2>&1 || bad "one-item shard $i/2 failed"
    k=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))['items']))" "$TMP/one$i/summary.json")
    [ "$k" -eq 0 ] && empty=$((empty + 1))
done
[ "$empty" -eq 1 ] && ok || bad "one of two shards of one item is empty"
run 0 "merge with an empty shard" -- "$PROG" merge "$TMP/one1" "$TMP/one2" --quiet
grep -q "1 passed, 0 failed" "$TMP/out" && ok || bad "merge with an empty shard: $(cat "$TMP/out")"
run 2 "--shard 5/4" -- "$PROG" run "$C" --shard 5/4
run 2 "--shard x" -- "$PROG" run "$C" --shard x
run 2 "--jobs 0" -- "$PROG" run "$C" --jobs 0

# ---- --filter -------------------------------------------------------------------------
run 0 "--filter mlp*" -- "$PROG" run "$C" --filter 'mlp*' --quiet
[ "$(grep -c '^PASS mlp_dropout' "$TMP/out")" -eq 3 ] && ! grep -q conv1d "$TMP/out" && ok || bad "--filter: $(cat "$TMP/out")"
run 2 "--filter matching nothing" -- "$PROG" run "$C" --filter 'zzz*'

# ---- a malformed case: exit 2; --keep-going runs the rest and counts it -------------------
cp -r "$C" "$TMP/cases_bad"
printf '{"name": "broken", "input": {"shape": [2, 3]}, "layers": [{"op": "nope"}]}\n' >"$TMP/cases_bad/broken.json"
run 2 "malformed case" -- "$PROG" run "$TMP/cases_bad" --quiet
grep -q "PASS" "$TMP/out" && bad "a malformed case without --keep-going still ran cases" || ok
run 2 "malformed case, --keep-going" -- "$PROG" run "$TMP/cases_bad" --quiet --keep-going \
    --junit "$TMP/kg.xml" --report "$TMP/kg/"
[ "$(grep -c '^PASS' "$TMP/out")" -eq 5 ] && ok || bad "--keep-going: the other cases ran: $(cat "$TMP/out")"
grep -q '"error":	1' "$TMP/kg/summary.json" && ok || bad "--keep-going: summary counts the error"
junit_ok "$TMP/kg.xml" 7 1 1 0 canary_fails

# ---- --reproducible: byte-identical; without it, host and start time are there ----------
run 0 "reproducible 1" -- "$PROG" run "$C/mlp_dropout.json" --dtype fp32 --report "$TMP/r1.json" --reproducible
run 0 "reproducible 2" -- "$PROG" run "$C/mlp_dropout.json" --dtype fp32 --report "$TMP/r2.json" --reproducible
sed 's/r1.json/rX.json/' "$TMP/r1.json" >"$TMP/r1n"; sed 's/r2.json/rX.json/' "$TMP/r2.json" >"$TMP/r2n"
cmp -s "$TMP/r1n" "$TMP/r2n" && ok || bad "--reproducible reports differ"
grep -q '"started_utc"\|"host"\|"wall_time_s"\|"step_wall_s"\|"train_wall_s"' "$TMP/r1.json" && bad "--reproducible report has host/time" || ok
run 0 "metadata" -- "$PROG" run "$C/mlp_dropout.json" --dtype fp32 --report "$TMP/m.json"
$PY - "$TMP/m.json" "$C/mlp_dropout.json" <<'PYEOF' && ok || bad "run metadata"
import hashlib, json, sys
r = json.load(open(sys.argv[1]))["run"]
assert r["case_sha256"] == hashlib.sha256(open(sys.argv[2], "rb").read()).hexdigest(), r
for k in ("git_commit", "host", "started_utc", "command_line"):
    assert isinstance(r[k], str) and r[k], k
assert isinstance(r["build"]["cuda"], bool) and r["build"]["compiler"] and r["build"]["flags"]
for run in json.load(open(sys.argv[1]))["runs"].values():
    steps, train = run["step_wall_s"], run["train_wall_s"]
    assert len(steps) == 3 and all(t >= 0 for t in steps), steps
    # the training part of each step: positive and within the step
    assert len(train) == 3 and all(0 < t <= s for t, s in zip(train, steps)), (train, steps)
PYEOF

# ---- GitHub Actions --------------------------------------------------------------------
: >"$TMP/step_summary.md"
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/step_summary.md" "$PROG" run "$C" --quiet >"$TMP/out" 2>"$TMP/err"
grep -q "^::error file=$C/canary_fails.json,title=" "$TMP/out" && ok || bad "::error annotation: $(grep '::' "$TMP/out")"
[ "$(grep -c '^::' "$TMP/out")" -eq 1 ] && ok || bad "one annotation for one failure"
grep -q '| :x: | canary_fails | fp32 |' "$TMP/step_summary.md" && ok || bad "step summary: $(cat "$TMP/step_summary.md")"
"$PROG" run "$C" --quiet >"$TMP/out" 2>&1
grep -q '^::' "$TMP/out" && bad "annotations without GITHUB_ACTIONS" || ok
# a bisected failure carries its cause (first diverging layer and why) into JUnit, the step
# summary, the annotation and the one-line text summary, as the HTML and the story do
: >"$TMP/bisect_summary.md"
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/bisect_summary.md" "$PROG" run "$C/canary_fails.json" \
    --bisect --quiet --junit "$TMP/bisect.xml" >"$TMP/out" 2>"$TMP/err"
grep -q '<failure type="mismatch" message="[^"]*; cause: dropout `drop1` drew a different mask on recomputation' "$TMP/bisect.xml" && ok ||
    bad "JUnit failure message without the bisect cause: $(grep '<failure' "$TMP/bisect.xml")"
grep -q '^cause: dropout `drop1` drew a different mask' "$TMP/bisect.xml" && ok || bad "JUnit failure text without the causes"
grep -q '| :x: | canary_fails | fp32 | .*; cause&#58; dropout \\`drop1\\` drew a different mask' "$TMP/bisect_summary.md" && ok ||
    bad "step summary without the bisect cause: $(cat "$TMP/bisect_summary.md")"
grep -q '^::error .*; cause: dropout `drop1` drew a different mask' "$TMP/out" && ok || bad "annotation without the bisect cause: $(grep '::' "$TMP/out")"
tr '\n' ' ' <"$TMP/out" | grep -q '^FAIL canary_fails fp32 .*; cause: dropout `drop1` drew a *different mask' && ok ||
    bad "the one-line text summary without the bisect cause: $(cat "$TMP/out")"

# ---- gradcheck and compare --junit ------------------------------------------------------
run 0 "gradcheck --junit" -- "$PROG" gradcheck "$C/canary_no_saving.json" --quiet --junit "$TMP/gc.xml" --report "$TMP/gc.json"
junit_ok "$TMP/gc.xml" 1 0 0 0
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['schema']=='ckpt-harness/gradcheck' and d['cases'][0]['pass'] and d['cases'][0]['entries']" "$TMP/gc.json" && ok || bad "gradcheck --report"
[ "$(wc -l <"$TMP/out")" -eq 2 ] && ok || bad "gradcheck --quiet: $(cat "$TMP/out")"
run 0 "dump for compare" -- "$PROG" run "$C/mlp_dropout.json" --dtype fp32 --dump "$TMP/dump" --quiet
d=$(ls -d "$TMP"/dump/*/ | head -1)
a="$d"plain/step_0000/grads.safetensors; [ -f "$a" ] || a=""
[ -n "$a" ] && ok || bad "no dumped safetensors under $d"
run 0 "compare --junit" -- "$PROG" compare "$a" "${d}checkpointed/step_0000/grads.safetensors" --junit "$TMP/cmp.xml" --quiet
junit_ok "$TMP/cmp.xml" 1 0 0 0

echo "ci tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
