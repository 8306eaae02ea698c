/*
 * Reading the judge input (framework_dump.h): DIR/judge.json, checked key by key, and the
 * per-run, per-step safetensors files as run records.
 */
#include "harness/verify/framework_dump.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"
#include "harness/io/files.h"
#include "harness/io/json_get.h"
#include "harness/io/json_strict.h"
#include "harness/io/safetensors.h"

#define JUDGE_JSON_MAX (64u << 20)
#define MAX_STEPS 100000
#define MAX_RANKS 64

static const char *const role_names[] = {"plain", "control", "checkpointed", "calibration"};
static const char *const kind_files[] = {"outputs", "output_grads", "recomputed"};

const char *ck_fw_role_name(ck_fw_role r)
{
    return (unsigned)r < 4 ? role_names[r] : "?";
}

/* ---- judge.json --------------------------------------------------------------------- */

/* A required string member (non-empty); *out is a copy. */
static ck_status get_string(const ck_jctx *cx, const cJSON *obj, const char *jpath,
                            const char *key, bool nullable, char **out)
{
    char p[CK_JPATH_MAX];
    ck_jpath_key(p, sizeof p, jpath, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v)
        return ck_jfail(cx, p, "missing");
    if (nullable && cJSON_IsNull(v))
        return CK_OK;
    const char *s;
    CK_TRY(ck_jget_string(cx, v, p, &s));
    if (!s[0])
        return ck_jfail(cx, p, "must not be empty");
    *out = strdup(s);
    return *out ? CK_OK : ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
}

static ck_status get_dtype(const ck_jctx *cx, const cJSON *v, const char *jpath, ck_dtype *out)
{
    static const char *const names[] = {"fp32", "fp16", "bf16"};
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    int k;
    CK_TRY(ck_jget_choice(cx, v, jpath, names, 3, &k));
    *out = dts[k];
    return CK_OK;
}

/* A list of strings into *names (n entries). */
static ck_status get_names(const ck_jctx *cx, const cJSON *v, const char *jpath, char ***names,
                           int *n)
{
    *names = NULL;
    *n = 0;
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, jpath, "must be a list of names, got %s", ck_json_type_name(v));
    int count = cJSON_GetArraySize(v);
    *names = calloc((size_t)count + 1, sizeof **names);
    if (!*names)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char p[CK_JPATH_MAX];
        const char *s;
        ck_jpath_index(p, sizeof p, jpath, i);
        CK_TRY(ck_jget_string(cx, e, p, &s));
        if (!((*names)[i] = strdup(s)))
            return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
        *n = i + 1;
    }
    return CK_OK;
}

/* {name: dtype} of module_dtypes.forward / .recompute */
static ck_status get_dtype_map(const ck_jctx *cx, const cJSON *v, const char *jpath,
                               char ***names, ck_dtype **dts, int *n)
{
    *n = 0;
    if (!v)
        return CK_OK;
    CK_TRY(ck_jget_object(cx, v, jpath));
    int count = cJSON_GetArraySize(v);
    *names = calloc((size_t)count + 1, sizeof **names);
    *dts = calloc((size_t)count + 1, sizeof **dts);
    if (!*names || !*dts)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    for (const cJSON *e = v->child; e; e = e->next) {
        char p[CK_JPATH_MAX];
        ck_jpath_key(p, sizeof p, jpath, e->string);
        CK_TRY(get_dtype(cx, e, p, &(*dts)[*n]));
        if (!((*names)[*n] = strdup(e->string)))
            return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
        (*n)++;
    }
    return CK_OK;
}

