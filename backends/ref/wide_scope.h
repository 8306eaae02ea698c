/*
 * Private to the reference backend: the wide-view scope every double-kernel entry point runs
 * its double kernel (backends/ref/wide_kernels.h) in. Inputs are widened once (ref_wide_in),
 * forward outputs get scratch that is rounded once into the tensor at the end
 * (ref_wide_store), gradients get zeroed scratch that is added to the tensor with one
 * rounding at the end (ref_wide_accumulate); fp64 tensors are used in place. This is
 * harness/precision.md's rule for every dtype: the result in a low dtype is bitwise the
 * fp64 result on the same inputs, rounded once.
 */
#ifndef CK_REF_WIDE_SCOPE_H
#define CK_REF_WIDE_SCOPE_H

#include "backends/check/check.h"
#include "backends/ref/ref_elem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REF_SCOPE_MAX 12

typedef struct {
    const char *op;
    ck_error *err;
    ck_status st;
    int n;
    ref_wide w[REF_SCOPE_MAX];
    ck_tensor *t[REF_SCOPE_MAX]; /* written tensors, NULL for inputs */
    int mode[REF_SCOPE_MAX];     /* 0 input, 1 output, 2 gradient */
} ref_scope;

static inline void ref_scope_begin(ref_scope *s, const char *op, ck_error *err)
{
    s->op = op;
    s->err = err;
    s->st = CK_OK;
    s->n = 0;
}

static inline double *ref_scope_add(ref_scope *s, const ck_tensor *t, int mode)
{
    if (!t || s->st != CK_OK)
        return NULL;
    /* one tensor given as several gradients (attention with q = k = v, mul(x, x)): one
     * scratch for all, so the sum of the contributions is added with one rounding */
    for (int i = 0; mode == 2 && i < s->n; i++)
        if (s->mode[i] == 2 && s->t[i] == t)
            return s->w[i].data;
    if (s->n == REF_SCOPE_MAX) {
        s->st = ck_fail(s->err, CK_ERR_INTERNAL, "%s: too many tensors", s->op);
        return NULL;
    }
    int i = s->n++;
    s->t[i] = mode ? (ck_tensor *)t : NULL;
    s->mode[i] = mode;
    s->st = mode ? ref_wide_out(s->op, t, mode == 2, &s->w[i], s->err)
                 : ref_wide_in(s->op, t, &s->w[i], s->err);
    if (s->st != CK_OK) {
        s->n--;
        return NULL;
    }
    return s->w[i].data;
}

/* an input (NULL for a NULL tensor) */
static inline const double *ref_scope_in(ref_scope *s, const ck_tensor *t)
{
    return ref_scope_add(s, t, 0);
}
/* a forward output, overwritten by the kernel */
static inline double *ref_scope_out(ref_scope *s, ck_tensor *t)
{
    return ref_scope_add(s, t, 1);
}
/* a gradient the kernel accumulates into (zeroed scratch unless fp64) */
static inline double *ref_scope_grad(ref_scope *s, ck_tensor *t)
{
    return ref_scope_add(s, t, 2);
}

/* After the kernel ran (run = true) or on failure: writes back and frees everything. */
static inline ck_status ref_scope_end(ref_scope *s, bool run)
{
    for (int i = 0; i < s->n; i++) {
        if (run && s->st == CK_OK) {
            if (s->mode[i] == 1)
                ref_wide_store(s->t[i], &s->w[i]);
            else if (s->mode[i] == 2)
                ref_wide_accumulate(s->t[i], &s->w[i]);
        }
        ref_wide_free(&s->w[i]);
    }
    s->n = 0;
    return s->st;
}

#endif
