/*
 * Set comparison and the compare report (see setcompare.h). Integer widths ck_dtype lacks
 * (i8, i16, u8, u16, u32, u64, bool) are widened to i64 and compared exactly by
 * ck_compare; u64 values above 2^63 - 1 keep their bits, so their verdict is exact while
 * their distances are those of the reinterpreted values.
 */
#include "harness/compare/sets.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


const char *ck_pair_kind_name(ck_pair_kind k)
{
    switch (k) {
    case CK_PAIR_COMPARED: return "compared";
    case CK_PAIR_MISSING: return "missing";
    case CK_PAIR_EXTRA: return "extra";
    case CK_PAIR_SHAPE: return "shape";
    case CK_PAIR_DTYPE: return "dtype";
    }
    return "?";
}

void ck_set_comparison_free(ck_set_comparison *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->p[i].name);
    free(c->p);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------------------------- */
/* Comparing one pair                                                                  */
/* ---------------------------------------------------------------------------------- */

static int64_t widen(ck_file_dtype dt, const unsigned char *p)
{
    switch (dt) {
    case CK_FT_I16: { int16_t v; memcpy(&v, p, 2); return v; }
    case CK_FT_I8: return (int8_t)p[0];
    case CK_FT_U64: { uint64_t v; memcpy(&v, p, 8); return (int64_t)v; }
    case CK_FT_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case CK_FT_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    default: return p[0]; /* u8, bool (its byte, so 2 and 1 differ) */
    }
}

static int64_t int_at(ck_file_dtype dt, const void *data, int64_t i)
{
    const unsigned char *q = (const unsigned char *)data + (size_t)i * ck_file_dtype_size(dt);
    switch (dt) {
    case CK_FT_I64: { int64_t v; memcpy(&v, q, 8); return v; }
    case CK_FT_I32: { int32_t v; memcpy(&v, q, 4); return v; }
    default: return widen(dt, q);
    }
}

/* Integers are compared exactly; a tolerance-file row naming the tensor may excuse a
 * difference (|a - ref| <= atol + rtol |ref|), e.g. num_batches_tracked 2 vs 1. The
 * metrics stay exact; only the count outside and the verdict follow the excuse. */
static void excuse_ints(const ck_named_tensor *a, const ck_named_tensor *r, int64_t numel,
                        ck_pair *p)
{
    if (p->verdict != CK_VERDICT_MISMATCH || (p->rtol == 0.0 && p->atol == 0.0))
        return;
    p->m.n_outside = 0;
    p->m.first_bad = -1;
    for (int64_t i = 0; i < numel; i++) {
        int64_t x = int_at(r->dtype, a->data, i), y = int_at(r->dtype, r->data, i);
        double d = x >= y ? (double)((uint64_t)x - (uint64_t)y) : (double)((uint64_t)y - (uint64_t)x);
        if (!(d <= p->atol + p->rtol * fabs((double)y))) {
            if (p->m.first_bad < 0)
                p->m.first_bad = i;
            p->m.n_outside++;
        }
    }
    p->verdict = p->m.n_outside ? CK_VERDICT_MISMATCH : CK_VERDICT_CLOSE;
}

static ck_status compare_pair(const ck_named_tensor *a, const ck_named_tensor *r, ck_pair *p,
                              ck_error *err)
{
    int64_t numel = 0;
    ck_file_shape_size(&r->shape, r->dtype, &numel, NULL);
    ck_dtype cd;
    if (ck_file_dtype_to_ck(r->dtype, &cd) || numel == 0) {
        p->verdict = ck_compare(numel ? cd : CK_I64, numel, a->data, r->data, p->rtol, p->atol,
                                &p->m);
        if (numel && !ck_file_dtype_is_float(r->dtype))
            excuse_ints(a, r, numel, p);
        return CK_OK;
    }
    size_t es = ck_file_dtype_size(r->dtype);
    int64_t *wa = malloc((size_t)numel * sizeof *wa), *wr = malloc((size_t)numel * sizeof *wr);
    if (!wa || !wr) {
        free(wa);
        free(wr);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory comparing \"%s\"", r->name);
    }
    for (int64_t i = 0; i < numel; i++) {
        wa[i] = widen(r->dtype, (const unsigned char *)a->data + (size_t)i * es);
        wr[i] = widen(r->dtype, (const unsigned char *)r->data + (size_t)i * es);
    }
    p->verdict = ck_compare(CK_I64, numel, wa, wr, 0.0, 0.0, &p->m);
    excuse_ints(a, r, numel, p);
    free(wa);
    free(wr);
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Matching                                                                            */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int index;
} name_index;