static ck_status get_bytes(const ck_jctx *cx, const cJSON *o, const char *jpath, const char *key,
                           int64_t *out)
{
    char p[CK_JPATH_MAX];
    ck_jpath_key(p, sizeof p, jpath, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = -1;
    if (!v || cJSON_IsNull(v))
        return CK_OK;
    return ck_jget_int(cx, v, p, 0, INT64_MAX / 4, out);
}

static ck_status parse_step(const ck_jctx *cx, const cJSON *o, const char *jpath, int index,
                            ck_fw_step *s)
{
    static const char *const keys[] = {"step", "loss", "saved_bytes_peak", "device_peak_bytes",
                                       "recomputed_calls", "grads_none", "loss_scale",
                                       "skipped", "files", "created_in_backward"};
    CK_TRY(ck_jget_object(cx, o, jpath));
    CK_TRY(ck_jcheck_keys(cx, o, jpath, keys, 10, NULL));
    char p[CK_JPATH_MAX];
    int64_t step;
    ck_jpath_key(p, sizeof p, jpath, "step");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (!v)
        return ck_jfail(cx, p, "missing");
    CK_TRY(ck_jget_int(cx, v, p, 0, MAX_STEPS, &step));
    if (step != index)
        return ck_jfail(cx, p, "is %lld; steps must be listed in order from 0 (expected %d)",
                        (long long)step, index);
    ck_jpath_key(p, sizeof p, jpath, "loss");
    v = cJSON_GetObjectItemCaseSensitive(o, "loss");
    s->loss = 0.0;
    if (v && !cJSON_IsNull(v)) { /* null: the loss was not finite (its tensor holds it) */
        ck_real_range any = CK_RANGE_ANY_FINITE;
        CK_TRY(ck_jget_real(cx, v, p, &any, &s->loss));
    }
    CK_TRY(get_bytes(cx, o, jpath, "saved_bytes_peak", &s->saved_bytes_peak));
    CK_TRY(get_bytes(cx, o, jpath, "device_peak_bytes", &s->device_peak_bytes));
    CK_TRY(get_bytes(cx, o, jpath, "recomputed_calls", &s->recomputed_calls));
    if (s->recomputed_calls < 0)
        s->recomputed_calls = 0;
    ck_jpath_key(p, sizeof p, jpath, "grads_none");
    v = cJSON_GetObjectItemCaseSensitive(o, "grads_none");
    if (v)
        CK_TRY(get_names(cx, v, p, &s->grads_none, &s->n_grads_none));
    ck_jpath_key(p, sizeof p, jpath, "created_in_backward");
    v = cJSON_GetObjectItemCaseSensitive(o, "created_in_backward");
    if (v)
        CK_TRY(get_names(cx, v, p, &s->created_in_backward, &s->n_created_in_backward));
    s->loss_scale = 1.0;
    v = cJSON_GetObjectItemCaseSensitive(o, "loss_scale");
    ck_jpath_key(p, sizeof p, jpath, "loss_scale");
    ck_real_range pos = CK_RANGE_POSITIVE;
    if (v)
        CK_TRY(ck_jget_real(cx, v, p, &pos, &s->loss_scale));
    v = cJSON_GetObjectItemCaseSensitive(o, "skipped");
    ck_jpath_key(p, sizeof p, jpath, "skipped");
    if (v)
        CK_TRY(ck_jget_bool(cx, v, p, &s->skipped));
    v = cJSON_GetObjectItemCaseSensitive(o, "files");
    ck_jpath_key(p, sizeof p, jpath, "files");
    if (!v)
        return ck_jfail(cx, p, "missing");
    char **files;
    int nf;
    ck_status st = get_names(cx, v, p, &files, &nf);
    static const char *const known[] = {"loss", "grads", "params", "buffers", "outputs",
                                        "output_grads", "recomputed"};
    bool seen[7] = {false};
    for (int i = 0; st == CK_OK && i < nf; i++) {
        int k = ck_find_name(known, 7, files[i]);
        char q[CK_JPATH_MAX];
        ck_jpath_index(q, sizeof q, p, i);
        if (k < 0)
            st = ck_jfail(cx, q, "unknown file kind \"%s\" (known: loss, grads, params, buffers, "
                          "outputs, output_grads, recomputed)", files[i]);
        else if (seen[k])
            st = ck_jfail(cx, q, "\"%s\" listed twice", files[i]);
        else
            seen[k] = true;
        if (k >= 4)
            s->has[k - 4] = true;
    }
    for (int k = 0; st == CK_OK && k < 4; k++)
        if (!seen[k])
            st = ck_jfail(cx, p, "lacks \"%s\" (every step has loss, grads, params, buffers)",
                          known[k]);
    for (int i = 0; files && i < nf; i++)
        free(files[i]);
    free(files);
    return st;
}

/* "parts": [{"name", "forward_calls", "recomputed"}, ...] of a run (optional) */
static ck_status parse_parts(const ck_jctx *cx, const cJSON *v, const char *jpath, ck_fw_run *r)
{
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, jpath, "must be a list, got %s", ck_json_type_name(v));
    r->parts = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *r->parts);
    if (!r->parts)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    static const char *const keys[] = {"name", "forward_calls", "recomputed"};
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char p[CK_JPATH_MAX], q[CK_JPATH_MAX];
        ck_jpath_index(p, sizeof p, jpath, i);
        CK_TRY(ck_jget_object(cx, e, p));
        CK_TRY(ck_jcheck_keys(cx, e, p, keys, 3, NULL));
        ck_fw_part *pt = &r->parts[i];
        r->n_parts = i + 1;
        CK_TRY(get_string(cx, e, p, "name", false, &pt->name));
        for (int k = 1; k < 3; k++) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, keys[k]);
            ck_jpath_key(q, sizeof q, p, keys[k]);
            if (!n)
                return ck_jfail(cx, q, "missing");
            CK_TRY(ck_jget_int(cx, n, q, 0, INT64_MAX / 4,
                               k == 1 ? &pt->forward_calls : &pt->recomputed));
        }
    }
    return CK_OK;
}

