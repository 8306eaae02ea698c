/*
 * Loading tensor files by extension, or every tensor file of a directory (tensorload.h).
 */
#include "harness/io/tensorload.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/io/npy.h"
#include "harness/io/npz.h"
#include "harness/io/safetensors.h"


static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_tensor_file(const char *name)
{
    return ends_with(name, ".safetensors") || ends_with(name, ".npy") || ends_with(name, ".npz");
}

static ck_status load_file(const char *path, ck_tensorset *out, ck_error *err)
{
    if (ends_with(path, ".safetensors"))
        return ck_safetensors_load(path, out, err);
    if (ends_with(path, ".npy"))
        return ck_npy_load(path, out, err);
    if (ends_with(path, ".npz"))
        return ck_npz_load(path, out, err);
    return ck_fail(err, CK_ERR_INPUT,
                   "%s: not a tensor file (expected .safetensors, .npy, .npz or a directory)",
                   path);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ck_status load_dir(const char *dir, ck_tensorset *out, ck_error *err)
{
    ck_status st = CK_OK;
    char **names = NULL;
    int n = 0, cap = 0;
    DIR *d = opendir(dir);
    if (!d)
        return ck_fail(err, CK_ERR_IO, "%s: %s", dir, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || !is_tensor_file(de->d_name))
            continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 16;
            char **nn = realloc(names, (size_t)nc * sizeof *nn);
            if (!nn) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", dir);
                goto cleanup;
            }
            names = nn;
            cap = nc;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", dir);
            goto cleanup;
        }
        snprintf(names[n], len, "%s%s%s", dir, ends_with(dir, "/") ? "" : "/", de->d_name);
        n++;
    }
    if (n == 0) {
        st = ck_fail(err, CK_ERR_INPUT,
                     "%s: no *.safetensors, *.npy or *.npz files in this directory", dir);
        goto cleanup;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n && st == CK_OK; i++) {
        ck_tensorset one;
        if ((st = load_file(names[i], &one, err)) != CK_OK)
            break;
        st = ck_tensorset_merge(out, &one, err);
        ck_tensorset_free(&one);
    }
cleanup:
    closedir(d);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

ck_status ck_tensorset_load(const char *path, ck_tensorset *out, ck_error *err)
{
    ck_tensorset_init(out);
    struct stat sb;
    if (stat(path, &sb) != 0)
        return ck_fail(err, CK_ERR_IO, "%s: %s", path, strerror(errno));
    ck_status st = S_ISDIR(sb.st_mode) ? load_dir(path, out, err) : load_file(path, out, err);
    if (st != CK_OK)
        ck_tensorset_free(out);
    return ck_error_one_line(err, st);
}
