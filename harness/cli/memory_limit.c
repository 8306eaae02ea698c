/* run --memory-limit and --plain: fit the run plan to the limit (memory_limit.h). */
#include "harness/cli/memory_limit.h"

#include <stdio.h>
#include <string.h>

#include "harness/cli/help_text.h"
#include "harness/cli/messages.h"
#include "harness/core/text.h"

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

int64_t ck_cli_memory_limit(const ck_run_opts *o, const char **what)
{
    static int64_t available; /* auto: read once, so every case is fitted to the same bytes */
    *what = "the --memory-limit is";
    if (!o->has_memory_limit)
        return 0;
    if (!o->memory_limit_auto)
        return o->memory_limit;
    *what = "the available memory (--memory-limit auto: MemAvailable) is";
    if (o->backend && strcmp(o->backend, "cuda") == 0) {
        ck_cli_error("--memory-limit auto: the cuda backend does not report its free device "
                     "memory; give the limit in bytes");
        return -1;
    }
    if (available == 0)
        available = available_bytes();
    if (available < 0) {
        ck_cli_error("--memory-limit auto: /proc/meminfo has no MemAvailable; give the limit "
                     "in bytes");
        return -1;
    }
    return available;
}

int ck_cli_fit_run_plan(const ck_run_opts *o, const ck_loaded_case *c, ck_run_request *rq,
                        ck_run_plan *p)
{
    if (!c->built)
        return CK_EXIT_PASS;
    const char *what;
    int64_t limit = ck_cli_memory_limit(o, &what);
    if (limit < 0)
        return CK_EXIT_USAGE;
    rq->memory_limit = limit;
    ck_error err;
    if (ck_run_plan_fit(p, &c->g, rq, what, &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    if (p->refused) {
        ck_cli_error(p->refusal);
        return CK_EXIT_USAGE;
    }
    return CK_EXIT_PASS;
}

void ck_cli_note_segmentwise(FILE *f, const ck_case *c, const ck_run_plan *p,
                             const ck_run_request *rq, const char *limit_what)
{
    if (!p->segmentwise || p->segmentwise_reason != CK_SEGMENTWISE_PLAIN_OVER_LIMIT)
        return;
    char note[CK_ERROR_MAX], shown[256];
    int64_t plain = p->plain_peak > rq->memory_limit ? p->plain_peak : p->fp32_plain_peak;
    int64_t largest = p->largest_segment_run_peak > p->ckpt_peak ? p->largest_segment_run_peak
                                                                 : p->ckpt_peak;
    snprintf(note, sizeof note,
             "%s (%s): the plain run is predicted to need %lld bytes of activations, %s %lld "
             "bytes: not run; segment by segment instead (the checkpointed run and %d runs each "
             "keeping one segment's activations, the largest %lld bytes)\n",
             ck_text_escape(c->name, shown, sizeof shown), ck_dtype_name(p->dtype),
             (long long)plain, limit_what, (long long)rq->memory_limit,
             p->fixed.count[CK_TRAINING_SEGMENT_KEPT], (long long)largest);
    ck_cli_write_help(f, note); /* at 80 columns */
}
