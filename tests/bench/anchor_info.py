#!/usr/bin/env python3
"""Which BLAS `make bench`'s anchors use: one line for numpy (its build configuration, and
what threadpoolctl sees at run time where it is installed) and one for PyTorch
(torch.__config__.show(): BLAS_INFO, MKL, oneDNN, CPU capability). A library that cannot be
imported gets a line saying so. Usage: anchor_info.py numpy|torch
"""
import re
import sys


def numpy_line():
    try:
        import numpy as np
    except Exception as e:  # noqa: BLE001 - any import failure means "no anchor"
        return f"numpy: not importable ({type(e).__name__}: {e})"
    blas = "?"
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.26
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        blas = f"{b.get('name', '?')} {b.get('version', '')}".strip()
        extra = b.get("openblas configuration")
        if extra:
            blas += f" ({extra})"
    except Exception:  # noqa: BLE001 - older numpy: no dict mode
        info = getattr(getattr(np, "__config__", None), "blas_opt_info", None)
        if isinstance(info, dict):
            blas = ",".join(info.get("libraries", [])) or "?"
    line = f"numpy {np.__version__}: built with BLAS {blas}"
    try:
        from threadpoolctl import threadpool_info

        pools = [f"{p.get('internal_api')} {p.get('version')} {p.get('architecture', '')} "
                 f"{p.get('num_threads')} threads".strip()
                 for p in threadpool_info() if p.get("user_api") == "blas"]
        if pools:
            line += "; at run time (threadpoolctl): " + ", ".join(pools)
    except Exception:  # noqa: BLE001 - threadpoolctl is optional
        pass
    return line


def torch_line():
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return f"torch: not importable ({type(e).__name__}: {e})"
    cfg = torch.__config__.show()
    parts = []
    m = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    parts.append(f"BLAS_INFO={m.group(1) if m else '?'}")
    m = re.search(r"Math Kernel Library Version ([0-9.]+)", cfg)
    if m:
        parts.append(f"MKL {m.group(1)}")
    m = re.search(r"MKL-DNN (v[0-9.]+)", cfg)
    if m:
        parts.append(f"oneDNN {m.group(1)}")
    m = re.search(r"CPU capability usage: (\S+)", cfg)
    if m:
        parts.append(f"CPU capability {m.group(1)}")
    return f"torch {torch.__version__}: " + ", ".join(parts)


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in ("numpy", "torch"):
        print("usage: anchor_info.py numpy|torch", file=sys.stderr)
        return 2
    print(numpy_line() if which == "numpy" else torch_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
