/*
 * The run result's own memory and names. The case and graph it points to belong to the
 * caller and are left alone.
 */
#include "harness/verify/result.h"

#include "harness/verify/findings.h"

#include <stdlib.h>
#include <string.h>

const char *ck_precision_check_name(ck_precision_check m)
{
    switch (m) {
    case CK_PRECISION_CHECK_FAIL: return "fail";
    case CK_PRECISION_CHECK_WARN: return "warn";
    case CK_PRECISION_CHECK_OFF: return "off";
    }
    return "?";
}

void ck_result_free(ck_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n_tensors && r->tensors; i++)
        free(r->tensors[i].name);
    free(r->tensors);
    free(r->segments);
    free(r->plain.losses);
    free(r->ckpt.losses);
    free(r->plain.scales);
    free(r->ckpt.scales);
    free(r->plain.step_wall_s);
    free(r->ckpt.step_wall_s);
    free(r->plain.train_wall_s);
    free(r->ckpt.train_wall_s);
    for (int i = 0; i < r->n_vs_fp32 && r->vs_fp32; i++)
        free(r->vs_fp32[i].name);
    free(r->vs_fp32);
    for (int i = 0; i < r->n_vs_backend && r->vs_backend; i++)
        free(r->vs_backend[i].name);
    free(r->vs_backend);
    free(r->algos);
    if (r->bisect) {
        ck_bisect_result_free(r->bisect);
        free(r->bisect);
    }
    free(r->recompute_checks);
    free(r->segment_runs);
    /* Zeroed so that a second free, or a reuse by mistake, finds nothing to follow. */
    memset(r, 0, sizeof *r);
    r->first_divergence = -1;
    r->first_scale_mismatch = -1;
    r->vs_fp32_first = -1;
    r->vs_fp32_worst = -1;
    r->vs_backend_first = -1;
}
