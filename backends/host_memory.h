/*
 * Host memory for the CPU backends (ref and cpu): the six memory entries of backend.h for
 * tensors that live in ordinary process memory, 64-byte aligned for vectorised loops.
 */
#ifndef CK_HOST_MEMORY_H
#define CK_HOST_MEMORY_H

#include "backends/backend.h"

/* Sets b's alloc, free, upload, download, zero and copy to the host implementations. */
void ck_host_memory_install(ck_backend *b);

#endif