static ck_status parse_run(const ck_jctx *cx, const cJSON *o, const char *jpath, ck_fw_run *r)
{
    static const char *const keys[] = {"id", "role", "dtype", "mode", "rank", "calibration",
                                       "dir", "steps", "module_dtypes", "reference", "parts"};
    CK_TRY(ck_jget_object(cx, o, jpath));
    CK_TRY(ck_jcheck_keys(cx, o, jpath, keys, 11, NULL));
    CK_TRY(get_string(cx, o, jpath, "id", false, &r->id));
    CK_TRY(get_string(cx, o, jpath, "dir", false, &r->dir));
    char p[CK_JPATH_MAX];
    if (strstr(r->dir, "..") || r->dir[0] == '/') {
        ck_jpath_key(p, sizeof p, jpath, "dir");
        return ck_jfail(cx, p, "must be a relative path inside the dump folder, got \"%s\"",
                        r->dir);
    }
    ck_jpath_key(p, sizeof p, jpath, "role");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "role");
    if (!v)
        return ck_jfail(cx, p, "missing");
    int role;
    CK_TRY(ck_jget_choice(cx, v, p, role_names, 4, &role));
    r->role = (ck_fw_role)role;
    ck_jpath_key(p, sizeof p, jpath, "dtype");
    v = cJSON_GetObjectItemCaseSensitive(o, "dtype");
    if (!v)
        return ck_jfail(cx, p, "missing");
    CK_TRY(get_dtype(cx, v, p, &r->dtype));
    CK_TRY(get_string(cx, o, jpath, "mode", true, &r->mode));
    if (r->role == CK_FW_CHECKPOINTED && !r->mode) {
        ck_jpath_key(p, sizeof p, jpath, "mode");
        return ck_jfail(cx, p, "a checkpointed run names its mode");
    }
    if (cJSON_GetObjectItemCaseSensitive(o, "reference"))
        CK_TRY(get_string(cx, o, jpath, "reference", true, &r->reference));
    if (r->reference && r->role != CK_FW_CHECKPOINTED) {
        ck_jpath_key(p, sizeof p, jpath, "reference");
        return ck_jfail(cx, p, "only a checkpointed run names a reference");
    }
    if (r->mode && r->role == CK_FW_CALIBRATION) {
        ck_jpath_key(p, sizeof p, jpath, "mode");
        return ck_jfail(cx, p, "a calibration run has no mode");
    }
    int64_t rank = 0, calib = -1;
    ck_jpath_key(p, sizeof p, jpath, "rank");
    v = cJSON_GetObjectItemCaseSensitive(o, "rank");
    if (v)
        CK_TRY(ck_jget_int(cx, v, p, 0, MAX_RANKS - 1, &rank));
    r->rank = (int)rank;
    ck_jpath_key(p, sizeof p, jpath, "calibration");
    v = cJSON_GetObjectItemCaseSensitive(o, "calibration");
    if (v && !cJSON_IsNull(v))
        CK_TRY(ck_jget_int(cx, v, p, 0, 2, &calib));
    if (r->role == CK_FW_CALIBRATION && calib < 0)
        return ck_jfail(cx, p, "a calibration run gives its index (0, 1 or 2)");
    if (r->role == CK_FW_CALIBRATION && r->dtype == CK_F32) {
        ck_jpath_key(p, sizeof p, jpath, "dtype");
        return ck_jfail(cx, p, "a calibration run is named by the low dtype it rounds to "
                               "(fp16 or bf16), got fp32");
    }
    r->calibration = (int)calib;
    ck_jpath_key(p, sizeof p, jpath, "steps");
    v = cJSON_GetObjectItemCaseSensitive(o, "steps");
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return ck_jfail(cx, p, "must be a non-empty list of steps");
    r->n_steps = cJSON_GetArraySize(v);
    if (r->n_steps > MAX_STEPS)
        return ck_jfail(cx, p, "more than %d steps", MAX_STEPS);
    r->steps = calloc((size_t)r->n_steps, sizeof *r->steps);
    if (!r->steps)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char q[CK_JPATH_MAX];
        ck_jpath_index(q, sizeof q, p, i);
        CK_TRY(parse_step(cx, e, q, i, &r->steps[i]));
    }
    ck_jpath_key(p, sizeof p, jpath, "module_dtypes");
    v = cJSON_GetObjectItemCaseSensitive(o, "module_dtypes");
    if (v && !cJSON_IsNull(v)) {
        static const char *const mk[] = {"forward", "recompute"};
        CK_TRY(ck_jget_object(cx, v, p));
        CK_TRY(ck_jcheck_keys(cx, v, p, mk, 2, NULL));
        char q[CK_JPATH_MAX];
        ck_jpath_key(q, sizeof q, p, "forward");
        CK_TRY(get_dtype_map(cx, cJSON_GetObjectItemCaseSensitive(v, "forward"), q,
                             &r->fwd_names, &r->fwd_dtypes, &r->n_fwd));
        ck_jpath_key(q, sizeof q, p, "recompute");
        CK_TRY(get_dtype_map(cx, cJSON_GetObjectItemCaseSensitive(v, "recompute"), q,
                             &r->rec_names, &r->rec_dtypes, &r->n_rec));
    }
    ck_jpath_key(p, sizeof p, jpath, "parts");
    v = cJSON_GetObjectItemCaseSensitive(o, "parts");
    if (v && !cJSON_IsNull(v))
        CK_TRY(parse_parts(cx, v, p, r));
    return CK_OK;
}

