/* Filesystem helpers (see fsutil.h). */
#include "harness/io/files.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

ck_status ck_mkdir_p(const char *path, ck_error *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return ck_fail(err, CK_ERR_INPUT, "%s: path too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return ck_fail(err, CK_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return ck_fail(err, CK_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ck_fail(err, CK_ERR_IO, "%s: not a directory", buf);
    return CK_OK;
}
