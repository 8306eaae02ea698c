/* Tolerance resolution and the tolerance file (see tolerances.h). */
#include "harness/compare/tolerances.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "harness/io/json_strict.h"

void ck_tolerances_init(ck_tolerances *t)
{
    memset(t, 0, sizeof *t);
}

void ck_tolerances_free(ck_tolerances *t)
{
    for (int i = 0; i < t->n_rules; i++)
        free(t->rules[i].pattern);
    free(t->rules);
    t->rules = NULL;
    t->n_rules = 0;
}

void ck_tolerances_builtin(ck_file_dtype dt, double *rtol, double *atol)
{
    switch (dt) {
    case CK_FT_F64: *rtol = 1e-7, *atol = 1e-7; break;
    case CK_FT_F32: *rtol = 1.3e-6, *atol = 1e-5; break;
    case CK_FT_F16: *rtol = 1e-3, *atol = 1e-5; break;
    case CK_FT_BF16: *rtol = 1.6e-2, *atol = 1e-5; break;
    default: *rtol = 0.0, *atol = 0.0; break;
    }
}

void ck_tolerances_resolve(const ck_tolerances *t, const char *name, ck_file_dtype dt,
                           double *rtol, double *atol)
{
    bool have_r = false, have_a = false;
    ck_tolerances_builtin(dt, rtol, atol);
    if (!ck_file_dtype_is_float(dt)) {
        /* exact, unless a "tensors" row names this tensor (an excuse by name) */
        for (int i = 0; i < t->n_rules; i++) {
            if (fnmatch(t->rules[i].pattern, name, 0) == 0) {
                if (t->rules[i].tol.has_rtol)
                    *rtol = t->rules[i].tol.rtol;
                if (t->rules[i].tol.has_atol)
                    *atol = t->rules[i].tol.atol;
                break;
            }
        }
        return;
    }
    const ck_tol_spec *chain[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    for (int i = 0; i < t->n_rules && !chain[0]; i++)
        if (fnmatch(t->rules[i].pattern, name, 0) == 0)
            chain[0] = &t->rules[i].tol;
    n = 1;
    if ((unsigned)dt < CK_FT_COUNT)
        chain[n++] = &t->dtypes[dt];
    chain[n++] = &t->cli;
    chain[n++] = &t->file_default;
    for (int i = 0; i < n; i++) {
        const ck_tol_spec *s = chain[i];
        if (!s)
            continue;
        if (!have_r && s->has_rtol) {
            *rtol = s->rtol;
            have_r = true;
        }
        if (!have_a && s->has_atol) {
            *atol = s->atol;
            have_a = true;
        }
    }
}

static ck_status parse_spec(const cJSON *o, const char *path, const char *where, ck_tol_spec *s,
                            ck_error *err)
{
    if (!cJSON_IsObject(o))
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: %s: must be an object like {\"rtol\": 1e-5, \"atol\": 1e-8}", path,
                       where);
    for (const cJSON *c = o->child; c; c = c->next) {
        bool r = strcmp(c->string, "rtol") == 0, a = strcmp(c->string, "atol") == 0;
        if (!r && !a)
            return ck_fail(err, CK_ERR_INPUT, "%s: %s.%.100s: unknown key (expected rtol, atol)",
                           path, where, c->string);
        if (!cJSON_IsNumber(c) || !(c->valuedouble >= 0.0) || !isfinite(c->valuedouble))
            return ck_fail(err, CK_ERR_INPUT, "%s: %s.%s: must be a number >= 0", path, where,
                           c->string);
        if (r)
            s->has_rtol = true, s->rtol = c->valuedouble;
        else
            s->has_atol = true, s->atol = c->valuedouble;
    }
    return CK_OK;
}

static ck_status tolerances_parse_impl(ck_tolerances *t, const char *text, size_t len,
                                       const char *path, ck_error *err)
{
    cJSON *root = NULL;
    char where[160];
    ck_status st = ck_json_parse_strict(text, len, path, NULL, &root, err);
    if (st != CK_OK)
        return st;
    if (!cJSON_IsObject(root)) {
        st = ck_fail(err, CK_ERR_INPUT, "%s: must be a JSON object with default, dtypes, tensors",
                     path);
        goto done;
    }
    for (const cJSON *c = root->child; c && st == CK_OK; c = c->next) {
        if (strcmp(c->string, "default") == 0) {
            st = parse_spec(c, path, "default", &t->file_default, err);
        } else if (strcmp(c->string, "dtypes") == 0) {
            if (!cJSON_IsObject(c)) {
                st = ck_fail(err, CK_ERR_INPUT, "%s: dtypes: must be an object", path);
                break;
            }
            for (const cJSON *d = c->child; d && st == CK_OK; d = d->next) {
                ck_file_dtype dt;
                snprintf(where, sizeof where, "dtypes.%.100s", d->string);
                if (!ck_file_dtype_parse(d->string, &dt))
                    st = ck_fail(err, CK_ERR_INPUT, "%s: %s: unknown dtype", path, where);
                else
                    st = parse_spec(d, path, where, &t->dtypes[dt], err);
            }
        } else if (strcmp(c->string, "tensors") == 0) {
            if (!cJSON_IsObject(c)) {
                st = ck_fail(err, CK_ERR_INPUT, "%s: tensors: must be an object", path);
                break;
            }
            int n = cJSON_GetArraySize(c);
            ck_tol_rule *rules =
                realloc(t->rules, ((size_t)t->n_rules + (size_t)n + 1) * sizeof *rules);
            if (!rules) {
                st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                break;
            }
            t->rules = rules;
            for (const cJSON *d = c->child; d && st == CK_OK; d = d->next) {
                ck_tol_rule *r = &t->rules[t->n_rules];
                memset(r, 0, sizeof *r);
                snprintf(where, sizeof where, "tensors.%.100s", d->string);
                if ((st = parse_spec(d, path, where, &r->tol, err)) != CK_OK)
                    break;
                if (!(r->pattern = strdup(d->string))) {
                    st = ck_fail(err, CK_ERR_NOMEM, "%s: out of memory", path);
                    break;
                }
                t->n_rules++;
            }
        } else {
            st = ck_fail(err, CK_ERR_INPUT,
                         "%s: %.100s: unknown key (expected default, dtypes, tensors)", path,
                         c->string);
        }
    }
done:
    cJSON_Delete(root);
    return st;
}

/* The one-line guarantee for every message of tolerances_parse. */
ck_status ck_tolerances_parse(ck_tolerances *t, const char *text, size_t len, const char *path,
                              ck_error *err)
{
    return ck_error_one_line(err, tolerances_parse_impl(t, text, len, path, err));
}

static ck_status parse_into(void *obj, const char *text, size_t len, const char *path,
                            ck_error *err)
{
    return ck_tolerances_parse(obj, text, len, path, err);
}

ck_status ck_tolerances_load(ck_tolerances *t, const char *path, ck_error *err)
{
    return ck_parse_file(path, parse_into, t, err);
}