static ck_status parse_modules(const ck_jctx *cx, const cJSON *v, ck_fw_input *in)
{
    if (!cJSON_IsArray(v))
        return ck_jfail(cx, "modules", "must be a list, got %s", ck_json_type_name(v));
    in->n_modules = 0;
    in->modules = calloc((size_t)cJSON_GetArraySize(v) + 1, sizeof *in->modules);
    if (!in->modules)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    static const char *const keys[] = {"name", "type", "wrapped", "random"};
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char p[CK_JPATH_MAX], q[CK_JPATH_MAX];
        ck_jpath_index(p, sizeof p, "modules", i);
        CK_TRY(ck_jget_object(cx, e, p));
        CK_TRY(ck_jcheck_keys(cx, e, p, keys, 4, NULL));
        ck_fw_module *m = &in->modules[i];
        in->n_modules = i + 1;
        CK_TRY(get_string(cx, e, p, "name", false, &m->name));
        CK_TRY(get_string(cx, e, p, "type", false, &m->type));
        ck_jpath_key(q, sizeof q, p, "wrapped");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(e, "wrapped");
        if (!w)
            return ck_jfail(cx, q, "missing");
        CK_TRY(ck_jget_bool(cx, w, q, &m->wrapped));
        const cJSON *rnd = cJSON_GetObjectItemCaseSensitive(e, "random");
        ck_jpath_key(q, sizeof q, p, "random");
        if (rnd)
            CK_TRY(ck_jget_bool(cx, rnd, q, &m->random));
        for (int j = 0; j < i; j++)
            if (strcmp(in->modules[j].name, m->name) == 0)
                return ck_jfail(cx, p, "module \"%s\" listed twice", m->name);
    }
    return CK_OK;
}

