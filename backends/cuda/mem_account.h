/*
 * The CUDA backend's count of its own device memory: cuDNN workspaces and other scratch
 * (padded copies, fp64 copies, reduction partials), live and peak, for the device memory
 * report (backend.h, CK_PROC_DEVICE_MEMORY). Header-only plain C, unit-tested on the CPU.
 * Tensors the executor allocates are counted by the executor's accounting allocator; the
 * pool's own high-water mark (everything together) is read from CUDA separately.
 */
#ifndef CK_CUDA_MEM_ACCOUNT_H
#define CK_CUDA_MEM_ACCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t workspace_live, workspace_peak; /* cuDNN workspaces */
    int64_t scratch_live, scratch_peak;     /* every other backend-internal buffer */
} ck_cuda_mem_account;

static inline void ck_cuda_mem_on_alloc(ck_cuda_mem_account *m, size_t bytes, bool workspace)
{
    int64_t *live = workspace ? &m->workspace_live : &m->scratch_live;
    int64_t *peak = workspace ? &m->workspace_peak : &m->scratch_peak;
    *live += (int64_t)bytes;
    if (*live > *peak)
        *peak = *live;
}

static inline void ck_cuda_mem_on_free(ck_cuda_mem_account *m, size_t bytes, bool workspace)
{
    int64_t *live = workspace ? &m->workspace_live : &m->scratch_live;
    *live -= (int64_t)bytes;
    if (*live < 0)
        *live = 0;
}

/* Starts a new peak from what is live now (between cases). */
static inline void ck_cuda_mem_reset_peaks(ck_cuda_mem_account *m)
{
    m->workspace_peak = m->workspace_live;
    m->scratch_peak = m->scratch_live;
}

#endif
