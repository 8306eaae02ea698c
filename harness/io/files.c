/*
 * Files: creating directories, mapping a file read-only, atomic writes (files.h).
 */
#include "harness/io/files.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
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


/* ---------------------------------------------------------------------------------------
 * Inputs: the one opener, and the record of what this run reads
 * --------------------------------------------------------------------------------------- */

typedef struct {
    dev_t dev;
    ino_t ino;
} file_id;

static file_id *g_inputs;
static size_t g_n_inputs, g_cap_inputs;
static bool g_tracking;

void ck_inputs_track(bool on)
{
    g_tracking = on;
}

void ck_inputs_reset(void)
{
    free(g_inputs);
    g_inputs = NULL;
    g_n_inputs = g_cap_inputs = 0;
    g_tracking = false;
}

static bool is_input(dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < g_n_inputs; i++)
        if (g_inputs[i].dev == dev && g_inputs[i].ino == ino)
            return true;
    return false;
}

static ck_status remember_input(const struct stat *sb, const char *path, ck_error *err)
{
    if (is_input(sb->st_dev, sb->st_ino))
        return CK_OK;
    if (g_n_inputs == g_cap_inputs) {
        size_t nc = g_cap_inputs ? g_cap_inputs * 2 : 32;
        file_id *grown = realloc(g_inputs, nc * sizeof *grown);
        if (!grown)
            return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        g_inputs = grown;
        g_cap_inputs = nc;
    }
    g_inputs[g_n_inputs++] = (file_id){sb->st_dev, sb->st_ino};
    return CK_OK;
}

ck_status ck_input_register(const char *path, ck_error *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return CK_OK; /* nothing there to protect */
    return remember_input(&sb, path, err);
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

ck_status ck_open_input(const char *path, int *fd_out, size_t *size, ck_error *err)
{
    *fd_out = -1;
    *size = 0;
    if (!path || !*path)
        return ck_fail(err, CK_ERR_INPUT, "empty file name");
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return ck_fail(err, CK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return ck_fail(err, CK_ERR_IO, "%s: too large", path);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (g_tracking) {
        ck_status st = remember_input(&sb, path, err);
        if (st != CK_OK) {
            close(fd);
            return st;
        }
    }
    *fd_out = fd;
    *size = (size_t)sb.st_size;
    return CK_OK;
}

/* ---------------------------------------------------------------------------------------
 * Outputs: checked before any work, and again by the atomic writer
 * --------------------------------------------------------------------------------------- */

ck_status ck_output_file_check(const char *path, const char *what, ck_error *err)
{
    const char *w = what ? what : "", *sep = what ? " " : "";
    if (!path || !*path)
        return ck_fail(err, CK_ERR_INPUT, "%s%sempty file name", w, what ? ": " : "");
    size_t n = strlen(path);
    if (path[n - 1] == '/')
        return ck_fail(err, CK_ERR_INPUT, "%s%s%s: names a directory, not a file", w, sep, path);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            return ck_fail(err, CK_ERR_IO, "%s%s%s: is %s; refusing to replace it", w, sep, path,
                           file_kind(sb.st_mode));
        if (is_input(sb.st_dev, sb.st_ino))
            return ck_fail(err, CK_ERR_IO,
                           "%s%s%s: is an input of this run; refusing to overwrite it", w, sep,
                           path);
    } else if (errno != ENOENT) {
        return ck_fail(err, CK_ERR_IO, "%s%s%s: %s", w, sep, path, strerror(errno));
    }
    char *dir = strdup(path);
    if (!dir)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    ck_status st = CK_OK;
    if (stat(dir, &sb) != 0)
        st = ck_fail(err, CK_ERR_IO, "%s%s%s: cannot write into %s: %s", w, sep, path, dir,
                     strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        st = ck_fail(err, CK_ERR_IO, "%s%s%s: %s is not a directory", w, sep, path, dir);
    else if (access(dir, W_OK | X_OK) != 0)
        st = ck_fail(err, CK_ERR_IO, "%s%s%s: cannot write into %s: %s", w, sep, path, dir,
                     strerror(errno));
    free(dir);
    return st;
}

ck_status ck_output_dir_check(const char *dir, const char *what, ck_error *err)
{
    const char *w = what ? what : "", *sep = what ? " " : "";
    if (!dir || !*dir)
        return ck_fail(err, CK_ERR_INPUT, "%s%sempty directory name", w, what ? ": " : "");
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno != ENOENT && errno != ENOTDIR)
            return ck_fail(err, CK_ERR_IO, "%s%s%s: %s", w, sep, dir, strerror(errno));
        /* missing: it will be created, so its nearest existing ancestor must be a writable
         * directory */
        char *up = strdup(dir);
        if (!up)
            return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", dir);
        ck_status st = CK_OK;
        for (;;) {
            size_t n = strlen(up);
            while (n > 1 && up[n - 1] == '/')
                up[--n] = '\0';
            char *slash = strrchr(up, '/');
            if (!slash)
                strcpy(up, ".");
            else if (slash == up)
                up[1] = '\0';
            else
                *slash = '\0';
            if (stat(up, &sb) == 0) {
                if (!S_ISDIR(sb.st_mode))
                    st = ck_fail(err, CK_ERR_IO, "%s%s%s: %s is not a directory", w, sep, dir, up);
                else if (access(up, W_OK | X_OK) != 0)
                    st = ck_fail(err, CK_ERR_IO, "%s%s%s: cannot create it in %s: %s", w, sep,
                                 dir, up, strerror(errno));
                break;
            }
            if ((errno != ENOENT && errno != ENOTDIR) || strcmp(up, ".") == 0 ||
                strcmp(up, "/") == 0) {
                st = ck_fail(err, CK_ERR_IO, "%s%s%s: %s", w, sep, dir, strerror(errno));
                break;
            }
        }
        free(up);
        return st;
    }
    if (!S_ISDIR(sb.st_mode))
        return ck_fail(err, CK_ERR_IO, "%s%s%s: is %s, not a directory", w, sep, dir,
                       S_ISREG(sb.st_mode) ? "a file" : file_kind(sb.st_mode));
    DIR *d = opendir(dir);
    if (!d)
        return ck_fail(err, CK_ERR_IO, "%s%s%s: %s", w, sep, dir, strerror(errno));
    bool empty = true;
    struct dirent *de;
    while (empty && (de = readdir(d)) != NULL)
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    if (!empty)
        return ck_fail(err, CK_ERR_IO,
                       "%s%s%s: directory is not empty; remove it or choose another (a dump "
                       "never mixes with old files)", w, sep, dir);
    return CK_OK;
}

