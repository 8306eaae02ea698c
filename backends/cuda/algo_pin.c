/*
 * The CUDA backend's convolution engine choice, workspace cap, algorithm pinning and
 * failure rules (algo_pin.h), as pure C functions unit-tested on the CPU.
 */
#include "backends/cuda/algo_pin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ck_cuda_conv_engine ck_cuda_conv_engine_for(ck_dtype common)
{
    switch (common) {
    case CK_F32:
    case CK_F16:
    case CK_BF16: return CK_CUDA_CONV_CUDNN;
    case CK_F64: return CK_CUDA_CONV_DIRECT;
    default: return CK_CUDA_CONV_WIDE;
    }
}

ck_cuda_math ck_cuda_query_math(ck_dtype dtype)
{
    switch (dtype) {
    case CK_F32: return CK_CUDA_MATH_FMA;
    case CK_F16:
    case CK_BF16: return CK_CUDA_MATH_TENSOR_OP;
    default: return CK_CUDA_MATH_DEFAULT;
    }
}

void ck_cuda_layer_name(const char *tensor_name, char *buf, size_t n)
{
    if (!n)
        return;
    snprintf(buf, n, "%s", tensor_name ? tensor_name : "(unnamed)");
    char *dot = strrchr(buf, '.');
    if (dot && dot != buf)
        *dot = '\0';
}

ck_status ck_cuda_workspace_cap(size_t device_total, const char *env, size_t *cap,
                                ck_error *err)
{
    if (env && env[0]) {
        char *end = NULL;
        errno = 0;
        unsigned long long mib = strtoull(env, &end, 10);
        if (env[0] < '0' || env[0] > '9' || errno || *end || mib > 1048576ull)
            return ck_fail(err, CK_ERR_INPUT, "CK_CUDA_WORKSPACE_MIB=%s: expected a whole "
                           "number of MiB from 0 to 1048576", env);
        *cap = (size_t)mib << 20;
        return CK_OK;
    }
    size_t c = CK_CUDA_WORKSPACE_CAP_DEFAULT;
    if (device_total && device_total / 8 < c)
        c = device_total / 8;
    *cap = c;
    return CK_OK;
}

ck_cuda_conv_key ck_cuda_conv_key_make(ck_cuda_pass pass, ck_dtype dtype, int nd,
                                       const int *xd, const int *wd, const int *yd,
                                       const int *pad, const int *stride, const int *dil)
{
    ck_cuda_conv_key k;
    memset(&k, 0, sizeof k);
    k.pass = (int)pass;
    k.dtype = (int)dtype;
    k.nd = nd < 0 ? 0 : nd > 3 ? 3 : nd;
    for (int i = 0; i < k.nd + 2; i++) {
        k.xd[i] = xd[i];
        k.wd[i] = wd[i];
        k.yd[i] = yd[i];
    }
    for (int i = 0; i < k.nd; i++) {
        k.pad[i] = pad[i];
        k.stride[i] = stride[i];
        k.dil[i] = dil[i];
    }
    return k;
}

bool ck_cuda_conv_key_equal(const ck_cuda_conv_key *a, const ck_cuda_conv_key *b)
{
    if (a->pass != b->pass || a->dtype != b->dtype || a->nd != b->nd)
        return false;
    for (int i = 0; i < 5; i++)
        if (a->xd[i] != b->xd[i] || a->wd[i] != b->wd[i] || a->yd[i] != b->yd[i])
            return false;
    for (int i = 0; i < 3; i++)
        if (a->pad[i] != b->pad[i] || a->stride[i] != b->stride[i] || a->dil[i] != b->dil[i])
            return false;
    return true;
}

ck_cuda_conv_choice *ck_cuda_pin_find(ck_cuda_pin_table *t, const ck_cuda_conv_key *key)
{
    for (int i = 0; i < t->n; i++)
        if (ck_cuda_conv_key_equal(&t->e[i].key, key))
            return &t->e[i];
    return NULL;
}

