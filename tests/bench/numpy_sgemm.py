#!/usr/bin/env python3
"""numpy's SGEMM on the shapes tests/bench/sgemm_peak.c takes, best of a few runs, in
GFLOP/s: the peak anchor of `make bench` (numpy's BLAS, usually OpenBLAS, on this machine).
Prints "<shape> <GFLOP/s>" per shape. A `conv:N,C,F,H,W` shape is timed as the N bare
GEMMs (F x 9C) @ (9C x HW) a 3x3 convolution amounts to; building the 9C x HW matrix
(im2col) is not counted, which favours numpy.
Usage: numpy_sgemm.py SHAPE...   (thread count: set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS)
"""
import sys
import time

import numpy as np


def timed(fn, flop):
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    reps = 3 if t > 0.1 else int(0.3 / max(t, 1e-6)) + 2
    best = t
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flop / best / 1e9


def gemm(shape):
    lay = shape[-1] if shape[-1] in "ta" else ""
    m, n, k = (int(v) for v in shape.rstrip("ta").split("x"))
    rng = np.random.default_rng(0)
    a = rng.random((k, m) if lay == "a" else (m, k), dtype=np.float32)
    b = rng.random((n, k) if lay == "t" else (k, n), dtype=np.float32)
    c = np.empty((m, n), np.float32)
    aa = a.T if lay == "a" else a
    bb = b.T if lay == "t" else b
    return timed(lambda: np.matmul(aa, bb, out=c), 2.0 * m * n * k)


def conv(shape):
    n, c, f, h, w = (int(v) for v in shape[5:].split(","))
    rng = np.random.default_rng(0)
    wm = rng.random((f, 9 * c), dtype=np.float32)
    cols = [rng.random((9 * c, h * w), dtype=np.float32) for _ in range(n)]
    out = np.empty((f, h * w), np.float32)

    def run():
        for col in cols:
            np.matmul(wm, col, out=out)

    return timed(run, 2.0 * n * f * h * w * 9 * c)


def main():
    for shape in sys.argv[1:]:
        gf = conv(shape) if shape.startswith("conv:") else gemm(shape)
        print(f"{shape} {gf:.1f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
