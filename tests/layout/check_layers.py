#!/usr/bin/env python3
"""Checks the architecture the README's "How it works" describes, from the sources alone.

1. Every #include "..." is written from the project root and names a file that exists.
2. Each folder includes only the layers its row allows (the table below).
3. Nothing outside backends/ includes a backend's private folder (backends/ref/,
   backends/cpu/, backends/cuda/, backends/check/); tests and fuzz targets may, to reach
   internals. Inside backends/, a backend's folder includes itself, the top-level files,
   the shared checks (backends/check/) and, for a backend built on another, that one's
   entry points (COMPOSED: the fast cpu backend on ref_ops.h).
4. No include cycle between units (a .c file and the .h of the same name are one unit).
5. Library code never prints: no printf/fprintf/puts/fputs/putchar/perror, no exit() or
   abort() outside harness/cli/ and reports/ (files are written with fwrite or write).
Prints one line per finding and exits 1 when there is any; prints a summary otherwise.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE_DIRS = ["harness", "reports", "backends"]

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


def sources():
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, d)):
            for f in files:
                if f.endswith((".c", ".h", ".cu", ".cuh")):
                    yield os.path.relpath(os.path.join(dirpath, f), ROOT)


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


def unit(path):
    return os.path.splitext(path)[0]


def main():
    problems = []
    edges = {}
    files = sorted(sources())
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8").read()
        for inc in INCLUDE.findall(text):
            if not os.path.exists(os.path.join(ROOT, inc)):
                problems.append(f"{f}: includes \"{inc}\", which is not a path from the project root")
                continue
            if not allowed(f, inc):
                problems.append(f"{f}: {layer_of(f)} may not include {inc}")
            if not f.startswith("backends/") and inc.startswith(PRIVATE):
                problems.append(f"{f}: includes a backend's private header {inc}")
            if unit(inc) != unit(f):
                edges.setdefault(unit(f), set()).add(unit(inc))
        lib = not (f.startswith("harness/cli/") or f.startswith("reports/"))
        if lib:
            code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
            code = re.sub(r'"(\\.|[^"\\])*"', '""', code)
            for m in PRINTS.finditer(code):
                line = code[: m.start()].count("\n") + 1
                problems.append(f"{f}:{line}: library code prints or exits ({m.group(0).strip()})")
    # cycles between units (Tarjan's strongly connected components)
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
    for comp in sccs:
        problems.append("include cycle between units: " + " <-> ".join(comp))
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"layers: {len(files)} files, {sum(len(e) for e in edges.values())} unit includes: "
          "every include allowed, no cycle, no printing library code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