ck_status ck_cuda_pin_add(ck_cuda_pin_table *t, const ck_cuda_conv_key *key,
                          const ck_cuda_algo_candidate *c, int n, bool from_find,
                          ck_cuda_conv_choice **out, ck_error *err)
{
    *out = NULL;
    const int max = (int)(sizeof t->e[0].cand / sizeof t->e[0].cand[0]);
    if (n < 0 || n > max)
        return ck_fail(err, CK_ERR_INTERNAL, "cuda: %d convolution candidates (at most %d)", n,
                       max);
    if (ck_cuda_pin_find(t, key))
        return ck_fail(err, CK_ERR_INTERNAL, "cuda: convolution %s in %s chosen twice",
                       ck_cuda_pass_name((ck_cuda_pass)key->pass),
                       ck_dtype_name((ck_dtype)key->dtype));
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        void *p = realloc(t->e, (size_t)cap * sizeof *t->e);
        if (!p)
            return ck_fail(err, CK_ERR_NOMEM, "out of memory pinning convolution algorithms");
        t->e = p;
        t->cap = cap;
    }
    ck_cuda_conv_choice *ch = &t->e[t->n++];
    memset(ch, 0, sizeof *ch);
    ch->key = *key;
    ch->n = n;
    ch->from_find = from_find;
    for (int i = 0; i < n; i++)
        ch->cand[i] = c[i];
    *out = ch;
    return CK_OK;
}

void ck_cuda_pin_free(ck_cuda_pin_table *t)
{
    free(t->e);
    t->e = NULL;
    t->n = t->cap = 0;
}

const ck_cuda_algo_candidate *ck_cuda_choice_current(const ck_cuda_conv_choice *ch)
{
    return ch->tried < ch->n ? &ch->cand[ch->tried] : NULL;
}

void ck_cuda_choice_ran(ck_cuda_conv_choice *ch)
{
    if (ch->tried < ch->n)
        ch->pinned = true;
}

ck_cuda_next_step ck_cuda_after_failure(ck_cuda_algo_policy policy, bool pinned,
                                        ck_cuda_failure why)
{
    if (pinned)
        return CK_CUDA_FAIL;
    if (why == CK_CUDA_FAIL_NOT_SUPPORTED)
        return CK_CUDA_TRY_NEXT;
    return policy == CK_CUDA_ALGO_FASTEST ? CK_CUDA_TRY_NEXT : CK_CUDA_FAIL;
}

void ck_cuda_choice_skip(ck_cuda_conv_choice *ch)
{
    if (!ch->pinned && ch->tried < ch->n)
        ch->tried++;
}

void ck_cuda_describe_offer(ck_cuda_pass pass, const ck_cuda_algo_candidate *c, int n,
                            char *buf, size_t size)
{
    size_t used = 0;
    if (!size)
        return;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < size; i++) {
        int w;
        if (c[i].status_ok)
            w = snprintf(buf + used, size - used, "%s%s (%s, %s, %zu B)", i ? ", " : "",
                         ck_cuda_conv_algo_name(pass, c[i].algo),
                         c[i].determinism == CK_CUDA_DETERMINISTIC ? "deterministic"
                                                                   : "nondeterministic",
                         ck_cuda_math_name(c[i].math), c[i].memory);
        else
            w = snprintf(buf + used, size - used, "%s%s (not supported)", i ? ", " : "",
                         ck_cuda_conv_algo_name(pass, c[i].algo));
        if (w < 0)
            break;
        used += (size_t)w;
        if (used >= size)
            used = size - 1;
    }
    if (!n)
        snprintf(buf, size, "nothing");
}

static void site_str(const ck_cuda_conv_site *s, char *buf, size_t n)
{
    snprintf(buf, n, "layer `%s` (conv%dd %s, %s)", s->layer ? s->layer : "(unnamed)", s->nsp,
             ck_cuda_pass_name(s->pass), ck_dtype_name(s->dtype));
}

