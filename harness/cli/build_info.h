/* What the program was built from and how: embedded at build time by the Makefile. */
#ifndef CK_BUILD_INFO_H
#define CK_BUILD_INFO_H

#include <stdbool.h>

const char *ck_build_git_commit(void); /* "unknown" outside a git checkout */
const char *ck_build_compiler(void);
const char *ck_build_cflags(void);
bool ck_build_cuda(void);              /* the CUDA module was built */

#endif