static ck_status check_runs(const ck_jctx *cx, const ck_fw_input *in)
{
    for (int i = 0; i < in->n_runs; i++) {
        const ck_fw_run *r = &in->runs[i];
        char p[CK_JPATH_MAX];
        ck_jpath_index(p, sizeof p, "runs", i);
        for (int j = 0; j < i; j++)
            if (strcmp(in->runs[j].id, r->id) == 0 || strcmp(in->runs[j].dir, r->dir) == 0)
                return ck_jfail(cx, p, "run \"%s\" has the id or dir of runs[%d]", r->id, j);
        if (r->role == CK_FW_PLAIN) {
            for (int j = 0; j < i; j++)
                if (in->runs[j].role == CK_FW_PLAIN && in->runs[j].dtype == r->dtype &&
                    in->runs[j].rank == r->rank &&
                    ck_fw_find_run(in, CK_FW_PLAIN, r->dtype, r->mode, r->rank, 0) == j)
                    return ck_jfail(cx, p, "a second plain %s run for rank %d%s%s",
                                    ck_dtype_name(r->dtype), r->rank, r->mode ? ", variant " : "",
                                    r->mode ? r->mode : "");
            continue;
        }
        const char *variant = r->role == CK_FW_CHECKPOINTED ? r->reference
                              : r->role == CK_FW_CONTROL    ? r->mode
                                                            : NULL;
        int ref = ck_fw_find_run(in, CK_FW_PLAIN, r->role == CK_FW_CALIBRATION ? CK_F32 : r->dtype,
                                 variant, r->rank, 0);
        if (ref < 0)
            return ck_jfail(cx, p, "run \"%s\" (%s, %s, rank %d) has no plain %s run%s%s to be "
                                   "judged against",
                            r->id, ck_fw_role_name(r->role), ck_dtype_name(r->dtype), r->rank,
                            ck_dtype_name(r->role == CK_FW_CALIBRATION ? CK_F32 : r->dtype),
                            variant ? " of variant " : "", variant ? variant : "");
        if (in->runs[ref].n_steps != r->n_steps)
            return ck_jfail(cx, p, "run \"%s\" has %d steps, the plain run \"%s\" %d", r->id,
                            r->n_steps, in->runs[ref].id, in->runs[ref].n_steps);
    }
    if (ck_fw_find_run(in, CK_FW_PLAIN, CK_F32, NULL, 0, 0) < 0)
        return ck_jfail(cx, "runs", "no plain fp32 run of rank 0 (the reference)");
    return CK_OK;
}

static ck_status parse_top(const ck_jctx *cx, const cJSON *root, ck_fw_input *in)
{
    static const char *const keys[] = {"schema", "schema_version", "framework", "model",
                                       "config", "min_saving", "modules", "notes", "runs"};
    CK_TRY(ck_jget_object(cx, root, "(top level)"));
    CK_TRY(ck_jcheck_keys(cx, root, "", keys, 9, NULL));
    char *schema = NULL;
    CK_TRY(get_string(cx, root, "", "schema", false, &schema));
    bool ok = strcmp(schema, CK_JUDGE_INPUT_SCHEMA) == 0;
    free(schema);
    if (!ok)
        return ck_jfail(cx, "schema", "must be \"%s\"", CK_JUDGE_INPUT_SCHEMA);
    int64_t ver;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "schema_version");
    if (!v)
        return ck_jfail(cx, "schema_version", "missing");
    CK_TRY(ck_jget_int(cx, v, "schema_version", 1, 1000, &ver));
    if (ver != CK_JUDGE_INPUT_VERSION)
        return ck_jfail(cx, "schema_version", "is %lld; this program reads version %d",
                        (long long)ver, CK_JUDGE_INPUT_VERSION);
    const cJSON *fw = cJSON_GetObjectItemCaseSensitive(root, "framework");
    if (!fw)
        return ck_jfail(cx, "framework", "missing");
    CK_TRY(ck_jget_object(cx, fw, "framework"));
    CK_TRY(get_string(cx, fw, "framework", "name", false, &in->framework));
    CK_TRY(get_string(cx, fw, "framework", "version", false, &in->framework_version));
    CK_TRY(get_string(cx, fw, "framework", "device", false, &in->device));
    v = cJSON_GetObjectItemCaseSensitive(fw, "deterministic");
    in->deterministic = false;
    if (v)
        CK_TRY(ck_jget_bool(cx, v, "framework.deterministic", &in->deterministic));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model)
        return ck_jfail(cx, "model", "missing");
    CK_TRY(ck_jget_object(cx, model, "model"));
    CK_TRY(get_string(cx, model, "model", "name", false, &in->model_name));
    if (cJSON_GetObjectItemCaseSensitive(model, "source"))
        CK_TRY(get_string(cx, model, "model", "source", true, &in->source));
    v = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (v) {
        CK_TRY(ck_jget_object(cx, v, "config"));
        if (!(in->config = cJSON_Duplicate(v, true)))
            return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "min_saving");
    if (v && !cJSON_IsNull(v)) {
        ck_real_range unit = CK_RANGE_UNIT_HALF_OPEN;
        CK_TRY(ck_jget_real(cx, v, "min_saving", &unit, &in->min_saving));
        in->has_min_saving = true;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "modules");
    if (!v)
        return ck_jfail(cx, "modules", "missing");
    CK_TRY(parse_modules(cx, v, in));
    v = cJSON_GetObjectItemCaseSensitive(root, "notes");
    if (v)
        CK_TRY(get_names(cx, v, "notes", &in->notes, &in->n_notes));
    v = cJSON_GetObjectItemCaseSensitive(root, "runs");
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return ck_jfail(cx, "runs", "must be a non-empty list of runs");
    in->runs = calloc((size_t)cJSON_GetArraySize(v), sizeof *in->runs);
    if (!in->runs)
        return ck_fail(cx->err, CK_ERR_NOMEM, "out of memory");
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        char p[CK_JPATH_MAX];
        ck_jpath_index(p, sizeof p, "runs", i);
        in->n_runs = i + 1;
        in->runs[i].calibration = -1;
        CK_TRY(parse_run(cx, e, p, &in->runs[i]));
    }
    return check_runs(cx, in);
}

