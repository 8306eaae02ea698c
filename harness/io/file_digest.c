/* SHA-256 of a file (file_digest.h), read in blocks so any size works. */
#include "harness/io/file_digest.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/core/sha256.h"

ck_status ck_sha256_file(const char *path, char hex[65], ck_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ck_fail(err, CK_ERR_IO, "%s: not a regular file", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(errno));
    ck_sha256_ctx c;
    ck_sha256_init(&c);
    unsigned char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        ck_sha256_update(&c, buf, n);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad)
        return ck_fail(err, CK_ERR_IO, "%s: read error", path);
    ck_sha256_final_hex(&c, hex);
    return CK_OK;
}
