#!/usr/bin/env python3
"""Checks the layer checker (check_layers.py) on small trees it must pass or fail.

Each case writes a few files into a temporary root and runs the checker's check() on it:
the registry <-> cpu backend cycle the project once had (found by content although the
files are named cpu_backend.h and backend_cpu.c), as an include cycle and as a call cycle
without includes, a function over the length limit, a backend reaching into another's
folder, library code that prints, and the same trees without the fault (which must pass).
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

BACKEND_H = "#ifndef B_H\n#define B_H\ntypedef int ck_backend;\n#endif\n"
REGISTRY_H = ("#ifndef R_H\n#define R_H\n#include \"backends/backend.h\"\n"
              "int ck_backend_create(const char *name, ck_backend **out);\n#endif\n")
CPU_H = ("#ifndef C_H\n#define C_H\n#include \"backends/backend.h\"\n"
         "int ck_backend_cpu_create_with(ck_backend **out, int threads);\n#endif\n")
REGISTRY_C = ("#include \"backends/registry.h\"\n#include \"backends/cpu/cpu_backend.h\"\n\n"
              "int ck_backend_create(const char *name, ck_backend **out)\n{\n"
              "    (void)name;\n    return ck_backend_cpu_create_with(out, 1);\n}\n")


def cpu_c(include_registry, call_registry):
    inc = "#include \"backends/registry.h\"\n" if include_registry else ""
    body = ("    ck_backend *ref = 0;\n    ck_backend_create(\"ref\", &ref);\n"
            if call_registry else "")
    return ("#include \"backends/cpu/cpu_backend.h\"\n" + inc + "\n"
            "int ck_backend_cpu_create_with(ck_backend **out, int threads)\n{\n" + body +
            "    (void)out;\n    return threads;\n}\n")


def tree(files):
    root = tempfile.mkdtemp(prefix="layers-")
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    return root


def base(**extra):
    files = {"backends/backend.h": BACKEND_H, "backends/registry.h": REGISTRY_H,
             "backends/registry.c": REGISTRY_C, "backends/cpu/cpu_backend.h": CPU_H,
             "backends/cpu/backend_cpu.c": cpu_c(False, False)}
    files.update(extra)
    return files


def long_function(lines):
    body = "".join(f"    x += {i};\n" for i in range(lines - 4))
    return ("#include \"harness/core/long.h\"\n\nint long_one(int x)\n{\n" + body +
            "    return x;\n}\n")


CASES = [
    ("a clean tree passes", base(), None),
    ("the registry <-> cpu include and call cycle is caught by content",
     base(**{"backends/cpu/backend_cpu.c": cpu_c(True, True)}),
     "cycle between units: backends/cpu/"),
    ("a call cycle without an include cycle is caught",
     base(**{"backends/cpu/backend_cpu.c": cpu_c(False, True).replace(
         "\nint ck_backend_cpu", "\nint ck_backend_create(const char *name, ck_backend **out);"
         "\n\nint ck_backend_cpu", 1)}),
     "call cycle between units"),
    ("a function of 151 lines is refused",
     base(**{"harness/core/long.h": "int long_one(int x);\n",
             "harness/core/long.c": long_function(151)}),
     "function long_one is 151 lines"),
    ("a function of 150 lines passes",
     base(**{"harness/core/long.h": "int long_one(int x);\n",
             "harness/core/long.c": long_function(150)}),
     None),
    ("a backend reaching into another backend's folder is refused",
     base(**{"backends/ref/ref_ops.h": "int ref_x(void);\n",
             "backends/cuda/k.c": "#include \"backends/ref/ref_ops.h\"\nint k(void)\n{\n"
                                  "    return ref_x();\n}\n"}),
     "backends may not include backends/ref/ref_ops.h"),
    ("library code that prints is refused",
     base(**{"harness/core/p.c": "#include <stdio.h>\nvoid p(void)\n{\n"
                                 "    printf(\"x\");\n}\n"}),
     "library code prints"),
]


def main():
    failures = 0
    for desc, files, want in CASES:
        problems, _ = check_layers.check(tree(files))
        found = any(want in p for p in problems) if want else not problems
        if not found:
            failures += 1
            print(f"FAIL: {desc}: expected {'a finding with ' + repr(want) if want else 'none'}"
                  f", got {problems}")
    if failures:
        return 1
    print(f"check_layers: {len(CASES)} checker cases pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
