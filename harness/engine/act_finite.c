/* Finiteness of activations: counting NaN/Inf per layer, per step and per run. */
#include "harness/engine/act_finite.h"

#include <stdlib.h>
#include <string.h>

ck_status ck_act_finite_init(ck_act_finite *f, int n_layers, ck_error *err)
{
    memset(f, 0, sizeof *f);
    f->n_layers = n_layers;
    size_t n = (size_t)(n_layers > 0 ? n_layers : 1);
    f->layer_total = calloc(n, sizeof *f->layer_total);
    f->step_fwd = calloc(n, sizeof *f->step_fwd);
    f->step_bwd = calloc(n, sizeof *f->step_bwd);
    f->total.first.layer = f->step_first[0].layer = f->step_first[1].layer = -1;
    if (!f->layer_total || !f->step_fwd || !f->step_bwd) {
        ck_act_finite_free(f);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory for activation finiteness counts");
    }
    return CK_OK;
}

void ck_act_finite_free(ck_act_finite *f)
{
    free(f->layer_total);
    free(f->step_fwd);
    free(f->step_bwd);
    free(f->scratch);
    memset(f, 0, sizeof *f);
}

/* A 16-bit float with exponent mask `expm` and mantissa mask `manm`. */
static void count16(const uint16_t *h, int64_t n, uint16_t expm, uint16_t manm, int64_t *nan,
                    int64_t *inf, int64_t *first, bool *first_nan)
{
    for (int64_t k = 0; k < n; k++) {
        if ((h[k] & expm) != expm)
            continue;
        bool is_nan = (h[k] & manm) != 0;
        *(is_nan ? nan : inf) += 1;
        if (*first < 0) {
            *first = k;
            *first_nan = is_nan;
        }
    }
}

void ck_count_nonfinite(ck_dtype dt, int64_t n, const void *data, int64_t *nan, int64_t *inf,
                        int64_t *first, bool *first_nan)
{
    *nan = *inf = 0;
    *first = -1;
    *first_nan = false;
    switch (dt) {
    case CK_F32: {
        const uint32_t *u = data;
        for (int64_t k = 0; k < n; k++) {
            if ((u[k] & 0x7f800000u) != 0x7f800000u)
                continue;
            bool is_nan = (u[k] & 0x007fffffu) != 0;
            *(is_nan ? nan : inf) += 1;
            if (*first < 0) {
                *first = k;
                *first_nan = is_nan;
            }
        }
        break;
    }
    case CK_F64: {
        const uint64_t *u = data;
        for (int64_t k = 0; k < n; k++) {
            if ((u[k] & 0x7ff0000000000000ull) != 0x7ff0000000000000ull)
                continue;
            bool is_nan = (u[k] & 0x000fffffffffffffull) != 0;
            *(is_nan ? nan : inf) += 1;
            if (*first < 0) {
                *first = k;
                *first_nan = is_nan;
            }
        }
        break;
    }
    case CK_F16:
        count16(data, n, 0x7c00u, 0x03ffu, nan, inf, first, first_nan);
        break;
    case CK_BF16:
        count16(data, n, 0x7f80u, 0x007fu, nan, inf, first, first_nan);
        break;
    default:
        break;
    }
}

void ck_act_finite_add(ck_act_finite *f, int layer, int step, bool backward, bool recompute,
                       ck_dtype dt, int64_t n, const void *host)
{
    int64_t nan, inf, first;
    bool first_nan;
    ck_count_nonfinite(dt, n, host, &nan, &inf, &first, &first_nan);
    ck_act_finite_record(f, layer, step, backward, recompute, nan, inf, first, first_nan);
}

void ck_act_finite_record(ck_act_finite *f, int layer, int step, bool backward, bool recompute,
                          int64_t nan, int64_t inf, int64_t first, bool first_nan)
{
    if (nan + inf == 0 || layer < 0 || layer >= f->n_layers)
        return;
    int w = backward ? 1 : 0;
    f->step_nan[w] += nan;
    f->step_inf[w] += inf;
    (backward ? f->step_bwd : f->step_fwd)[layer] += nan + inf;
    if (f->step_first[w].layer < 0)
        f->step_first[w] = (ck_act_first){.layer = layer, .step = step, .backward = backward,
                                          .recompute = recompute, .index = first,
                                          .nan = first_nan};
}

void ck_act_finite_end_step(ck_act_finite *f, bool skipped)
{
    ck_act_nonfinite *t = &f->total;
    int upto = skipped ? 1 : 2; /* [0] outputs always count; [1] gradients unless skipped */
    for (int w = 0; w < upto; w++) {
        t->nan += f->step_nan[w];
        t->inf += f->step_inf[w];
        if (t->first.layer < 0 && f->step_first[w].layer >= 0)
            t->first = f->step_first[w];
    }
    if (skipped)
        t->excused += f->step_nan[1] + f->step_inf[1];
    for (int i = 0; i < f->n_layers; i++) {
        int64_t add = f->step_fwd[i] + (skipped ? 0 : f->step_bwd[i]);
        if (add > 0 && f->layer_total[i] == 0)
            t->layers++;
        f->layer_total[i] += add;
        f->step_fwd[i] = f->step_bwd[i] = 0;
    }
    memset(f->step_nan, 0, sizeof f->step_nan);
    memset(f->step_inf, 0, sizeof f->step_inf);
    f->step_first[0].layer = f->step_first[1].layer = -1;
}