static int cmp_name_index(const void *x, const void *y)
{
    const name_index *a = x, *b = y;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

static int lookup(const name_index *sorted, int n, const char *name)
{
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid].name, name);
        if (c == 0)
            return sorted[mid].index;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static ck_status compare_sets_impl(const ck_tensorset *a, const ck_tensorset *ref,
                                   const ck_name_map *map, const ck_tolerances *tol,
                                   ck_set_comparison *out, ck_error *err)
{
    ck_status st = CK_OK;
    char **mapped = calloc((size_t)a->n + 1, sizeof *mapped);
    name_index *by_a = calloc((size_t)a->n + 1, sizeof *by_a);
    bool *used = calloc((size_t)a->n + 1, sizeof *used);
    memset(out, 0, sizeof *out);
    out->p = calloc((size_t)a->n + (size_t)ref->n + 1, sizeof *out->p);
    if (!mapped || !by_a || !used || !out->p) {
        st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        goto cleanup;
    }

    for (int i = 0; i < a->n; i++) {
        if (map)
            st = ck_name_map_apply(map, a->t[i].name, &mapped[i], err);
        else if (!(mapped[i] = strdup(a->t[i].name)))
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
        if (st != CK_OK)
            goto cleanup;
        by_a[i].name = mapped[i];
        by_a[i].index = i;
    }
    qsort(by_a, (size_t)a->n, sizeof *by_a, cmp_name_index);
    for (int i = 1; i < a->n; i++) {
        if (strcmp(by_a[i - 1].name, by_a[i].name) == 0) {
            st = ck_fail(err, CK_ERR_INPUT,
                         "the name map sends both \"%.200s\" and \"%.200s\" (in %s) to \"%.200s\"",
                         a->t[by_a[i - 1].index].name, a->t[by_a[i].index].name,
                         a->file[by_a[i].index], by_a[i].name);
            goto cleanup;
        }
    }

    for (int r = 0; r < ref->n; r++) {
        const ck_named_tensor *tr = &ref->t[r];
        ck_pair *p = &out->p[out->n];
        if (!(p->name = strdup(tr->name))) {
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        out->n++;
        p->index_ref = r;
        p->verdict = CK_VERDICT_MISMATCH;
        int i = lookup(by_a, a->n, tr->name);
        p->index_a = i;
        if (i < 0) {
            p->kind = CK_PAIR_MISSING;
            continue;
        }
        used[i] = true;
        const ck_named_tensor *ta = &a->t[i];
        p->name_a = ta->name;
        if (ta->dtype != tr->dtype) {
            p->kind = CK_PAIR_DTYPE;
            continue;
        }
        if (!ck_shape_equal(&ta->shape, &tr->shape)) {
            p->kind = CK_PAIR_SHAPE;
            continue;
        }
        p->kind = CK_PAIR_COMPARED;
        ck_tolerances_resolve(tol, tr->name, tr->dtype, &p->rtol, &p->atol);
        if ((st = compare_pair(ta, tr, p, err)) != CK_OK)
            goto cleanup;
    }
    for (int i = 0; i < a->n; i++) {
        if (used[i])
            continue;
        ck_pair *p = &out->p[out->n++];
        p->kind = CK_PAIR_EXTRA;
        p->name = mapped[i];
        mapped[i] = NULL;
        p->name_a = a->t[i].name;
        p->index_a = i;
        p->index_ref = -1;
        p->verdict = CK_VERDICT_MISMATCH;
    }

    out->verdict = CK_VERDICT_IDENTICAL;
    for (int i = 0; i < out->n; i++) {
        const ck_pair *p = &out->p[i];
        if (p->kind == CK_PAIR_COMPARED)
            out->counts[p->verdict]++;
        else
            out->n_problems[p->kind]++;
        if (p->verdict > out->verdict)
            out->verdict = p->verdict;
    }
    out->pass = out->verdict != CK_VERDICT_MISMATCH;

cleanup:
    for (int i = 0; mapped && i < a->n; i++)
        free(mapped[i]);
    free(mapped);
    free(by_a);
    free(used);
    if (st != CK_OK)
        ck_set_comparison_free(out);
    return st;
}

/* The one-line guarantee for every message of compare_sets. */
ck_status ck_compare_sets(const ck_tensorset *a, const ck_tensorset *ref, const ck_name_map *map,
                          const ck_tolerances *tol, ck_set_comparison *out, ck_error *err)
{
    return ck_error_one_line(err, compare_sets_impl(a, ref, map, tol, out, err));
}