ck_status ck_fw_input_parse(const char *text, size_t len, const char *dir, ck_fw_input *in,
                            ck_error *err)
{
    memset(in, 0, sizeof *in);
    size_t n = strlen(dir) + sizeof "/judge.json";
    in->dir = strdup(dir);
    in->path = malloc(n);
    if (!in->dir || !in->path) {
        ck_fw_input_free(in);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    }
    snprintf(in->path, n, "%s/judge.json", dir);
    cJSON *root = NULL;
    ck_status st = ck_json_parse_strict(text, len, in->path, NULL, &root, err);
    if (st == CK_OK) {
        ck_jctx cx = {.path = in->path, .err = err};
        st = parse_top(&cx, root, in);
    }
    cJSON_Delete(root);
    if (st != CK_OK) {
        ck_error_one_line(err, st);
        ck_fw_input_free(in);
    }
    return st;
}

ck_status ck_fw_input_load(const char *dir, ck_fw_input *in, ck_error *err)
{
    memset(in, 0, sizeof *in);
    size_t n = strlen(dir) + sizeof "/judge.json";
    char *path = malloc(n);
    if (!path)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    snprintf(path, n, "%s/judge.json", dir);
    char *text = NULL;
    size_t len = 0;
    ck_status st = ck_read_file(path, JUDGE_JSON_MAX, &text, &len, err);
    free(path);
    if (st == CK_OK)
        st = ck_fw_input_parse(text, len, dir, in, err);
    free(text);
    return st;
}

