#!/bin/sh
# Reliability regressions: inputs never replaced, no hang on a FIFO, NaN runs
# judged, output paths refused before any run, strict case JSON, escaped terminal text,
# options read as documented, temporary files removed on SIGTERM. Every check runs under
# `timeout`, so a hang is a failure, never a stuck CI job.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/robustness.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# want CODE DESC FRAGMENT -- command...: exit CODE within 20 s, and (for 2) one stderr line
# holding FRAGMENT
want() {
    code=$1; desc=$2; frag=$3; shift 4
    timeout 20 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    got=$?
    if [ "$got" -ne "$code" ]; then bad "$desc: exit $got, want $code"; sed 's/^/    /' "$TMP/err" | head -3; return; fi
    if [ "$code" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -ne 1 ]; then bad "$desc: $(wc -l <"$TMP/err") stderr lines, want 1"; cat "$TMP/err"; return; fi
    if [ -n "$frag" ] && ! grep -qF -- "$frag" "$TMP/err" "$TMP/out"; then bad "$desc: output lacks '$frag': $(cat "$TMP/err")"; return; fi
    ok
}

cd "$TMP" || exit 1
tiny() { printf '{"name": "%s", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]%s}\n' "$1" "${2:+, $2}"; }
tiny tiny >tiny.json

# ---- 1. inputs are never overwritten ----------------------------------------------------
mkdir d && tiny tiny >d/tiny.json && cp d/tiny.json d/tiny.orig
want 2 "run DIR/ --report DIR/" "is an input of this run" -- "$PROG" run d/ --report d/
cmp -s d/tiny.json d/tiny.orig && ok || bad "run DIR/ --report DIR/ replaced the case file"
cp tiny.json keep.json
want 2 "run x.json --report x.json" "is an input of this run" -- "$PROG" run tiny.json --report tiny.json
cmp -s tiny.json keep.json && ok || bad "run x.json --report x.json replaced the case"
printf '\066\000\000\000\000\000\000\000{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\000\000\200\077' >a.safetensors
cp a.safetensors a.keep
cp a.safetensors ref.safetensors
want 2 "compare A R --report A" "is an input of this run" -- "$PROG" compare a.safetensors ref.safetensors --report a.safetensors
cmp -s a.safetensors a.keep && ok || bad "compare --report A replaced A"
tiny tiny >tiny.json # the sections below start from intact inputs, whatever happened above
cp a.keep a.safetensors

# ---- 2. a non-regular file is never replaced --------------------------------------------
mkfifo out.fifo
want 2 "compare --report FIFO" "a FIFO; refusing to replace it" -- "$PROG" compare a.safetensors ref.safetensors --report out.fifo
[ -p out.fifo ] && ok || bad "the FIFO was replaced"
if [ "$(id -u)" -eq 0 ] && mknod chr.json c 1 3 2>/dev/null; then
    want 2 "run --report CHARDEV" "a character device" -- "$PROG" run tiny.json --report chr.json
    [ -c chr.json ] && ok || bad "the character device was replaced"
    want 2 "compare --report CHARDEV" "a character device" -- "$PROG" compare a.safetensors ref.safetensors --report chr.json
else
    want 2 "compare --report /dev/null" "a character device" -- "$PROG" compare a.safetensors ref.safetensors --report /dev/null
fi
[ -c /dev/null ] && ok || bad "/dev/null is no longer a character device"
mkdir folder.json
want 2 "compare --report FOLDER" "a directory" -- "$PROG" compare a.safetensors ref.safetensors --report folder.json

# ---- 3. names unique per output folder --------------------------------------------------
mkdir dup && tiny same >dup/one.json && tiny same >dup/two.json
want 2 "two cases named alike, --report DIR" "dup/one.json and dup/two.json" -- "$PROG" run dup/ --report rep/
[ ! -e rep/same.json ] && ok || bad "a report was written before the name check"
want 2 "two cases named alike, --dump DIR" "both cases are named" -- "$PROG" run dup/ --dump dumps
want 0 "two cases named alike without outputs" "" -- "$PROG" run dup/ --quiet

