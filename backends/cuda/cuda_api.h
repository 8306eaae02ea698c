/*
 * The CUDA backend's C-visible API: creating the backend, asking whether a GPU is usable,
 * the convolution algorithm policy, and the per-layer record of which cuDNN algorithm or
 * cuBLAS routine ran (the report prints it).
 *
 * Private to backends/: the program reaches the backend only through the registry
 * (backends/registry.h), which loads the module ckpt-harness-cuda.so (cuda_module.c holds
 * its entry points). The policy functions (ck_cuda_algo_allowed and friends) live in
 * backends/cuda/algo_policy.c, a plain C file compiled into the library too, so the
 * filtering rules are unit-tested on machines without a GPU.
 *
 * The enum values below mirror cuDNN's own numbering (cudnnConvolution*Algo_t,
 * cudnnDeterminism_t, cudnnMathType_t); conv.cu asserts that at compile time.
 */
#ifndef CK_CUDA_API_H
#define CK_CUDA_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <math.h> /* before the C-linkage block: harness/core/rng.h includes it */
#include <stdarg.h>
extern "C" {
#endif

#include "backends/backend.h"
#include "backends/cuda/algo_policy.h"

/* ---- the backend ---- */

/* Whether a CUDA device can be used. On false, `why` (when not NULL) holds one line, e.g.
 * "no usable CUDA driver or GPU: cudaGetDeviceCount: cudaErrorInsufficientDriver (...)" or
 * "this ckpt-harness was built without CUDA ...". Never crashes, never exits. */
bool ck_cuda_available(char *why, size_t n);

/* Creates the CUDA backend on device `device` (0-based) with algorithm policy `policy`.
 * CK_ERR_INPUT: device < 0 or not present, policy out of range; CK_ERR_BACKEND: no usable
 * GPU or a CUDA/cuBLAS/cuDNN failure (one line in err); CK_ERR_UNSUPPORTED: this program was
 * built without CUDA. Memory handed out by the backend is device memory from a
 * stream-ordered pool (cudaMallocAsync) on the backend's own stream. */
ck_status ck_backend_cuda_create(ck_backend **out, int device, ck_cuda_algo_policy policy,
                                 ck_error *err);

/* Whether b was made by ck_backend_cuda_create. */
bool ck_backend_is_cuda(const ck_backend *b);

/* The records so far, in first-run order (valid until the next op on b or its destroy);
 * 0 and *out = NULL for a backend that is not CUDA. */
int ck_cuda_algo_records(const ck_backend *b, const ck_cuda_algo_record **out);
/* the backend's ce_forward / ce_backward (backend.h) */
ck_status ck_cuda_ce_forward(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                             const ck_tensor *target, double *out, ck_error *err);
ck_status ck_cuda_ce_backward(ck_backend *b, const ck_loss_spec *loss, const ck_tensor *y,
                              const ck_tensor *target, double scale, ck_tensor *dy,
                              ck_error *err);
/* Forgets the records (e.g. between cases). */
void ck_cuda_algo_records_clear(ck_backend *b);

/* The device memory report (backend.h, CK_PROC_DEVICE_MEMORY): the pool's high-water mark
 * (cudaMemPoolAttrUsedMemHigh) and the peaks of cuDNN workspaces and other scratch; reset
 * starts new peaks. False for a backend that is not CUDA. */
bool ck_cuda_device_memory(ck_backend *b, ck_device_memory *out, bool reset);

#ifdef __cplusplus
}
#endif

#endif
