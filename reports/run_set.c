/* The items of a whole command and summary.json (run_set.h). */
#include "reports/run_set.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "harness/io/json_build.h"

static const char *const status_names[] = {"pass", "fail", "error", "skipped"};

const char *ck_item_status_name(ck_item_status st)
{
    return (unsigned)st < 4 ? status_names[st] : "?";
}

bool ck_item_status_parse(const char *name, ck_item_status *out)
{
    for (int i = 0; i < 4 && name; i++)
        if (strcmp(name, status_names[i]) == 0) {
            *out = (ck_item_status)i;
            return true;
        }
    return false;
}

static char *dup_or_null(const char *s, bool *failed)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *failed = true;
    return d;
}

static void item_free(ck_run_item *it)
{
    free(it->case_name);
    free(it->case_file);
    free(it->dtype);
    free(it->backend);
    free(it->message);
    free(it->report_file);
    cJSON_Delete(it->report);
    memset(it, 0, sizeof *it);
}

ck_run_item *ck_run_set_add(ck_run_set *s, const ck_run_item *it, ck_error *err)
{
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        ck_run_item *ni = realloc(s->items, (size_t)cap * sizeof *ni);
        if (!ni) {
            cJSON_Delete(it->report);
            ck_fail(err, CK_ERR_NOMEM, "out of memory collecting results");
            return NULL;
        }
        s->items = ni;
        s->cap = cap;
    }
    bool failed = false;
    ck_run_item *d = &s->items[s->n];
    *d = (ck_run_item){.index = it->index, .status = it->status, .report = it->report,
                       .time_s = it->time_s};
    d->case_name = dup_or_null(it->case_name ? it->case_name : "?", &failed);
    d->case_file = dup_or_null(it->case_file, &failed);
    d->dtype = dup_or_null(it->dtype ? it->dtype : "-", &failed);
    d->backend = dup_or_null(it->backend ? it->backend : "-", &failed);
    d->message = dup_or_null(it->message, &failed);
    d->report_file = dup_or_null(it->report_file, &failed);
    if (failed) {
        item_free(d);
        ck_fail(err, CK_ERR_NOMEM, "out of memory collecting results");
        return NULL;
    }
    s->n++;
    return d;
}

void ck_run_set_free(ck_run_set *s)
{
    for (int i = 0; i < s->n; i++)
        item_free(&s->items[i]);
    free(s->items);
    free(s->command);
    memset(s, 0, sizeof *s);
}

static int cmp_item_index(const void *a, const void *b)
{
    const ck_run_item *x = a, *y = b;
    return (x->index > y->index) - (x->index < y->index);
}

ck_status ck_run_set_sort(ck_run_set *s, ck_error *err)
{
    /* n log n (a merge of many shards may hold many items); two items with one index are
     * refused below, so stability does not matter */
    qsort(s->items, (size_t)s->n, sizeof *s->items, cmp_item_index);
    for (int i = 1; i < s->n; i++)
        if (s->items[i].index == s->items[i - 1].index)
            return ck_fail(err, CK_ERR_INPUT,
                           "item %d (%s %s) appears twice: were the same shard's results given "
                           "twice?", s->items[i].index, s->items[i].case_name, s->items[i].dtype);
    return CK_OK;
}

void ck_run_set_counts(const ck_run_set *s, int counts[4])
{
    counts[0] = counts[1] = counts[2] = counts[3] = 0;
    for (int i = 0; i < s->n; i++)
        if ((unsigned)s->items[i].status < 4)
            counts[s->items[i].status]++;
}

int ck_run_set_exit_code(const ck_run_set *s)
{
    int c[4];
    ck_run_set_counts(s, c);
    return c[CK_ITEM_ERROR] ? 2 : c[CK_ITEM_FAIL] ? 1 : 0;
}

void ck_run_set_totals_line(const ck_run_set *s, char *buf, size_t n)
{
    int c[4];
    ck_run_set_counts(s, c);
    snprintf(buf, n, "%d passed, %d failed, %d errors, %d skipped", c[0], c[1], c[2], c[3]);
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int verdict_rank(const char *v)
{
    if (!v)
        return 0;
    if (strcmp(v, "mismatch") == 0)
        return 3;
    if (strcmp(v, "close") == 0)
        return 2;
    return strcmp(v, "identical") == 0 ? 1 : 0;
}

static double tensor_ratio(const cJSON *t)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(t, "metrics");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "bound_ratio");
    if (cJSON_IsNumber(r))
        return r->valuedouble;
    if (cJSON_IsString(r) && strcmp(r->valuestring, "Infinity") == 0)
        return INFINITY;
    return 0.0;
}

int ck_item_worst_tensors(const ck_run_item *it, int *idx, int max)
{
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(it->report, "tensors");
    int n = 0, count = cJSON_GetArraySize(ts);
    for (int i = 0; i < count; i++) {
        const cJSON *t = cJSON_GetArrayItem(ts, i);
        int rank = verdict_rank(jstr(t, "verdict"));
        if (rank <= 1)
            continue; /* identical tensors are never "worst" */
        double ratio = tensor_ratio(t);
        /* insert keeping the list worst first; ties keep report order */
        int pos = n;
        while (pos > 0) {
            const cJSON *u = cJSON_GetArrayItem(ts, idx[pos - 1]);
            int ur = verdict_rank(jstr(u, "verdict"));
            if (ur > rank || (ur == rank && !(tensor_ratio(u) < ratio)))
                break;
            pos--;
        }
        if (pos >= max)
            continue;
        int end = n < max ? n : max - 1;
        memmove(idx + pos + 1, idx + pos, (size_t)(end - pos) * sizeof *idx);
        idx[pos] = i;
        if (n < max)
            n++;
    }
    return n;
}