ck_status ck_map_file(const char *path, void **p, size_t *len, ck_error *err)
{
    *p = NULL;
    *len = 0;
    int fd;
    size_t size;
    CK_TRY(ck_open_input(path, &fd, &size, err));
    if (size == 0) {
        close(fd);
        return CK_OK;
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return ck_fail(err, CK_ERR_IO, "%s: cannot map: %s", path, strerror(e));
    *p = m;
    *len = size;
    return CK_OK;
}

void ck_unmap_file(void *p, size_t len)
{
    if (p && len)
        munmap(p, len);
}

/* Temporary files being written, for ck_atomic_cleanup_on_signal: fixed buffers and
 * sig_atomic_t flags only, so a signal handler can read them at any moment. */
enum { CK_TMP_SLOTS = 8, CK_TMP_PATH_MAX = 4096 };
static char g_tmp_paths[CK_TMP_SLOTS][CK_TMP_PATH_MAX];
static volatile sig_atomic_t g_tmp_used[CK_TMP_SLOTS];

void (*ck_atomic_after_open_hook)(const char *tmp_path);

static int slot_take(const char *tmp)
{
    if (strlen(tmp) >= CK_TMP_PATH_MAX)
        return -1;
    for (int i = 0; i < CK_TMP_SLOTS; i++) {
        if (g_tmp_used[i])
            continue;
        memcpy(g_tmp_paths[i], tmp, strlen(tmp) + 1);
        g_tmp_used[i] = 1; /* set after the path is complete */
        return i;
    }
    return -1;
}

static void slot_release(ck_atomic_file *af)
{
    if (af->slot >= 0)
        g_tmp_used[af->slot] = 0;
    af->slot = -1;
}

int ck_temp_file_register(const char *path)
{
    return slot_take(path);
}

void ck_temp_file_release(int slot)
{
    if (slot >= 0 && slot < CK_TMP_SLOTS)
        g_tmp_used[slot] = 0;
}

/* The directory part of path and its last component (path "x" -> ".", "x"). */
static bool parent_and_base(const char *path, struct stat *dir_sb, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t n = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(n + 2);
    if (!dir)
        return false;
    if (!slash)
        strcpy(dir, ".");
    else if (n == 0)
        strcpy(dir, "/");
    else
        memcpy(dir, path, n), dir[n] = '\0';
    bool ok = stat(dir, dir_sb) == 0;
    free(dir);
    return ok;
}

bool ck_same_output_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *ba, *bb;
    if (!parent_and_base(a, &sa, &ba) || !parent_and_base(b, &sb, &bb))
        return strcmp(a, b) == 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && strcmp(ba, bb) == 0;
}

void ck_atomic_cleanup_on_signal(void)
{
    for (int i = 0; i < CK_TMP_SLOTS; i++)
        if (g_tmp_used[i])
            unlink(g_tmp_paths[i]);
}

ck_status ck_atomic_open(ck_atomic_file *af, const char *path, ck_error *err)
{
    memset(af, 0, sizeof *af);
    af->path = path;
    af->slot = -1;
    CK_TRY(ck_output_file_check(path, NULL, err));
    size_t n = strlen(path) + 32;
    af->tmp = malloc(n);
    if (!af->tmp)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    /* Same directory as path, so the rename cannot cross file systems. */
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->slot = slot_take(af->tmp);
    (void)unlink(af->tmp); /* a stale one of an earlier process with this pid */
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        ck_status st = ck_fail(err, CK_ERR_IO, "%s: cannot create temporary file %s: %s", path,
                               af->tmp, strerror(errno));
        slot_release(af);
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
        slot_release(af);
        free(af->tmp);
        af->tmp = NULL;
        return st;
    }
    af->f = f;
    if (ck_atomic_after_open_hook)
        ck_atomic_after_open_hook(af->tmp);
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
    slot_release(af);
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
    slot_release(af);
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
    int fd;
    size_t size;
    CK_TRY(ck_open_input(path, &fd, &size, err));
    ck_status st = CK_OK;
    char *buf = NULL;
    size_t used = 0;
    if (size > max_bytes) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: file is larger than %zu bytes", path, max_bytes);
        goto cleanup;
    }
    /* the size fstat reported, plus one byte to notice a file that grew meanwhile */
    if (!(buf = malloc(size + 2))) {
        st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
        goto cleanup;
    }
    while (used < size + 1) {
        ssize_t got = read(fd, buf + used, size + 1 - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            st = ck_fail(err, CK_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
            goto cleanup;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    if (used > size) {
        st = ck_fail(err, CK_ERR_IO, "%s: the file changed while it was read", path);
        goto cleanup;
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    buf = NULL;
cleanup:
    close(fd);
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