# ---- 4. a FIFO never hangs ---------------------------------------------------------------
mkfifo fifo.json
want 2 "run FIFO" "not a regular file (a FIFO)" -- "$PROG" run fifo.json
mkdir fd && cp tiny.json fd/a.json && mkfifo fd/z.json
want 2 "run DIR with a FIFO" "fd/z.json: not a regular file" -- "$PROG" run fd/
want 0 "list DIR with a FIFO" "not a regular file" -- "$PROG" list fd
mkfifo w.safetensors
want 2 "--init FIFO" "not a regular file" -- "$PROG" run tiny.json --init w.safetensors
mkdir fw && mkfifo fw/x.safetensors
want 2 "--init DIR with a FIFO" "not a regular file" -- "$PROG" run tiny.json --init fw
want 2 "compare FIFO" "not a regular file" -- "$PROG" compare w.safetensors ref.safetensors
want 2 "compare DIR with a FIFO" "not a regular file" -- "$PROG" compare fw ref.safetensors
mkfifo model.onnx
want 2 "run MODEL.onnx FIFO" "not a regular file (a FIFO)" -- "$PROG" run model.onnx
want 2 "import FIFO" "not a regular file (a FIFO)" -- "$PROG" import model.onnx -o imported.json
mkfifo tol.json
want 2 "compare --tolerances FIFO" "not a regular file" -- "$PROG" compare a.safetensors ref.safetensors --tolerances tol.json

# ---- 5. NaN runs fail -------------------------------------------------------------------
printf '{"name": "nan_noise", "input": {"shape": [2, 3]},\n "layers": [{"name": "fc", "op": "linear", "units": 2}, {"name": "noise", "op": "gaussian_noise", "stddev": 1e308}]}\n' >nan_noise.json
printf '{"name": "nan_leaky", "input": {"shape": [2, 3]},\n "layers": [{"name": "fc", "op": "linear", "units": 2}, {"name": "act", "op": "leaky_relu", "slope": 1e308}]}\n' >nan_leaky.json
for c in nan_noise nan_leaky; do
    want 1 "$c fails" "NaN" -- "$PROG" run $c.json --steps 3
    grep -q "^FAIL non-finite: NaN/Inf throughout" out && ok || bad "$c: no non-finite FAIL line: $(cat out)"
    want 1 "$c --quiet says NaN" "NaN" -- "$PROG" run $c.json --quiet
    want 1 "$c report" "" -- "$PROG" run $c.json --report $c.report.json
    grep -q '"failed":[[:space:]]*true' $c.report.json && ok || bad "$c: report lacks nonfinite.failed true"
done

# ---- 6. long runs keep bounded records -------------------------------------------------
want 0 "20000 steps" "" -- "$PROG" run tiny.json --steps 20000 --rows 5 --report long.json
grep -q '"steps_kept"' long.json && ok || bad "a long run's report does not say which steps it kept"
[ "$(wc -c <long.json)" -lt 100000 ] && ok || bad "a 20000-step report is $(wc -c <long.json) bytes"
grep -q "^rows kept for steps 0, 19999" out && ok || bad "the summary does not say which steps it kept"
want 2 "--bisect on a long run" "at most 100 steps" -- "$PROG" run tiny.json --steps 20000 --bisect

# ---- 7. output paths refused before any run ---------------------------------------------
want 2 "--report with a missing parent" "cannot write into nodir" -- "$PROG" run nan_leaky.json --report nodir/x.json
grep -q "^\[1/1\]" err && bad "--report nodir: the case ran first" || ok
touch afile
want 2 "--report under a file" "Not a directory" -- "$PROG" run tiny.json --report afile/x.json
want 2 '--dump ""' "--dump: empty path" -- "$PROG" run tiny.json --dump ""
mkdir -p old/tiny && touch old/tiny/stale
want 2 "--dump into a non-empty folder" "directory is not empty" -- "$PROG" run tiny.json --dump old
want 2 "--dump under a file" "afile is not a directory" -- "$PROG" run tiny.json --dump afile/x/y
want 0 "--dump into an empty folder" "" -- "$PROG" run tiny.json --dump fresh --quiet
[ -f fresh/tiny/manifest.json ] && ok || bad "--dump fresh wrote no manifest"
want 0 "--report out.JSON is a file" "" -- "$PROG" run tiny.json --report out.JSON --quiet
[ -f out.JSON ] && ok || bad "--report out.JSON did not write a file"

