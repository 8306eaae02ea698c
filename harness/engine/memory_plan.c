/* A run's peak activation bytes, predicted by a dry run of its schedule (memory_plan.h). */
#include "harness/engine/memory_plan.h"

#include <stdlib.h>
#include <string.h>

ck_status ck_predict_memory(const ck_graph *g, const ck_plan *plan, ck_dtype dtype,
                            ck_memory_prediction *out, ck_error *err)
{
    return ck_predict_memory_keeping_grads(g, plan, dtype, false, out, err);
}

ck_status ck_predict_memory_keeping_grads(const ck_graph *g, const ck_plan *plan,
                                          ck_dtype dtype, bool keep_activation_grads,
                                          ck_memory_prediction *out, ck_error *err)
{
    memset(out, 0, sizeof *out);
    const ck_case *c = g->cs;
    /* the executor reads only the dtypes of the model (no parameter is bound in a dry run) */
    ck_model model;
    memset(&model, 0, sizeof model);
    model.dtype = dtype;
    model.master_dtype = dtype == CK_F64 ? CK_F64 : CK_F32;
    ck_exec_config cfg = {.b = NULL, .g = g, .model = &model, .plan = plan, .seed = c->seed,
                          .rng = c->rng, .bn = c->bn, .autocast = c->autocast,
                          .dry_run = true, .keep_activation_grads = keep_activation_grads};
    ck_exec e;
    ck_status st = ck_exec_create(&e, &cfg, err);
    if (st != CK_OK)
        return st;
    static char model_input; /* stands for the input's data: never read */
    ck_tensor input = {.name = "input", .dtype = dtype, .shape = g->input_shape,
                       .data = &model_input};
    double loss = 0.0;
    st = ck_exec_step(&e, 0, &input, NULL, c->loss, 1.0, true, &loss, err);
    if (st == CK_OK) {
        out->peak_bytes = e.act.peak_bytes;
        out->forward_end_bytes = e.forward_end_bytes;
        out->n_segments = plan ? plan->n_segments : 0;
        if (out->n_segments > 0) {
            out->segment_peak = calloc((size_t)out->n_segments, sizeof *out->segment_peak);
            if (!out->segment_peak)
                st = ck_fail(err, CK_ERR_NOMEM, "out of memory predicting memory");
            else
                memcpy(out->segment_peak, e.segment_peak,
                       (size_t)out->n_segments * sizeof *out->segment_peak);
        }
    }
    ck_exec_free(&e);
    if (st != CK_OK)
        ck_error_prefix(err, "%s: predicting the %s run's memory", c->path,
                        plan ? "checkpointed" : "plain");
    return st;
}

void ck_memory_prediction_free(ck_memory_prediction *p)
{
    free(p->segment_peak);
    memset(p, 0, sizeof *p);
}
