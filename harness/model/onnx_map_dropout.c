/*
 * Dropout: its rate and training mode from the node's constants; an inference-mode or zero-rate
 * Dropout is the identity.
 */
#include "harness/model/onnx_import_internal.h"


/* A Dropout's rate and whether it is in training mode (constants of the node). */
ck_status imp_dropout_params(imp *im, const ck_onnx_node *n, double *rate_out, bool *training_out)
{
    double rate = imp_float_decimal(imp_attr_float(n, "ratio", 0.5));
    if (n->n_in > 1 && n->in[1][0]) {
        const ck_onnx_tensor *r = imp_const_of(im, n->in[1]);
        if (!r || r->numel != 1)
            return imp_fail_node(im, "the ratio must be a constant scalar");
        rate = imp_elem_f64(r, 0);
        if (r->data_type == CK_ONNX_FLOAT)
            rate = imp_float_decimal(rate);
    }
    bool training = false;
    if (n->n_in > 2 && n->in[2][0]) {
        const ck_onnx_tensor *t = imp_const_of(im, n->in[2]);
        if (!t || t->numel != 1)
            return imp_fail_node(im, "training_mode must be a constant scalar");
        training = imp_elem_f64(t, 0) != 0.0;
    } else if (im->m->opset > 0 && im->m->opset < 12) {
        training = !imp_attr_int(n, "is_test", 0);
    }
    if (n->n_out > 1 && n->out[1][0] && imp_readers(im, n->out[1]) > 0)
        return imp_fail_node(im, "its mask output is read by another node");
    if (training && rate != 0.0 && !(rate > 0.0 && rate < 1.0))
        return imp_fail_node(im, "ratio %g is outside [0, 1)", rate);
    *rate_out = rate;
    *training_out = training;
    return CK_OK;
}

ck_status imp_map_dropout(imp *im, const ck_onnx_node *n)
{
    double rate;
    bool training;
    CK_TRY(imp_dropout_params(im, n, &rate, &training));
    const char *src = n->n_in > 0 ? imp_layer_of(im, n->in[0]) : NULL;
    if (!src)
        return imp_fail_node(im, "its input is produced by no supported node");
    if (!training || rate == 0.0) /* inference-mode dropout is the identity */
        return imp_bind(im, n->out[0], src);
    char name[CK_NAME_MAX + 1];
    CK_TRY(imp_name_for(im, n, NULL, name));
    cJSON *L = imp_new_layer(im, name, "dropout");
    if (!L)
        return imp_oom(im);
    int in0 = 0;
    CK_TRY(imp_set_inputs(im, L, n, &in0, 1));
    if (!cJSON_AddNumberToObject(L, "rate", rate))
        return imp_oom(im);
    return imp_bind(im, n->out[0], name);
}