# ---- 8. strict case JSON -----------------------------------------------------------------
strict() { printf "$2" >s.json; want 2 "$1" "$3" -- "$PROG" run s.json; }
strict "NUL escape in a name" '{"name": "t\\u0000../../etc", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'u0000'
strict "raw NUL byte" '{"name": "t\000", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'NUL'
strict "overlong UTF-8" '{"name": "t", "description": "\300\257", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'not valid UTF-8'
strict "invalid UTF-8" '{"name": "t", "description": "\377", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'not valid UTF-8'
strict "raw control character" '{"name": "t", "description": "a\tb", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'raw control character'
strict "leading garbage" '\001{"name": "t", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'column 1'
strict "007" '{"name": "t", "seed": 007, "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'leading zero'
strict "3." '{"name": "t", "seed": 3., "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' 'decimal point'

# ---- 9. user strings escaped on the terminal --------------------------------------------
mkdir esc && printf '{"name": "e", "description": "a\\u001b[2J\\nFAKE", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]}' >esc/e.json
want 0 "list escapes a description" "" -- "$PROG" list esc
grep -q "expect close" out && ok || bad "list did not load the case with the escaped description"
grep -q "$(printf '\033')" out && bad "list printed a raw ESC" || ok
grep -q '^FAKE' out && bad "list printed the description's newline" || ok
python3 - <<'EOF' 2>/dev/null || printf '' >esc_a.safetensors
import json, struct
name = "x\x1b[2J\nPASS fake"
h = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
for f, v in (("esc_a.safetensors", 1.0), ("esc_b.safetensors", 2.0)):
    open(f, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<f", v))
EOF
if [ -s esc_a.safetensors ]; then
    want 1 "compare escapes tensor names" "" -- "$PROG" compare esc_a.safetensors esc_b.safetensors
    grep -q '^PASS fake' out && bad "compare printed a fake PASS line" || ok
    grep -q "$(printf '\033')" out && bad "compare printed a raw ESC" || ok
fi
nl='bad
name.json'
want 2 "a path with a newline stays one line" "bad\\nname.json" -- "$PROG" run "$nl"

# ---- 10. accepted contrary to the docs ---------------------------------------------------
tiny t '"train": {"loss_scale": "static", "loss_scale_value": 0}, "precision": "fp16"' >ls0.json
want 2 "loss_scale_value 0" "loss_scale_value" -- "$PROG" run ls0.json
tiny t '"expect": {}' >ex.json
want 2 "expect {}" "an empty object" -- "$PROG" run ex.json
tiny t '"expect": {"fp16": "mismatch"}' >exd.json
want 0 "expect for a dtype not run: a note" "expect.fp16: not used" -- "$PROG" run exd.json --quiet
tiny t '"expect_precision": "close"' >ep.json
want 0 "expect_precision in fp32: a note" "expect_precision: not used" -- "$PROG" run ep.json --quiet
tiny t '"tolerance": {"tensors": {"nosuch*": {"rtol": 1}}}' >pat.json
want 2 "a tolerance pattern that cannot match" "matches no tensor" -- "$PROG" run pat.json
tiny t '"seed": 9007199254740993' >seed.json
want 2 "seed above 2^53" "seed" -- "$PROG" run seed.json
want 2 '--seed " -1"' "--seed" -- "$PROG" run tiny.json --seed " -1"
want 2 "--dtype fp32,,fp16" "--dtype" -- "$PROG" run tiny.json --dtype fp32,,fp16
want 2 "--device 99 on the CPU" "--device applies to --backend cuda" -- "$PROG" run tiny.json --device 99
want 2 "list /nonexistent" "/nonexistent" -- "$PROG" list "$TMP/nonexistent"
want 2 '--init ""' "--init: empty path" -- "$PROG" run tiny.json --init ""
want 2 "usage hint" "'ckpt-harness run --help'" -- "$PROG" run --frob tiny.json

# ---- 11. SIGTERM during a write removes the temporary file ------------------------------
want 0 "a first report" "" -- "$PROG" run tiny.json --report sig.json --quiet
cp sig.json sig.keep
CK_TEST_SIGNAL_IN_WRITE=1 timeout 20 "$PROG" run tiny.json --report sig.json --quiet >/dev/null 2>&1
rc=$?
[ "$rc" -eq 143 ] && ok || bad "SIGTERM in a write: exit $rc, want 143 (killed by SIGTERM)"
[ -z "$(ls | grep 'sig.json.tmp')" ] && ok || bad "SIGTERM left $(ls | grep 'sig.json.tmp')"
cmp -s sig.json sig.keep && ok || bad "SIGTERM changed the old report"

echo "robustness: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
