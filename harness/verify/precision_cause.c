/* The dominant measurable cause of a low-precision failure (precision_cause.h). */
#include "harness/verify/precision_cause.h"

#include <string.h>

void ck_lowp_cause_find(const ck_result *r, ck_lowp_cause *out)
{
    memset(out, 0, sizeof *out);
    for (int k = 0; k < r->n_vs_fp32; k++)
        if (r->vs_fp32[k].cast_overflow > 0)
            out->overflowed += r->vs_fp32[k].cast_overflow;
    out->steps = r->plain.steps;
    for (int s = 0; s < r->plain.steps && r->plain.scales; s++)
        out->skipped_steps += r->plain.scales[s].skipped;
    const ck_vacuity *v = &r->plain.vacuity;
    out->flushed = v->flushed > 0 ? v->flushed : 0;
    out->subnormal = v->subnormal;
    out->elements = v->elements;
    if (v->elements > 0)
        out->underflow_share = (double)(out->flushed + out->subnormal) / (double)v->elements;
    out->loss_scaled = r->cs && r->cs->loss_scale != CK_SCALE_NONE;
    if (out->overflowed > 0 || out->skipped_steps > 0)
        out->kind = CK_LOWP_CAUSE_OVERFLOW;
    else if (r->cs && r->cs->reduction_low)
        out->kind = CK_LOWP_CAUSE_LOW_REDUCTION;
    else if (out->elements > 0 && out->underflow_share >= CK_UNDERFLOW_SHARE)
        out->kind = CK_LOWP_CAUSE_UNDERFLOW;
    else
        out->kind = CK_LOWP_CAUSE_NONE;
}