void ck_item_summary_line(const ck_run_item *it, char *buf, size_t n)
{
    if (!it->report) {
        snprintf(buf, n, "%s", it->message ? it->message : ck_item_status_name(it->status));
        return;
    }
    const cJSON *r = it->report;
    const cJSON *first_failure = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "failures"), 0);
    if (cJSON_IsString(first_failure)) {
        /* the report's own sentence: the verdict, how many, where the runs first part */
        snprintf(buf, n, "%s", first_failure->valuestring);
        return;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(r, "config");
    const char *verdict = jstr(r, "verdict"), *expect = jstr(cfg, "expect");
    const cJSON *fd = cJSON_GetObjectItemCaseSensitive(r, "first_divergence");
    int k = snprintf(buf, n, "%s (expected %s)", verdict ? verdict : "?", expect ? expect : "?");
    if (k >= 0 && (size_t)k < n && cJSON_IsObject(fd)) {
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(fd, "step");
        snprintf(buf + k, n - (size_t)k, ": first divergence %s %s at step %d",
                 jstr(fd, "kind") ? jstr(fd, "kind") : "?", jstr(fd, "name") ? jstr(fd, "name") : "?",
                 cJSON_IsNumber(step) ? step->valueint : -1);
    }
}

void ck_item_cause_line(const ck_run_item *it, char *buf, size_t n)
{
    buf[0] = '\0';
    const cJSON *bs = it->report ? cJSON_GetObjectItemCaseSensitive(it->report, "bisect") : NULL;
    const cJSON *causes = cJSON_GetObjectItemCaseSensitive(bs, "causes");
    const cJSON *first = cJSON_GetArrayItem(causes, 0);
    if (!cJSON_IsString(first))
        return;
    int more = cJSON_GetArraySize(causes) - 1;
    if (more > 0)
        snprintf(buf, n, "%s (and %d more cause%s)", first->valuestring, more,
                 more == 1 ? "" : "s");
    else
        snprintf(buf, n, "%s", first->valuestring);
}

void ck_item_failure_line(const ck_run_item *it, char *buf, size_t n)
{
    ck_item_summary_line(it, buf, n);
    char cause[768];
    ck_item_cause_line(it, cause, sizeof cause);
    size_t used = strlen(buf);
    if (cause[0] && it->status == CK_ITEM_FAIL && used < n)
        snprintf(buf + used, n - used, "; cause: %s", cause);
}

cJSON *ck_run_set_summary_json(const ck_run_set *s)
{
    ck_json_builder b = {false};
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return NULL;
    ck_json_add_string(&b, root, "schema", CK_SUMMARY_SCHEMA);
    ck_json_add_int(&b, root, "schema_version", CK_SUMMARY_SCHEMA_VERSION);
    ck_json_add_string(&b, root, "command", s->command);
    int c[4];
    ck_run_set_counts(s, c);
    cJSON *counts = ck_json_add_object(&b, root, "counts");
    for (int i = 0; i < 4; i++)
        ck_json_add_int(&b, counts, status_names[i], c[i]);
    ck_json_add_int(&b, root, "exit_code", ck_run_set_exit_code(s));
    if (s->matrix_size > 0) {
        cJSON *mx = ck_json_add_object(&b, root, "matrix");
        ck_json_add_int(&b, mx, "size", s->matrix_size);
        ck_json_add_int(&b, mx, "shard", s->shard);
        ck_json_add_int(&b, mx, "shards", s->shards);
    }
    cJSON *items = ck_json_add_array(&b, root, "items");
    for (int i = 0; i < s->n; i++) {
        const ck_run_item *it = &s->items[i];
        cJSON *o = ck_json_add_object(&b, items, NULL);
        ck_json_add_int(&b, o, "index", it->index);
        ck_json_add_string(&b, o, "case", it->case_name);
        ck_json_add_string(&b, o, "file", it->case_file);
        ck_json_add_string(&b, o, "dtype", it->dtype);
        ck_json_add_string(&b, o, "backend", it->backend);
        ck_json_add_string(&b, o, "status", ck_item_status_name(it->status));
        ck_json_add_string(&b, o, "message", it->message);
        ck_json_add_string(&b, o, "report", it->report_file);
        if (!s->reproducible)
            ck_json_add_real(&b, o, "time_s", it->time_s);
    }
    if (b.failed) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

ck_status ck_run_set_write_summary(const ck_run_set *s, const char *path, ck_error *err)
{
    cJSON *root = ck_run_set_summary_json(s);
    if (!root)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the summary", path);
    ck_status st = ck_json_write_file(root, path, "summary", err);
    cJSON_Delete(root);
    return st;
}
