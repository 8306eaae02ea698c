/*
 * The CUDA backend's API in a program built without CUDA (CUDA=0, a sanitizer build, or no
 * nvcc/cuDNN at build time; see the Makefile's CUDA block). Compiled only then, in place
 * of the .cu files in backends/cuda/, so `--backend cuda` gets a real answer: this program
 * cannot run on a GPU, and how to rebuild one that can.
 */
#include "backends/cuda/cuda_api.h"

#include <stdio.h>

#define CK_CUDA_ABSENT_MSG                                                                 \
    "this ckpt-harness was built without CUDA (nvcc not found at build time; rebuild with " \
    "CUDA_HOME=... or CUDA=1)"

bool ck_cuda_available(char *why, size_t n)
{
    if (why && n)
        snprintf(why, n, "%s", CK_CUDA_ABSENT_MSG);
    return false;
}

ck_status ck_backend_cuda_create(ck_backend **out, int device, ck_cuda_algo_policy policy,
                                 ck_error *err)
{
    (void)device;
    (void)policy;
    *out = NULL;
    return ck_fail(err, CK_ERR_UNSUPPORTED, "%s", CK_CUDA_ABSENT_MSG);
}

bool ck_backend_is_cuda(const ck_backend *b)
{
    (void)b;
    return false;
}

int ck_cuda_algo_records(const ck_backend *b, const ck_cuda_algo_record **out)
{
    (void)b;
    *out = NULL;
    return 0;
}

void ck_cuda_algo_records_clear(ck_backend *b)
{
    (void)b;
}