ck_status ck_cuda_fail_no_algorithm(const ck_cuda_conv_site *s, size_t cap,
                                    const ck_cuda_algo_candidate *c, int n, ck_error *err)
{
    char where[160], offer[512];
    site_str(s, where, sizeof where);
    ck_cuda_describe_offer(s->pass, c, n, offer, sizeof offer);
    return ck_fail(err, CK_ERR_UNSUPPORTED,
                   "%s: cuDNN offers no algorithm the %s policy allows%s within the %zu-byte "
                   "workspace cap (offered: %s)", where, ck_cuda_algo_policy_name(s->policy),
                   s->dtype == CK_F32 ? " with FMA math (no TF32)" : "", cap, offer);
}

ck_status ck_cuda_fail_workspace(const ck_cuda_conv_site *s, int algo, size_t bytes,
                                 bool pinned, ck_error *err)
{
    char where[160];
    site_str(s, where, sizeof where);
    return ck_fail(err, CK_ERR_NOMEM,
                   "%s: cannot allocate the %zu-byte (%.2f GiB) workspace of %s cuDNN algorithm "
                   "%s; %s (lower CK_CUDA_WORKSPACE_MIB or free GPU memory)", where, bytes,
                   (double)bytes / 1073741824.0, pinned ? "its pinned" : "the chosen",
                   ck_cuda_conv_algo_name(s->pass, algo),
                   pinned ? "a pinned algorithm is never switched"
                          : "the deterministic policy never switches algorithms for want of "
                            "memory");
}

ck_status ck_cuda_fail_refused(const ck_cuda_conv_site *s, int algo, bool pinned,
                               ck_error *err)
{
    char where[160];
    site_str(s, where, sizeof where);
    return ck_fail(err, CK_ERR_UNSUPPORTED,
                   "%s: cuDNN refused %s algorithm %s (CUDNN_STATUS_NOT_SUPPORTED)%s", where,
                   pinned ? "its pinned" : "the last allowed",
                   ck_cuda_conv_algo_name(s->pass, algo),
                   pinned ? " after running it before" : " and no other allowed algorithm is left");
}

ck_status ck_cuda_fail_math(const ck_cuda_conv_site *s, int set, int got, ck_error *err)
{
    char where[160];
    site_str(s, where, sizeof where);
    return ck_fail(err, CK_ERR_UNSUPPORTED,
                   "%s: the convolution descriptor holds math type %s after %s was set; %s "
                   "runs only with %s", where, ck_cuda_math_name(got), ck_cuda_math_name(set),
                   ck_dtype_name(s->dtype), ck_cuda_math_name(ck_cuda_query_math(s->dtype)));
}

ck_status ck_cuda_fail_unsupported_call(const ck_cuda_conv_site *s, const char *call,
                                        ck_error *err)
{
    char where[160], name[64];
    site_str(s, where, sizeof where);
    size_t i = 0;
    while (call && call[i] && call[i] != '(' && call[i] != ' ' && i + 1 < sizeof name) {
        name[i] = call[i];
        i++;
    }
    name[i] = '\0';
    return ck_fail(err, CK_ERR_UNSUPPORTED,
                   "%s: cuDNN does not support this convolution (%s: "
                   "CUDNN_STATUS_NOT_SUPPORTED)%s", where, i ? name : "cuDNN",
                   s->dtype == CK_F16 || s->dtype == CK_BF16
                       ? "; run the case in fp32, or on --backend cpu"
                       : "");
}

bool ck_cuda_falls_back(ck_status st, bool pinned)
{
    return st == CK_ERR_UNSUPPORTED && !pinned;
}

bool ck_cuda_fallback_find(ck_cuda_pin_table *t, const ck_cuda_conv_key *key)
{
    return ck_cuda_pin_find(t, key) != NULL;
}

ck_status ck_cuda_fallback_add(ck_cuda_pin_table *t, const ck_cuda_conv_key *key,
                               ck_error *err)
{
    if (ck_cuda_pin_find(t, key))
        return CK_OK;
    ck_cuda_conv_choice *ch = NULL;
    const ck_cuda_algo_candidate none = {0};
    return ck_cuda_pin_add(t, key, &none, 0, false, &ch, err);
}
