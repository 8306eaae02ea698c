/* Whether a run's gradients carry information (vacuity.h). */
#include "harness/verify/vacuity.h"

#include "harness/core/metrics.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void ck_vacuity_count(const ck_record *rec, ck_dtype dt, ck_vacuity *v)
{
    double min_normal = dt == CK_F16 ? 6.103515625e-05 : (double)FLT_MIN;
    for (int k = 0; k < rec->n; k++) {
        const ck_record_entry *e = &rec->e[k];
        if (e->kind != CK_KIND_GRAD || e->dtype != CK_F32)
            continue;
        int64_t n = ck_shape_numel(&e->shape);
        double scale = e->step >= 0 && e->step < rec->steps && rec->scales
                           ? rec->scales[e->step].scale
                           : 1.0;
        if (dt == CK_F32)
            scale = 1.0;
        const float *g = e->data;
        v->elements += n;
        if (scale == 1.0 && min_normal == (double)FLT_MIN) {
            /* the same counts read off the bits */
            ck_f32_classes c;
            ck_f32_count_classes(g, n, &c);
            v->zero += c.zero;
            v->subnormal += c.subnormal;
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            if (g[i] == 0.0f)
                v->zero++;
            else if (isfinite(g[i]) && fabs((double)g[i] * scale) < min_normal)
                v->subnormal++;
        }
    }
}

void ck_vacuity_finish(const ck_record *rec, ck_vacuity *v)
{
    v->vacuous = false;
    v->reason = CK_VACUITY_NONE;
    v->step = v->skipped = 0;
    for (int s = 0; rec->losses && s < rec->steps; s++) {
        if (!isfinite(rec->losses[s]) || rec->losses[s] == 0.0) {
            v->vacuous = true;
            v->reason = rec->losses[s] == 0.0 ? CK_VACUITY_LOSS_ZERO : CK_VACUITY_LOSS_NONFINITE;
            v->step = s;
            return;
        }
    }
    int skipped = 0;
    for (int s = 0; rec->scales && s < rec->steps; s++)
        skipped += rec->scales[s].skipped;
    if (rec->steps > 0 && skipped == rec->steps) {
        v->vacuous = true;
        v->reason = CK_VACUITY_ALL_SKIPPED;
        v->skipped = skipped;
        return;
    }
    if (v->elements == 0) {
        v->vacuous = true;
        v->reason = CK_VACUITY_NO_GRADIENTS;
        return;
    }
    double frac = (double)(v->zero + v->subnormal) / (double)v->elements;
    if (frac >= CK_VACUOUS_FRACTION) {
        v->vacuous = true;
        v->reason = CK_VACUITY_ZERO_GRADIENTS;
    }
}

void ck_vacuity_measure(const ck_record *rec, ck_dtype dt, ck_vacuity *v)
{
    memset(v, 0, sizeof *v);
    v->flushed = -1;
    ck_vacuity_count(rec, dt, v);
    ck_vacuity_finish(rec, v);
}
