/* Small filesystem helpers shared by the CLI and the runner's dumps. */
#ifndef CK_FSUTIL_H
#define CK_FSUTIL_H

#include "harness/core/status.h"

/* Creates path and its missing parents (like mkdir -p); an existing directory is fine. */
ck_status ck_mkdir_p(const char *path, ck_error *err);

#endif
