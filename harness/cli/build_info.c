/* Build facts (build_info.h); the Makefile defines these for this file only. */
#include "harness/cli/build_info.h"

#ifndef CK_GIT_COMMIT
#define CK_GIT_COMMIT "unknown"
#endif
#ifndef CK_BUILD_COMPILER
#define CK_BUILD_COMPILER "unknown"
#endif
#ifndef CK_BUILD_CFLAGS
#define CK_BUILD_CFLAGS "unknown"
#endif

const char *ck_build_git_commit(void) { return CK_GIT_COMMIT; }
const char *ck_build_compiler(void) { return CK_BUILD_COMPILER; }
const char *ck_build_cflags(void) { return CK_BUILD_CFLAGS; }

bool ck_build_cuda(void)
{
#ifdef CK_CUDA_MODULE_BUILT
    return true;
#else
    return false;
#endif
}
