#!/bin/sh
# The Makefile's configuration stamp (make -p -n, nothing is built): every object, C and
# CUDA, depends on $(BUILD)/.config-<id>, and the id changes with the compile flags, so
# switching OPT, SAN, CUDA or NVCCFLAGS in one BUILD directory rebuilds everything.
# Usage: sh tests/cli/makefile.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# a clean make: not the flags of a make this test may run under (check-asan passes OPT, SAN)
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES
db() { make -C "$ROOT" --no-print-directory -p -n BUILD="$TMP/b" CK_CUDA_NOTICE_SHOWN=1 "$@" all 2>/dev/null; }
stamp_of() { # the stamp a rule's prerequisites name
    db "$@" | grep -E "^$TMP/b/pic/%\.o: %\.cu " | grep -oE "$TMP/b/\.config-[0-9]+" | head -n 1
}
d=$(db CUDA=0)
printf '%s\n' "$d" | grep -qE "^$TMP/b/pic/%\.o: %\.cu $TMP/b/\.config-[0-9]+" && ok ||
    bad "the .cu rule does not depend on the configuration stamp"
printf '%s\n' "$d" | grep -qE "^$TMP/b/pic/%\.o: %\.c $TMP/b/\.config-[0-9]+" && ok ||
    bad "the module's .c rule does not depend on the configuration stamp"
printf '%s\n' "$d" | grep -qE "^$TMP/b/obj/%\.o: %\.c $TMP/b/\.config-[0-9]+" && ok ||
    bad "the .c rule does not depend on the configuration stamp"
a=$(stamp_of CUDA=0 NVCCFLAGS=-DCK_A)
b=$(stamp_of CUDA=0 NVCCFLAGS=-DCK_B)
c=$(stamp_of CUDA=0 OPT=-O3 NVCCFLAGS=-DCK_A)
a2=$(stamp_of CUDA=0 NVCCFLAGS=-DCK_A)
[ -n "$a" ] && [ "$a" != "$b" ] && ok || bad "NVCCFLAGS does not change the stamp ('$a' '$b')"
[ -n "$c" ] && [ "$a" != "$c" ] && ok || bad "OPT does not change the stamp ('$a' '$c')"
[ "$a" = "$a2" ] && ok || bad "the same flags give different stamps ('$a' '$a2')"
echo "makefile.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
