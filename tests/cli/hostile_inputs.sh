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
    name, shape, value = spec.split(':')
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
# @@SECTIONS@@

echo "hostile_inputs: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