static void free_names(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

void ck_fw_input_free(ck_fw_input *in)
{
    for (int i = 0; in->runs && i < in->n_runs; i++) {
        ck_fw_run *r = &in->runs[i];
        for (int s = 0; r->steps && s < r->n_steps; s++) {
            free_names(r->steps[s].grads_none, r->steps[s].n_grads_none);
            free_names(r->steps[s].created_in_backward, r->steps[s].n_created_in_backward);
        }
        for (int k = 0; r->parts && k < r->n_parts; k++)
            free(r->parts[k].name);
        free(r->parts);
        free(r->steps);
        free(r->id);
        free(r->mode);
        free(r->reference);
        free(r->dir);
        free_names(r->fwd_names, r->n_fwd);
        free_names(r->rec_names, r->n_rec);
        free(r->fwd_dtypes);
        free(r->rec_dtypes);
    }
    free(in->runs);
    for (int i = 0; in->modules && i < in->n_modules; i++) {
        free(in->modules[i].name);
        free(in->modules[i].type);
    }
    free(in->modules);
    free_names(in->notes, in->n_notes);
    cJSON_Delete(in->config);
    free(in->dir);
    free(in->path);
    free(in->framework);
    free(in->framework_version);
    free(in->device);
    free(in->model_name);
    free(in->source);
    memset(in, 0, sizeof *in);
}

const char *ck_fw_input_shown_path(const ck_fw_input *in)
{
    return in->source ? in->source : in->input_temporary ? NULL : in->path;
}

int ck_fw_find_run(const ck_fw_input *in, ck_fw_role role, ck_dtype dtype, const char *mode,
                   int rank, int calibration)
{
    for (int i = 0; i < in->n_runs; i++) {
        const ck_fw_run *r = &in->runs[i];
        if (r->role == role && r->dtype == dtype && r->rank == rank &&
            (mode ? r->mode && strcmp(r->mode, mode) == 0 : !r->mode) &&
            (role != CK_FW_CALIBRATION || r->calibration == calibration))
            return i;
    }
    return -1;
}

int ck_fw_module_of(const ck_fw_input *in, const char *t)
{
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < in->n_modules; i++) {
        size_t n = strlen(in->modules[i].name);
        if (n > best_len && strncmp(in->modules[i].name, t, n) == 0 &&
            (t[n] == '.' || t[n] == '/')) { /* torch "bn.running_mean", Keras "bn/moving_mean" */
            best = i;
            best_len = n;
        }
    }
    return best;
}

int ck_fw_module_index(const ck_fw_input *in, const char *record_name)
{
    const char *hash = strchr(record_name, '#');
    size_t n = hash ? (size_t)(hash - record_name) : strlen(record_name);
    for (int i = 0; i < in->n_modules; i++)
        if (strlen(in->modules[i].name) == n && strncmp(in->modules[i].name, record_name, n) == 0)
            return i;
    return -1;
}

/* ---- tensor files ------------------------------------------------------------------- */

static ck_status step_file(const ck_fw_input *in, const ck_fw_run *r, int step, const char *kind,
                           char *buf, size_t n, ck_error *err)
{
    int w = snprintf(buf, n, "%s/%s/step_%04d/%s.safetensors", in->dir, r->dir, step, kind);
    if (w < 0 || (size_t)w >= n)
        return ck_fail(err, CK_ERR_INPUT, "%s: run \"%s\": path too long", in->path, r->id);
    return CK_OK;
}

/* One tensor of a record file as a record entry: floats as fp32 (fp64 kept), ints as i64/i32. */
static ck_status add_entry(ck_record *rec, const ck_named_tensor *t, const char *file,
                           ck_tensor_kind kind, int step, ck_error *err)
{
    int64_t numel;
    size_t bytes;
    if (!ck_file_shape_size(&t->shape, t->dtype, &numel, &bytes))
        return ck_fail(err, CK_ERR_INPUT, "%s: %s: bad shape", file, t->name);
    switch (t->dtype) {
    case CK_FT_F32:
        return ck_record_add(rec, t->name, kind, step, CK_F32, &t->shape, t->data, NULL, NULL, err);
    case CK_FT_F64:
        return ck_record_add(rec, t->name, kind, step, CK_F64, &t->shape, t->data, NULL, NULL, err);
    case CK_FT_I64:
        return ck_record_add(rec, t->name, kind, step, CK_I64, &t->shape, t->data, NULL, NULL, err);
    case CK_FT_I32:
        return ck_record_add(rec, t->name, kind, step, CK_I32, &t->shape, t->data, NULL, NULL, err);
    case CK_FT_I16:
    case CK_FT_I8:
    case CK_FT_U16:
    case CK_FT_U8:
    case CK_FT_BOOL: { /* small integers and masks: widened to i32, compared exactly */
        int32_t *v = malloc((size_t)numel * sizeof *v + 1);
        if (!v)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory reading %s", file);
        const unsigned char *p = t->data;
        for (int64_t i = 0; i < numel; i++) {
            if (t->dtype == CK_FT_I16 || t->dtype == CK_FT_U16) {
                uint16_t h;
                memcpy(&h, p + 2 * i, 2);
                v[i] = t->dtype == CK_FT_I16 ? (int32_t)(int16_t)h : (int32_t)h;
            } else {
                v[i] = t->dtype == CK_FT_I8 ? (int32_t)(int8_t)p[i] : (int32_t)p[i];
            }
        }
        ck_status st = ck_record_add(rec, t->name, kind, step, CK_I32, &t->shape, v, NULL, NULL, err);
        free(v);
        return st;
    }
    case CK_FT_F16:
    case CK_FT_BF16: {
        float *f = malloc((size_t)numel * sizeof *f + 1);
        if (!f)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory reading %s", file);
        for (int64_t i = 0; i < numel; i++) {
            uint16_t h;
            memcpy(&h, (const char *)t->data + 2 * i, 2);
            f[i] = t->dtype == CK_FT_F16 ? ck_f16_to_f32(h) : ck_bf16_to_f32(h);
        }
        ck_status st = ck_record_add(rec, t->name, kind, step, CK_F32, &t->shape, f, NULL, NULL, err);
        free(f);
        return st;
    }
    default:
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: %s: dtype %s; the judge reads F64, F32, F16, BF16, I64, I32, I16, "
                       "I8, U16, U8 and BOOL tensors",
                       file, t->name, ck_file_dtype_st_name(t->dtype));
    }
}

