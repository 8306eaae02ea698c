/* Tensor dumps and their manifest (see dump.h). */
#include "harness/engine/dump.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "harness/io/safetensors.h"

ck_status ck_dump_tensors(const char *path, int n, const ck_named_tensor *t, ck_error *err)
{
    return ck_safetensors_write(path, n, t, err);
}

ck_status ck_manifest_init(ck_manifest *m, const char *case_name, ck_error *err)
{
    char num[32];
    memset(m, 0, sizeof *m);
    cJSON *root = cJSON_CreateObject();
    snprintf(num, sizeof num, "%d", CK_MANIFEST_SCHEMA_VERSION);
    cJSON *files = NULL;
    if (!root || !cJSON_AddStringToObject(root, "schema", CK_MANIFEST_SCHEMA) ||
        !cJSON_AddRawToObject(root, "schema_version", num) ||
        !(case_name ? cJSON_AddStringToObject(root, "case", case_name)
                    : cJSON_AddNullToObject(root, "case")) ||
        !(files = cJSON_AddArrayToObject(root, "files"))) {
        cJSON_Delete(root);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory building the dump manifest");
    }
    m->root = root;
    m->files = files;
    return CK_OK;
}

ck_status ck_manifest_add(ck_manifest *m, const char *file, const char *run, int step,
                          const char *kind, int n, const ck_named_tensor *t, ck_error *err)
{
    char num[32];
    cJSON *e = cJSON_CreateObject(), *list = NULL;
    bool ok = e && m->files;
    ok = ok && cJSON_AddStringToObject(e, "file", file);
    ok = ok && cJSON_AddStringToObject(e, "run", run);
    snprintf(num, sizeof num, "%d", step);
    ok =
        ok && (step >= 0 ? cJSON_AddRawToObject(e, "step", num) : cJSON_AddNullToObject(e, "step"));
    ok = ok && cJSON_AddStringToObject(e, "kind", kind);
    ok = ok && (list = cJSON_AddArrayToObject(e, "tensors"));
    for (int i = 0; ok && i < n; i++) {
        cJSON *te = cJSON_CreateObject(), *shape = NULL;
        ok = te && cJSON_AddItemToArray(list, te);
        if (!ok) {
            cJSON_Delete(te);
            break;
        }
        ok = cJSON_AddStringToObject(te, "name", t[i].name) &&
             cJSON_AddStringToObject(te, "dtype", ck_file_dtype_name(t[i].dtype)) &&
             (shape = cJSON_AddArrayToObject(te, "shape"));
        for (int d = 0; ok && d < t[i].shape.ndim && d < CK_MAX_DIMS; d++) {
            snprintf(num, sizeof num, "%" PRId64, t[i].shape.dim[d]);
            cJSON *v = cJSON_CreateRaw(num);
            ok = v && cJSON_AddItemToArray(shape, v);
            if (!ok)
                cJSON_Delete(v);
        }
    }
    if (ok && cJSON_AddItemToArray(m->files, e))
        return CK_OK;
    cJSON_Delete(e);
    return ck_fail(err, CK_ERR_NOMEM, "out of memory building the dump manifest");
}

ck_status ck_manifest_write(const ck_manifest *m, const char *path, ck_error *err)
{
    char *text = m->root ? cJSON_Print(m->root) : NULL;
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
    ck_atomic_file af;
    ck_status st = ck_atomic_open(&af, path, err);
    if (st == CK_OK) {
        ck_atomic_write(&af, text, strlen(text));
        ck_atomic_write(&af, "\n", 1);
        st = ck_atomic_commit(&af, err);
    }
    cJSON_free(text);
    return st;
}

void ck_manifest_free(ck_manifest *m)
{
    cJSON_Delete(m->root);
    m->root = m->files = NULL;
}
