#!/bin/sh
# Hostile inputs and faults: NaN models, CI workflow-command injection through file names and
# report contents, invalid UTF-8 in every output, merges of report folders that disagree or
# miss shards, outputs that are inputs or cannot be written, and the ONNX importer's
# temporary files. Every check runs under `timeout`.
# Usage: CK_PROG=build/ckpt-harness sh tests/cli/hostile_inputs.sh
set -u
PROG=${CK_PROG:-build/ckpt-harness}
case "$PROG" in /*) ;; *) PROG="$(pwd)/$PROG" ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# want CODE DESC FRAGMENT -- command...: exit CODE within 60 s, and (for 2) one stderr line
# holding FRAGMENT
want() {
    code=$1; desc=$2; frag=$3; shift 4
    timeout 60 "$@" >"$TMP/out" 2>"$TMP/err" </dev/null
    got=$?
    if [ "$got" -ne "$code" ]; then bad "$desc: exit $got, want $code"; sed 's/^/    /' "$TMP/err" "$TMP/out" | head -4; return; fi
    if [ "$code" -eq 2 ] && [ "$(wc -l <"$TMP/err")" -ne 1 ]; then bad "$desc: $(wc -l <"$TMP/err") stderr lines, want 1"; cat "$TMP/err"; return; fi
    if [ -n "$frag" ] && ! grep -qF -- "$frag" "$TMP/err" "$TMP/out"; then bad "$desc: output lacks '$frag': $(cat "$TMP/err" "$TMP/out" | head -3)"; return; fi
    ok
}

cd "$TMP" || exit 1
# st FILE NAME:SHAPE:VALUE...: a float32 safetensors file, every element VALUE
st() {
    python3 - "$@" <<'PY'
import json, struct, sys
hdr, data = {}, b''
for spec in sys.argv[2:]:
    name, shape, value = spec.rsplit(':', 2)
    shape = [int(d) for d in shape.split('x')]
    n = 1
    for d in shape:
        n *= d
    b = struct.pack('<f', float(value)) * n
    hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(hdr).encode()
h += b' ' * ((8 - len(h) % 8) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(h)) + h + data)
PY
}

# ---- NaN weights fail the case, whatever a later op does with them -----------------------
st nan.safetensors fc1.weight:4x3:nan fc1.bias:4:nan fc2.weight:2x4:0.1 fc2.bias:2:0.5
for act in relu tanh; do
    printf '{"name": "nan_%s", "input": {"shape": [2, 3]}, "init": {"from": "nan.safetensors"},\n "layers": [{"name": "fc1", "op": "linear", "units": 4}, {"name": "act", "op": "%s"}, {"name": "fc2", "op": "linear", "units": 2}]}\n' $act $act >nan_$act.json
    want 1 "NaN weights then $act" "FAIL non-finite" -- "$PROG" run nan_$act.json --steps 2
done
# ---- a non-finite activation fails the case although a later op drops it ---------------
# fc1 then tanh gives +-1 in every unit; fc2 (weights W) sums four of them to 4 W, which
# overflows (fp32: W 1e38; fp16: W 30000 > 65504 / 4) to Inf; the tanh after it clamps
# that to +-1 and its backward (1 - y^2 = 0) sends zero gradients back, so the loss, every
# gradient, every weight and every update stay finite: only the scan of fc2's output sees it
for w in 1e38 30000; do
    st ovf_$w.safetensors fc1.weight:4x3:250 fc1.bias:4:0 fc2.weight:4x4:$w fc2.bias:4:0 fc3.weight:2x4:0.1 fc3.bias:2:0.5
    for x in "" '"expect_nonfinite": true, '; do
        printf '{"name": "overflow_clamped", "input": {"shape": [2, 3]}, "init": {"from": "ovf_%s.safetensors"}, %s"layers": [{"name": "fc1", "op": "linear", "units": 4}, {"name": "t1", "op": "tanh"}, {"name": "fc2", "op": "linear", "units": 4}, {"name": "clamp", "op": "tanh"}, {"name": "fc3", "op": "linear", "units": 2}]}\n' $w "$x" >ovf_$w${x:+_expected}.json
    done
done
want 1 "fp32 overflow clamped by tanh" "(fc2:out)," -- "$PROG" run ovf_1e38.json --steps 2 --report ovf32
python3 - ovf32/overflow_clamped.json <<'PY' || bad "fp32 overflow: the report's nonfinite block does not name fc2"
import json, sys
n = json.load(open(sys.argv[1]))["nonfinite"]
a = n["plain"]["activations"]
assert n["failed"] and a["inf"] == 16 and a["layers"] == 1, n
assert a["first"] == {"layer": "fc2", "tensor": "out", "recompute": False, "step": 0, "index": 0, "value": "Inf"}, a
assert n["plain"]["grad_inf"] + n["plain"]["grad_nan"] + n["plain"]["other_inf"] + n["plain"]["other_nan"] + n["plain"]["loss_inf"] + n["plain"]["loss_nan"] == 0, n
PY
want 0 "fp32 overflow clamped, expect_nonfinite" "" -- "$PROG" run ovf_1e38_expected.json --steps 2
want 1 "fp16 overflow clamped by tanh" "(fc2:out)," -- "$PROG" run ovf_30000.json --steps 2 --dtype fp16
want 0 "fp16 overflow clamped, expect_nonfinite" "" -- "$PROG" run ovf_30000_expected.json --steps 2 --dtype fp16
# the same weights are finite all through in fp32 (4 x 30000 fits): no failure there
want 0 "fp32 run of the fp16 overflow case" "" -- "$PROG" run ovf_30000.json --steps 2
# ---- one hostile name through every command and every sink ------------------------------
# a newline and a workflow command, a terminal escape, inline HTML, a table bar, a percent
# escape, a byte that is not UTF-8 and the noncharacter U+FFFF
H=$(printf 'evil\n::error title=x::pwned \033[31m<img src=x>|%%0A\377\357\277\277')
mkdir -p "hn/$H"
HD="hn/$H"
tiny() { printf '{"name": "%s", "description": "desc \\u001b[31m <img src=x> \\uffff\\n::warning::y", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]%s}\n' "$1" "${2:+, $2}"; }
tiny hostile_pass >"$HD/$H.json"
tiny hostile_fail '"expect": "mismatch"' >"$HD/$H-fail.json"
printf '{"name": ' >"$HD/$H-broken.json"
# sinks_ok DESC FILE...: no line of any FILE begins (after blanks) with "::" unless it is one
# of the program's own annotations, and none holds a raw escape byte
sinks_ok() {
    desc=$1; shift
    for f in "$@"; do
        [ -f "$f" ] || continue
        if grep -aE '^[[:space:]]*::' "$f" | grep -avE '^::(error|warning) (file=[^,]*,)?title=ckpt-harness ' | grep -aq .; then
            bad "$desc: $f has a line starting a workflow command: $(grep -aE '^[[:space:]]*::' "$f" | head -2)"; return
        fi
        if LC_ALL=C grep -aq "$(printf '\033')" "$f"; then bad "$desc: $f holds a raw ESC"; return; fi
        if grep -aE '^::(error|warning) ' "$f" | LC_ALL=C grep -aqE 'pwned|<img'; then
            # our annotations carry the name escaped: %0A for the newline, no raw "::" after it
            grep -aE '^::(error|warning) ' "$f" | grep -aF '::error title=x::pwned' >/dev/null &&
                { bad "$desc: an annotation carries the raw command"; return; }
        fi
    done
    ok
}
# utf8_ok DESC FILE...: valid UTF-8 without noncharacters; JSON parses, XML is well-formed
utf8_ok() {
    desc=$1; shift
    python3 - "$desc" "$@" <<'PY' && ok || bad "$desc: see above"
import json, sys, subprocess, xml.dom.minidom
bad = 0
for f in sys.argv[2:]:
    b = open(f, 'rb').read()
    try:
        t = b.decode('utf-8')
    except UnicodeDecodeError as e:
        print(f"{f}: not UTF-8: {e}"); bad = 1; continue
    if '\uffff' in t or '\ufffe' in t:
        print(f"{f}: holds a noncharacter"); bad = 1
    if f.endswith('.json'):
        json.loads(t)
    elif f.endswith('.xml'):
        xml.dom.minidom.parseString(b)
    elif f.endswith('.html') and '<img src=x>' in t:
        print(f"{f}: raw <img src=x>"); bad = 1
    elif f.endswith('.md'):
        if '<img' in t:
            print(f"{f}: raw <img in the step summary"); bad = 1
        for line in t.splitlines():
            if line and not (line.startswith('|') or line.startswith('#') or line[0].isdigit() or line.startswith('ran ')):
                print(f"{f}: a row broken by the name: {line!r}"); bad = 1
sys.exit(bad)
PY
}
: >step.md
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/step.md" timeout 60 "$PROG" run "$HD/" --keep-going --color never \
    --report "$TMP/hr/" --junit "$TMP/h.xml" --html "$TMP/h.html" >hout 2>herr
[ $? -eq 2 ] && ok || bad "hostile run: want exit 2 (one case does not load)"
sinks_ok "run" hout herr
utf8_ok "run outputs" hr/*.json h.xml step.md
# notes wrap at 80 columns: the lines joined
tr "\n" " " <herr | tr -s " " | grep -q "note: .*not valid UTF-8.*U+FFFD" && ok || bad "run: no note that the path's bytes are replaced"
python3 -c "import sys; t=open(sys.argv[1],'rb').read().decode('utf-8'); assert '<img src=x>' not in t" h.html && ok || bad "run --html: raw <img> or not UTF-8"
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/step.md" timeout 60 "$PROG" run "$HD/" --keep-going --quiet --color never >hout 2>herr
sinks_ok "run --quiet" hout herr
: >step.md
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/step.md" timeout 60 "$PROG" merge hr --report "$TMP/hm/" --junit "$TMP/hm.xml" --html "$TMP/hm.html" >hout 2>herr
sinks_ok "merge" hout herr
utf8_ok "merge outputs" hm/*.json hm.xml step.md
python3 -c "import sys; t=open(sys.argv[1],'rb').read().decode('utf-8'); assert '<img src=x>' not in t" hm.html && ok || bad "merge --html: raw <img> or not UTF-8"
# summary.json items edited to carry the name as case, dtype and message
python3 - "$H" <<'PY'
import json, sys
s = json.load(open('hr/summary.json'))
for it in s['items']:
    if it['status'] == 'error':
        it['message'] = '\n::add-mask::secret\n\x1b[32mPASS everything'
json.dump(s, open('hr/summary.json', 'w'))
PY
GITHUB_ACTIONS=true timeout 60 "$PROG" merge hr >hout 2>herr
sinks_ok "merge of an edited summary" hout herr
grep -aq '^PASS everything' hout && bad "merge printed a fake PASS line" || ok
# compare: tensor names in the files
st "$TMP/$H-a.safetensors" "::error::x:2:1" "ok:2:1"
st "$TMP/$H-b.safetensors" "::error::x:2:1.5" "ok:2:1"
timeout 60 "$PROG" compare "$TMP/$H-a.safetensors" "$TMP/$H-b.safetensors" --junit "$TMP/hc.xml" --report "$TMP/hc.json" >hout 2>herr
sinks_ok "compare" hout herr
utf8_ok "compare outputs" hc.xml hc.json
# import and list: the model's path
cp "$ROOT/tests/fixtures/onnx/small_cnn.onnx" "$HD/$H.onnx"
timeout 60 "$PROG" import "$HD/$H.onnx" -o "$TMP/hi.json" >hout 2>herr
sinks_ok "import" hout herr
utf8_ok "import's case" hi.json
timeout 60 "$PROG" run "$HD/$H.onnx" --quiet >hout 2>herr
sinks_ok "run MODEL.onnx" hout herr
timeout 60 "$PROG" list "$HD" >hout 2>herr
sinks_ok "list" hout herr
timeout 60 "$PROG" gradcheck "$HD/$H.json" --junit "$TMP/hg.xml" >hout 2>herr
sinks_ok "gradcheck" hout herr
utf8_ok "gradcheck --junit" hg.xml

# ---- outputs checked first, inputs never replaced, no path cut -------------------------
cp "$ROOT/tests/fixtures/onnx/small_cnn.onnx" m.onnx
want 2 "import -o X --weights X" "name the same file" -- "$PROG" import m.onnx -o same.json --weights same.json
[ -e same.json ] && bad "import -o X --weights X wrote X" || ok
mkdir -p sub
want 2 "import: one file under two spellings" "name the same file" -- "$PROG" import m.onnx -o ./sub/../c.json --weights c.json
want 2 "import -o nodir/x.json" "cannot write into nodir" -- "$PROG" import m.onnx -o nodir/x.json --weights w1.safetensors
[ -e w1.safetensors ] && bad "import wrote the weights before refusing -o" || ok
cp m.onnx m.keep
want 2 "import --weights MODEL" "is an input" -- "$PROG" import m.onnx -o m2.json --weights m.onnx
cmp -s m.onnx m.keep && ok || bad "import --weights MODEL replaced the model"
# a weights path over 2,000 bytes is written where it says, not cut
deep=$(python3 -c "print('/'.join(['d' * 200] * 11))")
mkdir -p "$deep"
want 0 "import --weights LONG" "" -- "$PROG" import m.onnx -o long.json --weights "$deep/w.safetensors"
[ -f "$deep/w.safetensors" ] && ok || bad "import --weights LONG: not written at its full path"
python3 -c "import json,sys; assert json.load(open('long.json'))['init']['from'].endswith(sys.argv[1] + '/w.safetensors')" "$deep" && ok || bad "import --weights LONG: init.from cut"
# run: --junit, --html and the step summary found unwritable before any run
tiny() { printf '{"name": "%s", "input": {"shape": [2, 3]}, "layers": [{"name": "fc", "op": "linear", "units": 2}]%s}\n' "$1" "${2:+, $2}"; }
tiny t1 >t1.json
want 2 "run --junit nodir/x" "cannot write into nodir" -- "$PROG" run t1.json --junit nodir/j.xml
grep -q PASS out && bad "run --junit nodir: ran before refusing" || ok
want 2 "run --html nodir/x" "cannot write into nodir" -- "$PROG" run t1.json --html nodir/h.html
want 2 "run --junit CASE" "is an input" -- "$PROG" run t1.json --junit t1.json
mkdir stepdir
GITHUB_ACTIONS=true GITHUB_STEP_SUMMARY="$TMP/stepdir" want 2 "unwritable GITHUB_STEP_SUMMARY" "GITHUB_STEP_SUMMARY" -- "$PROG" run t1.json
# ---- merges that lie ----------------------------------------------------------------------
mkdir -p c
tiny pass_me >c/a.json
tiny fail_me '"expect": "mismatch"' >c/b.json
"$PROG" run c/ --report sh1/ --shard 1/2 --quiet >/dev/null 2>&1
"$PROG" run c/ --report sh2/ --shard 2/2 --quiet >/dev/null 2>&1
want 1 "merge of both shards" "" -- "$PROG" merge sh1 sh2
want 2 "merge of one shard of two" "missing" -- "$PROG" merge sh1
want 2 "merge of the other shard" "missing" -- "$PROG" merge sh2
"$PROG" merge sh1 --allow-partial >/dev/null 2>&1; r1=$?
"$PROG" merge sh2 --allow-partial >/dev/null 2>&1; r2=$?
[ $r1 -ne 2 ] && [ $r2 -ne 2 ] && ok || bad "merge --allow-partial refused a part"
# gradcheck and compare: --junit and --report found unwritable before any work
want 2 "gradcheck --junit nodir" "cannot write into nodir" -- "$PROG" gradcheck t1.json --junit nodir/g.xml
grep -q PASS out && bad "gradcheck ran before refusing --junit" || ok
want 2 "gradcheck --report CASE" "is an input" -- "$PROG" gradcheck t1.json --report t1.json
st ca.safetensors x:2:1
st cb.safetensors x:2:1
want 2 "compare --junit nodir" "cannot write into nodir" -- "$PROG" compare ca.safetensors cb.safetensors --junit nodir/c.xml
want 2 "compare --junit INPUT" "is an input" -- "$PROG" compare ca.safetensors cb.safetensors --junit cb.safetensors
# merge: outputs checked before anything is written; no output is an input
ls sh1 >sh1.before
want 2 "merge sh1 sh2 --report sh1/" "is the input folder" -- "$PROG" merge sh1 sh2 --report sh1/
ls sh1 | cmp -s - sh1.before && ok || bad "merge --report sh1/ changed sh1"
want 2 "merge --report ./sh1//" "is the input folder" -- "$PROG" merge sh1 sh2 --report ./sh1//
want 2 "merge --junit nodir" "cannot write into nodir" -- "$PROG" merge sh1 sh2 --report mout/ --junit nodir/j.xml
[ -e mout ] && bad "merge wrote mout/ before refusing --junit" || ok
want 2 "merge --html INPUT" "is an input" -- "$PROG" merge sh1 sh2 --html sh1/summary.json
# a summary saying pass beside a report saying fail (two runs into one folder)
"$PROG" run c/ --report lie/ --quiet >/dev/null 2>&1
python3 - <<'PY'
import json
s = json.load(open('lie/summary.json'))
for it in s['items']:
    it['status'] = 'pass'
    it['message'] = None
s['counts'] = {'pass': len(s['items']), 'fail': 0, 'error': 0, 'skipped': 0}
s['exit_code'] = 0
json.dump(s, open('lie/summary.json', 'w'))
PY
want 2 "merge of a summary that disagrees with its report" "says pass, its report" -- "$PROG" merge lie

# ---- run MODEL.onnx: its temporary weights in $TMPDIR, removed on every signal ------------
mkdir -p tmpd
python3 - "$PROG" "$ROOT/tests/fixtures/onnx/small_cnn.onnx" "$TMP/tmpd" <<'PY' && ok || bad "run MODEL.onnx and signals: see above"
import os, signal, subprocess, sys, time
prog, model, tmpd = sys.argv[1:4]
env = dict(os.environ, TMPDIR=tmpd)
bad = 0
# the harness leaves a signal alone that its starter ignores (nohup): the child gets the
# default dispositions, whatever this test was started under
def default_signals():
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    p = subprocess.Popen([prog, 'run', model, '--steps', '100000', '--quiet'], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         preexec_fn=default_signals)
    t0 = time.time()
    while not os.listdir(tmpd) and time.time() - t0 < 20:
        time.sleep(0.01)
    if not os.listdir(tmpd):
        print(f"{sig.name}: no temporary file appeared in TMPDIR"); bad = 1
    p.send_signal(sig)
    p.wait(timeout=30)
    if p.returncode != -sig:
        print(f"{sig.name}: exit {p.returncode}, want death by the signal"); bad = 1
    if os.listdir(tmpd):
        print(f"{sig.name}: left {os.listdir(tmpd)}"); bad = 1
        for f in os.listdir(tmpd):
            os.unlink(os.path.join(tmpd, f))
sys.exit(bad)
PY
# ---- a killed worker is named with its signal ---------------------------------------------
mkdir -p slow
printf '{"name": "slow_a", "input": {"shape": [64, 64]}, "train": {"steps": 100000}, "layers": [{"name": "fc", "op": "linear", "units": 64}]}\n' >slow/a.json
printf '{"name": "slow_b", "input": {"shape": [64, 64]}, "train": {"steps": 100000}, "layers": [{"name": "fc", "op": "linear", "units": 64}]}\n' >slow/b.json
python3 - "$PROG" "$TMP/slow" <<'PY' && ok || bad "killed worker: see above"
import os, signal, subprocess, sys, time
prog, d = sys.argv[1:3]
p = subprocess.Popen([prog, 'run', d + '/', '--jobs', '2', '--quiet'], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True, errors='replace')
kids = []
t0 = time.time()
while len(kids) < 2 and time.time() - t0 < 20:
    try:
        kids = open(f'/proc/{p.pid}/task/{p.pid}/children').read().split()
    except OSError:
        pass
    time.sleep(0.05)
if not kids:
    print("no worker started"); p.kill(); sys.exit(1)
for k in kids:
    os.kill(int(k), signal.SIGKILL)
out, err = p.communicate(timeout=60)
ok = p.returncode == 2 and 'killed by signal 9' in err
if not ok:
    print(f"exit {p.returncode}, stderr: {err!r}")
sys.exit(0 if ok else 1)
PY

# @@SECTIONS@@

echo "hostile_inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
