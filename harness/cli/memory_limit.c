/* run --memory-limit: refuse what is predicted not to fit (memory_limit.h). */
#include "harness/cli/memory_limit.h"

#include <stdio.h>
#include <string.h>

#include "harness/cli/messages.h"
#include "harness/engine/memory_plan.h"
#include "harness/model/plan.h"

/* MemAvailable of /proc/meminfo in bytes, or -1. */
static int64_t available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    fclose(f);
    return kib < 0 ? -1 : (int64_t)kib * 1024;
}

static int64_t the_limit(const ck_run_opts *o, const char **what)
{
    if (!o->memory_limit_auto) {
        *what = "the --memory-limit is";
        return o->memory_limit;
    }
    *what = "the available memory (--memory-limit auto: MemAvailable) is";
    return available_bytes();
}

int ck_cli_check_memory_limit(const ck_run_opts *o, const ck_loaded_case *c, ck_dtype dtype,
                              bool with_fp32)
{
    if (!o->has_memory_limit || !c->built)
        return CK_EXIT_PASS;
    if (o->memory_limit_auto && o->backend && strcmp(o->backend, "cuda") == 0) {
        ck_cli_error("--memory-limit auto: the cuda backend does not report its free device "
                     "memory; give the limit in bytes");
        return CK_EXIT_USAGE;
    }
    const char *what;
    int64_t limit = the_limit(o, &what);
    if (limit < 0) {
        ck_cli_error("--memory-limit auto: /proc/meminfo has no MemAvailable; give the limit "
                     "in bytes");
        return CK_EXIT_USAGE;
    }
    ck_plan plan;
    ck_error err;
    if (ck_plan_build(&c->g, &plan, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    int rc = CK_EXIT_PASS;
    const ck_dtype dts[2] = {dtype, CK_F32};
    for (int d = 0; d < (with_fp32 && dtype != CK_F32 ? 2 : 1) && rc == CK_EXIT_PASS; d++) {
        for (int k = 0; k < 2 && rc == CK_EXIT_PASS; k++) {
            ck_memory_prediction pr;
            if (ck_predict_memory(&c->g, k ? &plan : NULL, dts[d], &pr, &err) != CK_OK) {
                ck_cli_error(err.msg);
                rc = CK_EXIT_USAGE;
                break;
            }
            if (pr.peak_bytes > limit) {
                ck_cli_errorf("%s (%s): the %s run is predicted to need %lld bytes of "
                              "activations, %s %lld bytes: not run", c->cs.path,
                              ck_dtype_name(dts[d]), k ? "checkpointed" : "plain",
                              (long long)pr.peak_bytes, what, (long long)limit);
                rc = CK_EXIT_USAGE;
            }
            ck_memory_prediction_free(&pr);
        }
    }
    ck_plan_free(&plan);
    return rc;
}
