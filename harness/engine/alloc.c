/* Accounting allocator for activation memory (see alloc.h). */
#include "harness/engine/alloc.h"

void ck_act_alloc_init(ck_act_alloc *a, ck_backend *b)
{
    a->b = b;
    a->live_bytes = 0;
    a->peak_bytes = 0;
    a->n_allocs = 0;
}

ck_status ck_act_alloc_tensor(ck_act_alloc *a, ck_tensor *t, ck_error *err)
{
    int64_t n;
    if (!ck_shape_numel_checked(&t->shape, ck_dtype_size(t->dtype), &n))
        return ck_fail(err, CK_ERR_INPUT, "tensor %s: shape too large", t->name ? t->name : "?");
    size_t bytes = (size_t)n * ck_dtype_size(t->dtype);
    ck_status st = a->b->alloc(a->b, bytes, &t->data, err);
    if (st != CK_OK) {
        ck_error_prefix(err, "allocating %zu bytes for %s (%lld bytes of activations live)",
                        bytes, t->name ? t->name : "?", (long long)a->live_bytes);
        t->data = NULL;
        return st;
    }
    a->live_bytes += (int64_t)bytes;
    a->n_allocs++;
    if (a->live_bytes > a->peak_bytes)
        a->peak_bytes = a->live_bytes;
    return CK_OK;
}

void ck_act_free_tensor(ck_act_alloc *a, ck_tensor *t)
{
    if (!t->data)
        return;
    a->b->free(a->b, t->data);
    a->live_bytes -= (int64_t)ck_tensor_bytes(t);
    t->data = NULL;
}
