/*
 * Files: creating directories, mapping a file read-only, atomic writes (files.h).
 */
#include "harness/io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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


ck_status ck_map_file(const char *path, void **p, size_t *len, ck_error *err)
{
    *p = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: too large to map", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return CK_OK;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return ck_fail(err, CK_ERR_IO, "%s: cannot map: %s", path, strerror(e));
    *p = m;
    *len = (size_t)sb.st_size;
    return CK_OK;
}

void ck_unmap_file(void *p, size_t len)
{
    if (p && len)
        munmap(p, len);
}

ck_status ck_atomic_open(ck_atomic_file *af, const char *path, ck_error *err)
{
    memset(af, 0, sizeof *af);
    af->path = path;
    size_t n = strlen(path) + 32;
    af->tmp = malloc(n);
    if (!af->tmp)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    /* Same directory as path, so the rename cannot cross file systems. */
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        ck_status st = ck_fail(err, CK_ERR_IO, "%s: cannot create temporary file %s: %s", path,
                               af->tmp, strerror(errno));
        free(af->tmp);
        af->tmp = NULL;
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        ck_status st = ck_fail(err, CK_ERR_IO, "%s: cannot write %s: %s", path, af->tmp,
                               strerror(errno));
        close(fd);
        unlink(af->tmp);
        free(af->tmp);
        af->tmp = NULL;
        return st;
    }
    af->f = f;
    return CK_OK;
}

void ck_atomic_write(ck_atomic_file *af, const void *data, size_t len)
{
    if (!af->f || af->failed || len == 0)
        return;
    if (fwrite(data, 1, len, (FILE *)af->f) != len)
        af->failed = true;
}

void ck_atomic_abort(ck_atomic_file *af)
{
    if (af->f)
        fclose((FILE *)af->f);
    af->f = NULL;
    if (af->tmp)
        unlink(af->tmp);
    free(af->tmp);
    af->tmp = NULL;
}

ck_status ck_atomic_commit(ck_atomic_file *af, ck_error *err)
{
    FILE *f = af->f;
    ck_status st = CK_OK;
    if (!f)
        return ck_fail(err, CK_ERR_INTERNAL, "%s: file not open", af->path);
    if (af->failed || fflush(f) != 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot write %s: %s", af->path, af->tmp, strerror(errno));
        goto fail;
    }
    if (fsync(fileno(f)) != 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot sync %s: %s", af->path, af->tmp, strerror(errno));
        goto fail;
    }
    af->f = NULL;
    if (fclose(f) != 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot close %s: %s", af->path, af->tmp, strerror(errno));
        goto fail;
    }
    if (rename(af->tmp, af->path) != 0) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot rename %s into place: %s", af->path, af->tmp,
                     strerror(errno));
        goto fail;
    }
    free(af->tmp);
    af->tmp = NULL;
    return CK_OK;
fail:
    ck_atomic_abort(af);
    return st;
}

ck_status ck_write_text_atomic(const char *path, const char *text, ck_error *err)
{
    ck_atomic_file af;
    ck_status st = ck_atomic_open(&af, path, err);
    if (st != CK_OK)
        return st;
    ck_atomic_write(&af, text, strlen(text));
    ck_atomic_write(&af, "\n", 1);
    return ck_atomic_commit(&af, err);
}

ck_status ck_read_file(const char *path, size_t max_bytes, char **text, size_t *len,
                       ck_error *err)
{
    ck_status st = CK_OK;
    char *buf = NULL;
    size_t used = 0, cap = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        st = ck_fail(err, CK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        goto cleanup;
    }
    for (;;) {
        if (cap - used < 4096) {
            size_t new_cap = cap ? cap * 2 : 16384;
            char *grown = realloc(buf, new_cap + 1);
            if (!grown) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                goto cleanup;
            }
            buf = grown;
            cap = new_cap;
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (used > max_bytes) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: file is larger than %zu bytes", path,
                         max_bytes);
            goto cleanup;
        }
        if (got == 0) {
            if (ferror(f)) {
                st = ck_fail(err, CK_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    buf = NULL;
cleanup:
    if (f)
        fclose(f);
    free(buf);
    return st;
}

ck_status ck_parse_file(const char *path, ck_text_parse_fn parse, void *obj, ck_error *err)
{
    void *p;
    size_t len;
    ck_status st = ck_map_file(path, &p, &len, err);
    if (st != CK_OK)
        return st;
    st = parse(obj, p ? (const char *)p : "", len, path, err);
    ck_unmap_file(p, len);
    return st;
}
