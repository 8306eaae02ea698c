/*
 * The backend registry: every backend is created by name through here, so nothing above
 * backends/ names a backend's own header (ggml's registry is the model).
 *
 *   cpu   the fast CPU backend (backends/cpu/, the default): packed SGEMM and direct /
 *         implicit-GEMM convolutions with SIMD and threads, deterministic by construction
 *         (docs/cpu-backend.md)
 *   ref   the CPU reference (backends/ref/): plain loops, float64 accumulation
 *   cuda  cuBLAS, cuDNN and CUDA kernels (backends/cuda/), loaded at run time from the
 *         module ckpt-harness-cuda.so beside the program, so one program runs on machines
 *         without the CUDA libraries and uses them where they are
 *
 * Optional capabilities (the CUDA backend's algorithm records and device memory) are
 * reached with ck_backend_proc and a CK_PROC_* name from backend.h.
 */
#ifndef CK_REGISTRY_H
#define CK_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"

/* What a command line can ask of a backend at creation. */
typedef struct {
    int device;       /* --device N; 0 by default */
    const char *algo; /* --algo NAME, or NULL for the backend's default */
    int threads;      /* --threads N (cpu); 0 = every online core */
} ck_backend_options;

/* How many backends the registry knows, and each one's name and one-line summary. */
int ck_backend_count(void);
const char *ck_backend_name_at(int i);
const char *ck_backend_summary_at(int i);
/* "cpu, cuda": every name, for messages. */
const char *ck_backend_names(void);
/* Whether the named backend has a choice of algorithms (--algo), and devices (--device). */
bool ck_backend_has_algorithms(const char *name);
/* Whether the named backend runs on a choice of threads (--threads). */
bool ck_backend_has_threads(const char *name);

/* Whether the named backend can be created here; on false, why (one line) says why: an
 * unknown name, a program built without CUDA, a module or library that cannot be loaded,
 * no GPU. */
bool ck_backend_available(const char *name, char *why, size_t n);

/* Creates the named backend (o may be NULL for the defaults). CK_ERR_INPUT: unknown name
 * or bad option; CK_ERR_UNSUPPORTED: the backend cannot run here (module or libraries
 * missing, no GPU), with one line saying why. Destroy with b->destroy(b). */
ck_status ck_backend_create(const char *name, const ck_backend_options *o, ck_backend **out,
                            ck_error *err);

/* The backend's optional capability `proc` (CK_PROC_*), or NULL. */
void *ck_backend_proc(ck_backend *b, const char *proc);

/* Asks the backend's `supports` for every op before any run: the first op it lacks in
 * dtype fails with CK_ERR_UNSUPPORTED "<what>: layer `<name>` (<op>): the <backend>
 * backend has no <op> in <dtype>". names and op_names are per op (for the message). */
ck_status ck_backend_check_ops(ck_backend *b, int n, const ck_op_params *const *ops,
                               const char *const *names, const char *const *op_names,
                               ck_dtype dtype, const char *what, ck_error *err);

/* The same before any run for the loss and the optimizer: CK_ERR_UNSUPPORTED "<what>: the
 * <backend> backend has no <loss> loss in <dtype>" (or "no <optimizer> optimizer"). */
ck_status ck_backend_check_training(ck_backend *b, const ck_loss_spec *loss,
                                    const ck_optimizer *opt, ck_dtype dtype, const char *what,
                                    ck_error *err);

#endif
