/*
 * The case's settings from the import options (onnx_import.h): the loss (with cross_entropy's
 * class dim), the training, the checkpoint plan, the weights file and the precision.
 */
#include "harness/model/onnx_import_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cross_entropy's class dim when --class-dim is not given (onnx_import.h). */
static int infer_class_dim(const imp *im, const ck_onnx_value *in, bool tokens)
{
    if (tokens)
        return -1;
    const ck_onnx_value *out = &im->m->outputs[0];
    if (out->ndim == 3 && in->ndim >= 2 && out->dims[0] == in->dims[0] &&
        out->dims[1] == in->dims[1] && out->dims[1] > 0)
        return -1;
    return 1;
}

static ck_status add_loss(imp *im, cJSON *root, const ck_onnx_import_opts *o,
                          const ck_onnx_value *in, bool tokens)
{
    const char *kind = o->loss ? o->loss : "mean";
    cJSON *loss = cJSON_AddObjectToObject(root, "loss");
    if (!loss || !cJSON_AddStringToObject(loss, "op", kind))
        return imp_oom(im);
    bool ce = strcmp(kind, "cross_entropy") == 0;
    if (!ce && (o->has_class_dim || o->has_ignore_index))
        return ck_fail(im->err, CK_ERR_INPUT, "--%s applies to --loss cross_entropy only",
                       o->has_class_dim ? "class-dim" : "ignore-index");
    if (!ce)
        return CK_OK;
    int cd = o->has_class_dim ? o->class_dim : infer_class_dim(im, in, tokens);
    if (!cJSON_AddNumberToObject(loss, "class_dim", cd) ||
        (o->has_ignore_index &&
         !cJSON_AddNumberToObject(loss, "ignore_index", (double)o->ignore_index)))
        return imp_oom(im);
    return CK_OK;
}

ck_status imp_add_settings(imp *im, cJSON *root, const ck_onnx_import_opts *o,
                           const ck_onnx_value *in, bool tokens)
{
    CK_TRY(add_loss(im, root, o, in, tokens));
    if (o->optimizer || o->lr > 0 || o->steps > 0) {
        cJSON *tr = cJSON_AddObjectToObject(root, "train");
        if (!tr || (o->optimizer && !cJSON_AddStringToObject(tr, "optimizer", o->optimizer)) ||
            (o->lr > 0 && !cJSON_AddNumberToObject(tr, "lr", o->lr)) ||
            (o->steps > 0 && !cJSON_AddNumberToObject(tr, "steps", o->steps)))
            return imp_oom(im);
    }
    const char *ck = o->checkpoint ? o->checkpoint : "sqrt";
    cJSON *cp = cJSON_AddObjectToObject(root, "checkpoint");
    if (!cp)
        return imp_oom(im);
    if (strcmp(ck, "sqrt") == 0) {
        if (!cJSON_AddStringToObject(cp, "policy", "sqrt"))
            return imp_oom(im);
    } else if (strncmp(ck, "every:", 6) == 0) {
        char *end = NULL;
        long k = strtol(ck + 6, &end, 10);
        if (!end || *end || k < 1 || k > CK_SIZE_CAP)
            return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint %s: expected every:K with K >= 1",
                           ck);
        if (!cJSON_AddNumberToObject(cp, "every", (double)k))
            return imp_oom(im);
    } else if (strncmp(ck, "segments:", 9) == 0) {
        cJSON *segs = cJSON_AddArrayToObject(cp, "segments");
        if (!segs)
            return imp_oom(im);
        char buf[2048];
        snprintf(buf, sizeof buf, "%s", ck + 9);
        for (char *save = NULL, *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
            char *dots = strstr(s, "..");
            if (!dots || dots == s || !dots[2])
                return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint: segment \"%s\": expected "
                               "FIRST..LAST (layer names)", s);
            *dots = '\0';
            cJSON *pair = cJSON_CreateArray();
            if (!pair || !cJSON_AddItemToArray(segs, pair) ||
                !cJSON_AddItemToArray(pair, cJSON_CreateString(s)) ||
                !cJSON_AddItemToArray(pair, cJSON_CreateString(dots + 2)))
                return imp_oom(im);
        }
    } else {
        return ck_fail(im->err, CK_ERR_INPUT, "--checkpoint %s: expected sqrt, every:K or "
                       "segments:FIRST..LAST,...", ck);
    }
    if (o->weights_path) {
        cJSON *init = cJSON_AddObjectToObject(root, "init");
        if (!init || !cJSON_AddStringToObject(init, "from", o->weights_path))
            return imp_oom(im);
    }
    if (o->precision && !cJSON_AddStringToObject(root, "precision", o->precision))
        return imp_oom(im);
    return CK_OK;
}
