/*
 * Cross-entropy over a class dim with ignore_index (PyTorch F.cross_entropy, reduction
 * mean, no weights, no label smoothing), in double (k18.h).
 */
#include "backends/ref/ref18.h"

#include <math.h>

static void terms(const double *y, int64_t C, int64_t inner, double *max, double *lse)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < C; c++)
        m = fmax(m, y[c * inner]);
    double s = 0.0;
    for (int64_t c = 0; c < C; c++)
        s += exp(y[c * inner] - m);
    *max = m;
    *lse = log(s);
}

double k18_ce_loss(const double *y, const int32_t *t, int64_t outer, int64_t C, int64_t inner,
                   int64_t ignore_index)
{
    double sum = 0.0;
    int64_t count = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int32_t cls = t[o * inner + i];
            if (cls == ignore_index)
                continue;
            const double *yr = y + o * C * inner + i;
            double m, lse;
            terms(yr, C, inner, &m, &lse);
            sum += m + lse - yr[(int64_t)cls * inner];
            count++;
        }
    return sum / (double)count; /* 0/0 = NaN when all are ignored, as PyTorch */
}

void k18_ce_grad(double *dy, const double *y, const int32_t *t, int64_t outer, int64_t C,
                 int64_t inner, int64_t ignore_index, double scale)
{
    int64_t count = 0;
    for (int64_t j = 0; j < outer * inner; j++)
        count += t[j] != ignore_index;
    const double gsc = scale / (double)count;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int32_t cls = t[o * inner + i];
            const double *yr = y + o * C * inner + i;
            double *dr = dy + o * C * inner + i;
            if (cls == ignore_index) {
                for (int64_t c = 0; c < C; c++)
                    dr[c * inner] = 0.0;
                continue;
            }
            double m, lse;
            terms(yr, C, inner, &m, &lse);
            for (int64_t c = 0; c < C; c++)
                dr[c * inner] = gsc * (exp(yr[c * inner] - m - lse) - (c == cls ? 1.0 : 0.0));
        }
}

// ----------------------------------------------------------------------------
// entry points (ref_ops.h): the backend's ce_forward / ce_backward

ck_status ref_ce_forward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                         double *out, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc18_ce(REF_BE, loss, y, target, &outer, &C, &inner, err));
    CK_TRY(ck_opc18_ce_classes(loss, target, target->data, outer * inner, C, err));
    ref18_scope s;
    ref18_begin(&s, "cross_entropy", err);
    const double *yv = ref18_in(&s, y);
    if (s.st == CK_OK)
        *out = k18_ce_loss(yv, target->data, outer, C, inner,
                           loss->has_ignore ? loss->ignore_index : INT64_MIN);
    return ref18_end(&s, true);
}

ck_status ref_ce_backward(const ck_loss_spec *loss, const ck_tensor *y, const ck_tensor *target,
                          double scale, ck_tensor *dy, ck_error *err)
{
    int64_t outer, C, inner;
    CK_TRY(ck_opc18_ce(REF_BE, loss, y, target, &outer, &C, &inner, err));
    CK_TRY(ck_opc18_ce_classes(loss, target, target->data, outer * inner, C, err));
    CK_TRY(ck_opc_loss_dy(CK_LOSS_CROSS_ENTROPY, y, dy, err));
    ref18_scope s;
    ref18_begin(&s, "cross_entropy backward", err);
    const double *yv = ref18_in(&s, y);
    double *d = ref18_out(&s, dy);
    if (s.st == CK_OK)
        k18_ce_grad(d, yv, target->data, outer, C, inner,
                    loss->has_ignore ? loss->ignore_index : INT64_MIN, scale);
    return ref18_end(&s, true);
}