static ck_status load_kind(const ck_fw_input *in, const ck_fw_run *r, int step, const char *kind,
                           ck_tensor_kind tk, ck_record *rec, ck_error *err)
{
    char path[4096];
    CK_TRY(step_file(in, r, step, kind, path, sizeof path, err));
    ck_tensorset set;
    ck_tensorset_init(&set);
    ck_status st = ck_tensorset_load_mapped(path, ck_safetensors_parse, &set, err);
    if (st == CK_OK && tk == CK_KIND_LOSS &&
        (set.n != 1 || strcmp(set.t[0].name, "loss") != 0 || set.t[0].shape.ndim != 0))
        st = ck_fail(err, CK_ERR_INPUT, "%s: must hold one scalar tensor named \"loss\"", path);
    for (int i = 0; st == CK_OK && i < set.n; i++)
        st = add_entry(rec, &set.t[i], path, tk, step, err);
    ck_tensorset_free(&set);
    return st;
}

ck_status ck_fw_load_record(const ck_fw_input *in, const ck_fw_run *r, ck_record *rec,
                            ck_error *err)
{
    memset(rec, 0, sizeof *rec);
    rec->steps = r->n_steps;
    rec->losses = calloc((size_t)r->n_steps, sizeof *rec->losses);
    rec->scales = calloc((size_t)r->n_steps, sizeof *rec->scales);
    rec->first_other_dtype_layer = -1;
    rec->act_nonfinite.first.layer = -1; /* a framework's dumps carry no activation scan */
    if (!rec->losses || !rec->scales)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_status st = CK_OK;
    for (int s = 0; s < r->n_steps && st == CK_OK; s++) {
        const ck_fw_step *fs = &r->steps[s];
        int first = rec->n;
        if ((st = load_kind(in, r, s, "loss", CK_KIND_LOSS, rec, err)) == CK_OK &&
            (st = load_kind(in, r, s, "buffers", CK_KIND_BUFFER, rec, err)) == CK_OK &&
            (st = load_kind(in, r, s, "grads", CK_KIND_GRAD, rec, err)) == CK_OK)
            st = load_kind(in, r, s, "params", CK_KIND_PARAM, rec, err);
        if (st == CK_OK) {
            const ck_record_entry *le = &rec->e[first];
            rec->losses[s] = le->dtype == CK_F64 ? *(const double *)le->data
                                                 : (double)*(const float *)le->data;
        }
        rec->scales[s].scale = fs->loss_scale;
        rec->scales[s].skipped = fs->skipped;
        if (fs->saved_bytes_peak > rec->peak_activation_bytes)
            rec->peak_activation_bytes = fs->saved_bytes_peak;
        rec->recomputed_layers += fs->recomputed_calls;
    }
    return st;
}

ck_status ck_fw_load_modules(const ck_fw_input *in, const ck_fw_run *r, int step,
                             ck_fw_module_kind k, ck_tensorset *out, ck_error *err)
{
    ck_tensorset_init(out);
    if (step < 0 || step >= r->n_steps || !r->steps[step].has[k])
        return CK_OK;
    char path[4096];
    CK_TRY(step_file(in, r, step, kind_files[k], path, sizeof path, err));
    return ck_tensorset_load_mapped(path, ck_safetensors_parse, out, err);
}
