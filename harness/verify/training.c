/* The verify layer's one training entry (training.h). */
#include "harness/verify/training.h"

static const char *const kind_names[CK_TRAINING_KINDS] = {
    "plain", "checkpointed", "fp32 reference", "calibration", "other backend",
    "recompute check", "noise floor", "bisect"};

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

ck_status ck_training_run(const ck_training *t, ck_record *rec, ck_error *err)
{
    count(t);
    return ck_train(t->b, t->g, t->plan, t->dtype, t->hooks, rec, err);
}

ck_status ck_training_begin(const ck_training *t, ck_trainer *tr, ck_record *rec, ck_error *err)
{
    count(t);
    return ck_trainer_begin(tr, t->b, t->g, t->plan, t->dtype, t->hooks, rec, err);
}
