#!/usr/bin/env python3
"""Checks the architecture CONTRIBUTING.md ("How it works") describes, from the sources alone.

1. Every #include "..." is written from the project root and names a file that exists.
2. Each folder includes only the layers its row allows (the table below).
3. Nothing outside backends/ includes a backend's private folder (backends/ref/,
   backends/cpu/, backends/cuda/, backends/check/); tests and fuzz targets may, to reach
   internals. Inside backends/, a backend's folder includes itself, the top-level files,
   the shared checks (backends/check/) and, for a backend built on another, that one's
   entry points (COMPOSED: the fast cpu backend on ref_ops.h).
4. No include cycle and no call cycle between units. A unit is a header with every file
   that defines a function it declares, found by content, whatever the files are called
   (backends/cpu/backend.h and the backend.c that defines its functions; a .c and the .h of
   the same name always); a call is a function of one unit calling another unit's.
5. Library code never prints: no printf/fprintf/puts/fputs/putchar/perror, no exit() or
   abort() outside harness/cli/ and reports/ (files are written with fwrite or write).
6. No function in harness/, backends/ or reports/ is longer than 150 lines.
`check_layers.py [ROOT]` checks the tree at ROOT (default: this checkout);
tests/layout/test_check_layers.py checks the checker on small trees.
Prints one line per finding and exits 1 when there is any; prints a summary otherwise.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE_DIRS = ["harness", "reports", "backends"]
# where no function may be longer than MAX_FUNCTION_LINES
LENGTH_DIRS = ("harness/", "backends/", "reports/")

CORE = {"harness/core"}
IO = CORE | {"harness/io"}
BACKEND_IF = {"backends/backend.h", "backends/registry.h"}
MODEL = IO | {"harness/model"} | BACKEND_IF
ENGINE = MODEL | {"harness/engine"}
VERIFY = ENGINE | {"harness/verify"}
COMPARE = IO | {"harness/compare"}
REPORTS = VERIFY | COMPARE | {"reports"}
BACKENDS = CORE | {"backends"}
# folder -> what it may include (a folder, or one file)
ALLOWED = {
    "harness/core": CORE,
    "harness/io": IO,
    "harness/model": MODEL,
    "harness/engine": ENGINE,
    "harness/verify": VERIFY,
    "harness/compare": COMPARE,
    "harness/cli": REPORTS | BACKEND_IF | {"harness/cli"},
    "reports": REPORTS,
    "backends": BACKENDS,
}
PRIVATE = ("backends/ref/", "backends/cpu/", "backends/cuda/", "backends/check/")
# the host-side checks every backend shares
SHARED = "backends/check/"
# backend folder -> the other backends' headers it is built on
COMPOSED = {"backends/cpu/": ("backends/ref/ref_ops.h",)}
PRINTS = re.compile(r"\b(v?f?printf|f?puts|fputc|putchar|perror|exit|abort)\s*\(")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root=ROOT):
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(dirpath, f), root)


def layer_of(path):
    parts = path.split("/")
    if parts[0] == "harness":
        return "/".join(parts[:2])
    if parts[0] == "backends":
        return "backends"
    return parts[0]


def allowed(src, target):
    layer = layer_of(src)
    if src.startswith("backends/") and target.startswith("backends/"):
        # the top-level files (the interface, the registry, host memory) may reach every
        # backend: the registry creates them; every backend folder may include itself, the
        # top-level files and the shared host checks (backends/check/); a backend built
        # on another includes that one's entry points (COMPOSED), never anything else of
        # another backend's folder
        if src.count("/") == 1:
            return True
        own = "/".join(src.split("/")[:2]) + "/"
        if target.startswith(own) or target.count("/") == 1 or target.startswith(SHARED):
            return True
        return target in COMPOSED.get(own, ())
    rules = ALLOWED.get(layer)
    if rules is None:
        return True
    return target in rules or layer_of(target) in rules and not target.startswith(PRIVATE)


# ---- units by content ---------------------------------------------------------------

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'')
IDENT_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "case", "do",
            "else", "__attribute__", "_Static_assert", "static_assert", "offsetof",
            "__builtin_mul_overflow", "__builtin_add_overflow", "typeof", "alignof"}
MAX_FUNCTION_LINES = 150
# Functions over the limit allowed while another branch splits them (none now); each one
# that has become short or gone is named so it can be struck off.
LENGTH_PENDING = set()


def strip_code(text):
    return STRING.sub('""', COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text))


def functions(code):
    """Top-level function definitions: (name, is_static, first line, last line, body)."""
    out = []
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("{") and i > 0:
            # the signature: back to the line that starts at column 0 with a name
            j = i - 1
            while j > 0 and (lines[j].startswith((" ", "\t")) or not lines[j].strip()):
                j -= 1
            sig = " ".join(lines[j:i])
            m = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*\([^;]*\)\s*(const)?\s*$", sig)
            depth, k = 0, i
            while k < len(lines):
                depth += lines[k].count("{") - lines[k].count("}")
                if depth <= 0:
                    break
                k += 1
            if m and "=" not in sig.split("(")[0] and not sig.lstrip().startswith(
                    ("typedef", "struct", "enum", "union", "#")):
                body = "\n".join(lines[i:k + 1])
                out.append((m.group(1), bool(re.match(r"\s*(static|template)\b", sig)), j + 1,
                            k + 1, body))
            i = k + 1
            continue
        i += 1
    return out


def declared(code):
    """Names of functions a header declares (prototypes ending in ';')."""
    names = set()
    for m in re.finditer(r"^[A-Za-z_][^;{}#]*?\b([A-Za-z_][A-Za-z0-9_]*)\s*\([^;{}]*\)\s*;",
                         code, re.M):
        names.add(m.group(1))
    return names


class Units:
    """Union-find over files: a source file and every header whose functions it defines
    are one unit, whatever the files are called."""

    def __init__(self, files):
        self.parent = {f: f for f in files}

    def find(self, f):
        while self.parent[f] != f:
            self.parent[f] = self.parent[self.parent[f]]
            f = self.parent[f]
        return f

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sccs


def check(root):
    """Every finding in the tree at root, and a summary."""
    problems = []
    files = sorted(sources(root))
    texts = {f: open(os.path.join(root, f), encoding="utf-8").read() for f in files}
    codes = {f: strip_code(t) for f, t in texts.items()}
    includes = {}
    for f in files:
        includes[f] = []
        for inc in INCLUDE.findall(texts[f]):
            if not os.path.exists(os.path.join(root, inc)):
                problems.append(f"{f}: includes \"{inc}\", which is not a path from the project root")
                continue
            includes[f].append(inc)
            if not allowed(f, inc):
                problems.append(f"{f}: {layer_of(f)} may not include {inc}")
            if not f.startswith("backends/") and inc.startswith(PRIVATE):
                problems.append(f"{f}: includes a backend's private header {inc}")
        lib = not (f.startswith("harness/cli/") or f.startswith("reports/"))
        if lib:
            for m in PRINTS.finditer(codes[f]):
                line = codes[f][: m.start()].count("\n") + 1
                problems.append(f"{f}:{line}: library code prints or exits ({m.group(0).strip()})")

    # units: a file that defines a function a header declares is that header's unit
    units = Units(files)
    defs = {f: functions(codes[f]) for f in files if not f.endswith((".h", ".cuh"))}
    defined_in = {}
    for f, fns in defs.items():
        for name, static, _, _, _ in fns:
            if not static:
                defined_in.setdefault(name, set()).add(f)
    for h in files:
        if h.endswith((".h", ".cuh")):
            for name in declared(codes[h]):
                for f in defined_in.get(name, ()):
                    units.union(h, f)
    for f in files:  # a .c and the .h of the same name are one unit too
        base = os.path.splitext(f)[0]
        for ext in (".h", ".cuh"):
            if base + ext in units.parent:
                units.union(f, base + ext)

    def unit(f):
        return os.path.splitext(units.find(f))[0]

    inc_edges, call_edges = {}, {}
    for f in files:
        for inc in includes[f]:
            if unit(inc) != unit(f):
                inc_edges.setdefault(unit(f), set()).add(unit(inc))
    notes, long_pending = [], set()
    for f, fns in defs.items():
        local = {name for name, static, _, _, _ in fns if static}
        for name, _, first, last, body in fns:
            if last - first + 1 > MAX_FUNCTION_LINES and f.startswith(LENGTH_DIRS):
                if (f, name) in LENGTH_PENDING:
                    long_pending.add((f, name))
                else:
                    problems.append(f"{f}:{first}: function {name} is {last - first + 1} "
                                    f"lines (at most {MAX_FUNCTION_LINES})")
            for callee in set(IDENT_CALL.findall(body)) - KEYWORDS - local - {name}:
                for g in defined_in.get(callee, ()):
                    if unit(g) != unit(f):
                        call_edges.setdefault(unit(f), set()).add(unit(g))
    for comp in cycles(inc_edges):
        problems.append("include cycle between units: " + " <-> ".join(comp))
    for comp in cycles(call_edges):
        problems.append("call cycle between units: " + " <-> ".join(comp))
    if root == ROOT:
        for f, name in sorted(LENGTH_PENDING - long_pending):
            notes.append(f"note: {f}: {name} is no longer over {MAX_FUNCTION_LINES} lines: "
                         "strike it off LENGTH_PENDING")
        for f, name in sorted(long_pending):
            notes.append(f"note: {f}: {name} is over {MAX_FUNCTION_LINES} lines, pending its "
                         "split (LENGTH_PENDING)")
    summary = "\n".join(notes + [""]) + (f"layers: {len(files)} files in {len(set(unit(f) for f in files))} units, "
               f"{sum(len(e) for e in inc_edges.values())} unit includes, "
               f"{sum(len(e) for e in call_edges.values())} unit calls: every include allowed, "
               f"no include or call cycle, no printing library code, no function over "
               f"{MAX_FUNCTION_LINES} lines" + (f" but the {len(long_pending)} pending"
                                                if long_pending else ""))
    return problems, summary


def main(argv):
    root = argv[1] if len(argv) > 1 else ROOT
    problems, summary = check(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
