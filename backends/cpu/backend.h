/*
 * The fast CPU backend (backends/cpu, registered as "cpu"): multi-threaded, SIMD, and
 * deterministic by construction (docs/cpu-backend.md).
 */
#ifndef CK_CPU_BACKEND_H
#define CK_CPU_BACKEND_H

#include "backends/backend.h"

/* threads: 0 = every online core, else 1..256. isa: NULL or "auto" = the best this
 * machine supports (avx512f, then avx2+fma, then portable), or "portable", "avx2",
 * "avx512" to force one (CK_ERR_UNSUPPORTED when the machine lacks it). Every choice
 * gives the same bits except where docs/cpu-backend.md says otherwise. */
ck_status ck_backend_cpu_create_with(ck_backend **out, int threads, const char *isa,
                                     ck_error *err);

/* The thread count and the SIMD path ("avx512f", "avx2+fma", "portable") a backend made
 * by ck_backend_cpu_create_with runs with; false for any other backend. */
bool ck_backend_cpu_config(const ck_backend *b, int *threads, const char **isa);

#endif
