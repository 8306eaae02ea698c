/* The verify layer's one training entry (training.h). */
#include "harness/verify/training.h"

#include <stdio.h>
#include <string.h>

static const char *const kind_names[CK_TRAINING_KINDS] = {
    "plain", "checkpointed", "fp32 reference", "calibration", "other backend",
    "recompute check", "noise floor", "bisect", "segment kept"};

const char *ck_training_kind_name(ck_training_kind k)
{
    return (unsigned)k < CK_TRAINING_KINDS ? kind_names[k] : "?";
}

int ck_training_log_total(const ck_training_log *log)
{
    int n = 0;
    for (int k = 0; k < CK_TRAINING_KINDS; k++)
        n += log->count[k];
    return n;
}

static void count(const ck_training *t)
{
    if (t->log && (unsigned)t->kind < CK_TRAINING_KINDS)
        t->log->count[t->kind]++;
}

/* The hooks the engine gets: the caller's, with the run named by what it is for, so an
 * error says "calibration run (fp32 rounded to bf16)", not "plain run". */
static ck_run_hooks named_hooks(const ck_training *t, char *name, size_t cap)
{
    ck_run_hooks h;
    if (t->hooks)
        h = *t->hooks;
    else
        memset(&h, 0, sizeof h);
    const char *kind = ck_training_kind_name(t->kind);
    if (t->kind == CK_TRAINING_PLAIN || t->kind == CK_TRAINING_CHECKPOINTED)
        snprintf(name, cap, "%s", kind);
    else if (t->kind == CK_TRAINING_CALIBRATION && h.round_to != CK_F32)
        snprintf(name, cap, "%s (fp32 rounded to %s)", kind, ck_dtype_name(h.round_to));
    else if (t->kind == CK_TRAINING_FP32_REFERENCE || t->kind == CK_TRAINING_CALIBRATION)
        snprintf(name, cap, "%s", kind);
    else
        snprintf(name, cap, "%s (%s)", kind, t->plan ? "checkpointed" : "plain");
    if (!h.run_name)
        h.run_name = name;
    return h;
}

ck_status ck_training_run(const ck_training *t, ck_record *rec, ck_error *err)
{
    count(t);
    char name[64];
    ck_run_hooks h = named_hooks(t, name, sizeof name);
    return ck_train(t->b, t->g, t->plan, t->dtype, &h, rec, err);
}

ck_status ck_training_begin(const ck_training *t, ck_trainer *tr, ck_record *rec, ck_error *err)
{
    count(t);
    char name[64];
    ck_run_hooks h = named_hooks(t, name, sizeof name);
    return ck_trainer_begin(tr, t->b, t->g, t->plan, t->dtype, &h, rec, err);
}
