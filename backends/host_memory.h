/*
 * Host memory for the CPU backends (ref and cpu): the six memory entries of backend.h for
 * tensors that live in ordinary process memory, 64-byte aligned for vectorised loops, and
 * the calibration rounding that works in place on such tensors.
 */
#ifndef CK_HOST_MEMORY_H
#define CK_HOST_MEMORY_H

#include "backends/backend.h"

/* Sets b's alloc, free, upload, download, zero, copy and calibration_round to the host
 * implementations. */
void ck_host_memory_install(ck_backend *b);

#endif
