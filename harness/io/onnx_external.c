/*
 * ONNX external data (onnx.h): tensors whose bytes live in another file beside the model
 * (torch 2.x's exporter writes MODEL.onnx.data; any model over 2 GB must). The reader
 * records each such tensor's location and offset; this file attaches the bytes.
 *
 * A location is trusted no further than the model's own folder: it must be relative, hold
 * no `..` or empty component and no backslash, and the file it names, with every symbolic
 * link resolved, must lie inside the folder the model file lies in (also resolved). The
 * file is opened as every input is (regular files only), and each tensor's offset + size
 * must lie inside it (checked without overflow).
 */
#include "harness/io/onnx.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"

#define MAX_LOCATION_BYTES 1024

bool ck_onnx_location_ok(const char *loc, const char **why)
{
    size_t n = strlen(loc);
    *why = NULL;
    if (n == 0)
        *why = "is empty";
    else if (n > MAX_LOCATION_BYTES)
        *why = "is longer than 1024 bytes";
    else if (loc[0] == '/')
        *why = "is an absolute path (only files inside the model's folder are read)";
    else if (strchr(loc, '\\'))
        *why = "holds a backslash";
    else if (loc[n - 1] == '/')
        *why = "names a folder";
    if (*why)
        return false;
    for (const char *p = loc; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0) {
            *why = "holds an empty path component";
            return false;
        }
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            *why = "leaves the model's folder (`..`)";
            return false;
        }
        p += len + (slash ? 1 : 0);
    }
    return true;
}

/* Every tensor of the model that may carry external data: initializers and the tensors of
 * node attributes (a Constant's value): the first that pick accepts, or NULL. */
static const ck_onnx_tensor *find_tensor(const ck_onnx_model *m,
                                         bool (*pick)(const ck_onnx_tensor *, const void *),
                                         const void *user)
{
    for (int i = 0; i < m->n_inits; i++)
        if (pick(&m->inits[i], user))
            return &m->inits[i];
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < m->nodes[i].n_attr; k++)
            if (m->nodes[i].attr[k].t && pick(m->nodes[i].attr[k].t, user))
                return m->nodes[i].attr[k].t;
    return NULL;
}

static bool is_pending(const ck_onnx_tensor *t, const void *user)
{
    (void)user;
    return t->ext_location && !t->data && t->nbytes;
}

const ck_onnx_tensor *ck_onnx_external_pending(const ck_onnx_model *m)
{
    return find_tensor(m, is_pending, NULL);
}

static bool pending_at(const ck_onnx_tensor *t, const void *location)
{
    return is_pending(t, NULL) && strcmp(t->ext_location, location) == 0;
}

ck_status ck_onnx_attach_external(ck_onnx_model *m, const char *location, const void *buf,
                                  size_t len, const char *data_path, ck_error *err)
{
    ck_onnx_tensor *t;
    while ((t = (ck_onnx_tensor *)find_tensor(m, pending_at, location)) != NULL) {
        if (t->ext_offset > (uint64_t)len || (uint64_t)t->nbytes > (uint64_t)len - t->ext_offset)
            return ck_error_one_line(
                err, ck_fail(err, CK_ERR_INPUT, "%s: onnx: tensor `%s`: external data at offset "
                             "%llu + %zu bytes runs past the end of the file (%zu bytes)",
                             data_path, t->name, (unsigned long long)t->ext_offset, t->nbytes,
                             len));
        if (!(t->data = malloc(t->nbytes)))
            return ck_fail(err, CK_ERR_NOMEM, "%s: onnx: out of memory", data_path);
        memcpy(t->data, (const char *)buf + t->ext_offset, t->nbytes);
    }
    return CK_OK;
}

/* dir/location resolved, and checked to lie inside dir (resolved too). */
static ck_status resolve_inside(const char *model_path, const ck_onnx_tensor *t, char *out,
                                size_t out_n, ck_error *err)
{
    char dir[PATH_MAX], joined[PATH_MAX + MAX_LOCATION_BYTES + 2], real_dir[PATH_MAX];
    const char *slash = strrchr(model_path, '/');
    if (slash)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - model_path + 1 > PATH_MAX - 1
                                                    ? PATH_MAX - 1
                                                    : slash - model_path + 1), model_path);
    else
        snprintf(dir, sizeof dir, "./");
    snprintf(joined, sizeof joined, "%s%s", dir, t->ext_location);
    if (!realpath(dir, real_dir))
        return ck_error_one_line(err, ck_fail(err, CK_ERR_IO, "%s: cannot resolve the model's "
                                              "folder: %s", model_path, strerror(errno)));
    if (!realpath(joined, out) || strlen(out) >= out_n)
        return ck_error_one_line(
            err, ck_fail(err, CK_ERR_INPUT, "%s: onnx: tensor `%s`: external data file `%s`: %s",
                         model_path, t->name, joined, strerror(errno)));
    size_t dn = strlen(real_dir);
    bool root = dn == 1 && real_dir[0] == '/';
    if (strncmp(out, real_dir, dn) != 0 || (!root && out[dn] != '/'))
        return ck_error_one_line(
            err, ck_fail(err, CK_ERR_INPUT, "%s: onnx: tensor `%s`: external data file `%s` "
                         "resolves to %s, outside the model's folder", model_path, t->name,
                         t->ext_location, out));
    return CK_OK;
}

ck_status ck_onnx_load_external(ck_onnx_model *m, const char *model_path, ck_error *err)
{
    const ck_onnx_tensor *t;
    while ((t = ck_onnx_external_pending(m)) != NULL) {
        char real[PATH_MAX];
        CK_TRY(resolve_inside(model_path, t, real, sizeof real, err));
        void *p = NULL;
        size_t len = 0;
        CK_TRY(ck_map_file(real, &p, &len, err));
        ck_status st = ck_onnx_attach_external(m, t->ext_location, p, len, real, err);
        ck_unmap_file(p, len);
        CK_TRY(st);
    }
    return CK_OK;
}
