/*
 * The imported model against the framework's own numbers (faithful.h): one plain fp32
 * step on the reference's input, then output, loss and gradients compared by relative L2.
 */
#include "harness/verify/faithful.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"
#include "harness/engine/executor.h"
#include "harness/model/params.h"

void ck_faithful_result_free(ck_faithful_result *r)
{
    free(r->items);
    memset(r, 0, sizeof *r);
}

static double elem_d(const ck_named_tensor *t, int64_t i)
{
    const unsigned char *d = t->data;
    switch (t->dtype) {
    case CK_FT_F32: { float x; memcpy(&x, d + 4 * i, 4); return x; }
    case CK_FT_F64: { double x; memcpy(&x, d + 8 * i, 8); return x; }
    case CK_FT_F16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_f16_to_f32(h); }
    case CK_FT_BF16: { uint16_t h; memcpy(&h, d + 2 * i, 2); return ck_bf16_to_f32(h); }
    case CK_FT_I64: { int64_t x; memcpy(&x, d + 8 * i, 8); return (double)x; }
    case CK_FT_I32: { int32_t x; memcpy(&x, d + 4 * i, 4); return x; }
    default: return NAN;
    }
}

static ck_status bad_ref(ck_error *err, const char *ref_path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ck_status bad_ref(ck_error *err, const char *ref_path, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ck_error_one_line(err, ck_fail(err, CK_ERR_INPUT, "%s: %s", ref_path, what));
}

static const ck_named_tensor *ref_tensor(const ck_tensorset *ref, const char *name)
{
    return ck_tensorset_find(ref, name);
}

/* The reference's scalar int64 count, or -1 when absent. */
static int ref_count(const ck_tensorset *ref, const char *name)
{
    const ck_named_tensor *t = ref_tensor(ref, name);
    if (!t || ck_shape_numel(&t->shape) != 1)
        return -1;
    double v = elem_d(t, 0);
    return v >= 0 && v < 1e6 ? (int)v : -1;
}

/* ‖a − b‖ and ‖b‖ over n doubles. */
static void l2(const double *a, const ck_named_tensor *b, int64_t n, double *diff, double *norm)
{
    double d = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = elem_d(b, i), e = a[i] - w;
        d += e * e;
        r += w * w;
    }
    *diff = sqrt(d);
    *norm = sqrt(r);
}

static ck_faithful_item *add_item(ck_faithful_result *res, const char *name, int64_t numel)
{
    ck_faithful_item *g = realloc(res->items, (size_t)(res->n + 1) * sizeof *g);
    if (!g)
        return NULL;
    res->items = g;
    ck_faithful_item *it = &g[res->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    it->numel = numel;
    return it;
}

/* Judges a tensor by relative L2 (or against `scale` when its own norm is below
 * CK_FAITHFUL_ZERO_GRAD of it; scale 0: never). */
static void judge(ck_faithful_item *it, double diff, double norm, double scale)
{
    if (scale > 0 && norm < CK_FAITHFUL_ZERO_GRAD * scale) {
        it->vs_step_norm = true;
        it->rel_l2 = diff / scale;
    } else {
        it->rel_l2 = norm > 0 ? diff / norm : (diff > 0 ? INFINITY : 0.0);
    }
    it->pass = it->rel_l2 <= CK_FAITHFUL_REL_L2;
}

/* ---------------------------------------------------------------------------------- */
/* Running the step                                                                    */
/* ---------------------------------------------------------------------------------- */

typedef struct {
    int last;
    double *out;
    int64_t numel;
    ck_backend *b;
} last_out;

static ck_status keep_last(void *user, const ck_exec_event_info *ev, ck_error *err)
{
    last_out *lo = user;
    if (ev->ev != CK_EVENT_FORWARD || ev->recompute || ev->layer != lo->last)
        return CK_OK;
    lo->numel = ck_shape_numel(&ev->tensor->shape);
    float *f = malloc((size_t)lo->numel * sizeof *f + 1);
    lo->out = malloc((size_t)lo->numel * sizeof *lo->out + 1);
    if (!f || !lo->out) {
        free(f);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    }
    ck_status st = lo->b->download(lo->b, ev->tensor, f, err);
    for (int64_t i = 0; st == CK_OK && i < lo->numel; i++)
        lo->out[i] = f[i];
    free(f);
    return st;
}

/* Uploads a reference tensor into a new backend tensor of dtype dt and the given shape. */
static ck_status upload_ref(ck_backend *b, const ck_named_tensor *t, ck_dtype dt,
                            const ck_shape *shape, const char *name, ck_tensor *out,
                            ck_error *err)
{
    int64_t n = ck_shape_numel(shape);
    memset(out, 0, sizeof *out);
    out->name = name;
    out->dtype = dt;
    out->shape = *shape;
    double *host = malloc((size_t)n * sizeof *host + 1);
    if (!host)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        host[i] = elem_d(t, i);
    ck_status st = b->alloc(b, (size_t)n * ck_dtype_size(dt), &out->data, err);
    if (st == CK_OK)
        st = ck_upload_f64(b, out, host, err);
    free(host);
    return st;
}

/* The reference's input and target as the step's tensors. */
static ck_status step_data(ck_backend *b, const ck_graph *g, const ck_tensorset *ref,
                           const char *ref_path, bool need_target, ck_tensor *x, ck_tensor *y,
                           ck_error *err)
{
    char s1[64], s2[64];
    const ck_named_tensor *in = ref_tensor(ref, "input");
    if (!in)
        return bad_ref(err, ref_path, "no tensor `input` (the model's input)");
    if (!ck_shape_equal(&in->shape, &g->input_shape))
        return bad_ref(err, ref_path, "`input` is %s, the model's input is %s",
                       ck_shape_str(&in->shape, s1, sizeof s1),
                       ck_shape_str(&g->input_shape, s2, sizeof s2));
    bool tokens = g->cs->input_dist == CK_DIST_TOKENS;
    if (tokens && in->dtype != CK_FT_I64 && in->dtype != CK_FT_I32)
        return bad_ref(err, ref_path, "`input` is %s; the model reads token ids (int64)",
                       ck_file_dtype_name(in->dtype));
    if (!tokens && !ck_file_dtype_is_float(in->dtype))
        return bad_ref(err, ref_path, "`input` is %s; the model reads floats",
                       ck_file_dtype_name(in->dtype));
    int64_t n = ck_shape_numel(&in->shape);
    for (int64_t i = 0; tokens && i < n; i++)
        if (!(elem_d(in, i) >= 0 && elem_d(in, i) < (double)g->cs->input_vocab))
            return bad_ref(err, ref_path, "`input` element %lld is %.0f, outside the vocabulary "
                           "[0, %lld)", (long long)i, elem_d(in, i),
                           (long long)g->cs->input_vocab);
    CK_TRY(upload_ref(b, in, tokens ? CK_I32 : CK_F32, &g->input_shape, "input", x, err));
    if (!need_target)
        return CK_OK;
    const ck_named_tensor *t = ref_tensor(ref, "target");
    bool ce = g->cs->loss == CK_LOSS_CROSS_ENTROPY;
    if (!t)
        return bad_ref(err, ref_path, "the loss (%s) needs a `target`, which the reference lacks",
                       ck_loss_kind_name(g->cs->loss));
    if (!ck_shape_equal(&t->shape, &g->target_shape))
        return bad_ref(err, ref_path, "`target` is %s, the loss's target is %s",
                       ck_shape_str(&t->shape, s1, sizeof s1),
                       ck_shape_str(&g->target_shape, s2, sizeof s2));
    return upload_ref(b, t, ce ? CK_I32 : CK_F32, &g->target_shape, "target", y, err);
}

/* One plain step with backward: the last layer's output (host doubles), the loss, and the
 * model holding the gradients. */
static ck_status run_step(ck_backend *b, const ck_graph *g, ck_model *model, ck_tensor *x,
                          ck_tensor *y, last_out *lo, double *loss, ck_error *err)
{
    CK_TRY(ck_model_create(model, b, g, CK_F32, err));
    ck_status st = ck_model_init(model, g->cs->seed, err);
    if (st == CK_OK)
        st = ck_model_zero_grads(model, err);
    if (st != CK_OK)
        return st;
    ck_exec ex;
    memset(&ex, 0, sizeof ex);
    ck_exec_config cfg = {.b = b, .g = g, .model = model, .plan = NULL, .seed = g->cs->seed,
                          .rng = g->cs->rng, .bn = g->cs->bn, .autocast = g->cs->autocast,
                          .observer = keep_last, .observer_user = lo};
    if ((st = ck_exec_create(&ex, &cfg, err)) != CK_OK)
        return st;
    st = ck_exec_step(&ex, 0, x, y->data ? y : NULL, g->cs->loss, 1.0, true, loss, err);
    ck_exec_free(&ex);
    if (st == CK_OK && !lo->out)
        st = ck_fail(err, CK_ERR_INTERNAL, "the model's output was not observed");
    return st;
}

/* ---------------------------------------------------------------------------------- */
/* Gradients                                                                           */
/* ---------------------------------------------------------------------------------- */

/* A case parameter's gradient (host doubles) with the origin it came from. */
typedef struct {
    const char *param;
    const ck_onnx_origin *origin;
    double *grad;
    ck_shape shape;
    bool used;
} case_grad;

static ck_status download_grads(ck_backend *b, const ck_graph *g, ck_model *model,
                                const ck_onnx_origins *origins, case_grad **out, int *n_out,
                                ck_error *err)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        n += g->nodes[i].n_params;
    case_grad *cg = calloc((size_t)n + 1, sizeof *cg);
    if (!cg)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    *out = cg;
    *n_out = 0;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].n_params; k++) {
            const ck_tensor *gt = &model->layers[i].grad[k];
            case_grad *c = &cg[(*n_out)++];
            char name[192];
            snprintf(name, sizeof name, "%s.%s", g->nodes[i].spec->name,
                     g->nodes[i].params[k].suffix);
            for (int j = 0; origins && j < origins->n; j++)
                if (strcmp(origins->o[j].param, name) == 0)
                    c->origin = &origins->o[j];
            c->param = c->origin ? c->origin->param : g->nodes[i].spec->name;
            c->shape = gt->shape;
            int64_t m = ck_shape_numel(&gt->shape);
            float *f = malloc((size_t)m * sizeof *f + 1);
            c->grad = malloc((size_t)m * sizeof *c->grad + 1);
            if (!f || !c->grad) {
                free(f);
                return ck_fail(err, CK_ERR_NOMEM, "out of memory");
            }
            ck_status st = b->download(b, gt, f, err);
            for (int64_t e = 0; e < m; e++)
                c->grad[e] = f[e];
            free(f);
            CK_TRY(st);
        }
    return CK_OK;
}

/* Whether the case's `source` is the reference's parameter `name`: the same name, or a name
 * the reference says is the same tensor (`tied.<source>`: the UTF-8 bytes of the name it
 * is recorded under: PyTorch names a tied weight once, by its first name, while an
 * exporter may keep another, as the dynamo exporter keeps lm_head.weight for nanoGPT's
 * wte.weight). */
static bool names_param(const ck_tensorset *ref, const char *source, const char *name)
{
    if (strcmp(source, name) == 0)
        return true;
    char key[4200]; /* names are at most 4096 bytes (the ONNX reader) */
    if ((size_t)snprintf(key, sizeof key, "tied.%s", source) >= sizeof key)
        return false;
    const ck_named_tensor *t = ck_tensorset_find(ref, key);
    size_t n = strlen(name);
    return t && t->dtype == CK_FT_U8 && t->shape.ndim == 1 && (size_t)t->shape.dim[0] == n &&
           memcmp(t->data, name, n) == 0;
}

/* The sum of every case gradient whose origin is `source`, in the reference's layout
 * (transposed back where the case holds the weight transposed); NULL when none. */
static double *sum_for(case_grad *cg, int n, const ck_tensorset *ref, const char *source,
                       int64_t numel, int *count)
{
    double *s = NULL;
    *count = 0;
    for (int i = 0; i < n; i++) {
        if (!cg[i].origin || !names_param(ref, cg[i].origin->source, source) ||
            ck_shape_numel(&cg[i].shape) != numel)
            continue;
        if (!s && !(s = calloc((size_t)numel + 1, sizeof *s)))
            return NULL;
        cg[i].used = true;
        (*count)++;
        bool tr = cg[i].origin->transposed && cg[i].shape.ndim == 2;
        int64_t r = cg[i].shape.dim[0], c = tr ? cg[i].shape.dim[1] : 0;
        for (int64_t e = 0; e < numel; e++)
            s[tr ? (e % c) * r + e / c : e] += cg[i].grad[e];
    }
    return s;
}

static ck_status judge_grads(ck_faithful_result *res, const ck_tensorset *ref, case_grad *cg,
                             int n_cg, ck_error *err)
{
    double step2 = 0;
    for (int i = 0; i < ref->n; i++)
        if (strncmp(ref->t[i].name, "grad.", 5) == 0) {
            res->has_grads = true;
            for (int64_t e = 0; e < ck_shape_numel(&ref->t[i].shape); e++)
                step2 += elem_d(&ref->t[i], e) * elem_d(&ref->t[i], e);
        }
    for (int i = 0; i < ref->n; i++) {
        const ck_named_tensor *t = &ref->t[i];
        if (strncmp(t->name, "grad.", 5) != 0)
            continue;
        int64_t numel = ck_shape_numel(&t->shape);
        int count = 0;
        double *s = sum_for(cg, n_cg, ref, t->name + 5, numel, &count);
        if (!s) {
            if (count)
                return ck_fail(err, CK_ERR_NOMEM, "out of memory");
            if (res->n_grads_missing++ == 0)
                snprintf(res->first_missing, sizeof res->first_missing, "%s", t->name + 5);
            continue;
        }
        ck_faithful_item *it = add_item(res, t->name, numel);
        if (!it) {
            free(s);
            return ck_fail(err, CK_ERR_NOMEM, "out of memory");
        }
        double diff, norm;
        l2(s, t, numel, &diff, &norm);
        free(s);
        it->n_params = count;
        judge(it, diff, norm, sqrt(step2));
    }
    for (int i = 0; res->has_grads && i < n_cg; i++)
        res->n_params_unmatched += !cg[i].used;
    return CK_OK;
}

/* ---------------------------------------------------------------------------------- */
/* The verdict                                                                         */
/* ---------------------------------------------------------------------------------- */

static void verdict(ck_faithful_result *res)
{
    res->pass = false;
    const ck_faithful_item *worst = NULL;
    for (int i = 0; i < res->n; i++)
        if (!res->items[i].pass && (!worst || res->items[i].rel_l2 > worst->rel_l2))
            worst = &res->items[i];
    if (res->ref_batchnorm > res->case_batchnorm) {
        snprintf(res->why, sizeof res->why, "the framework's model has %d BatchNorm modules, the "
                 "imported graph %d batchnorm layers: the exporter folded BatchNorm into the "
                 "convolutions (export with the TorchScript exporter, dynamo=False, "
                 "training=TrainingMode.TRAINING, do_constant_folding=False)", res->ref_batchnorm,
                 res->case_batchnorm);
    } else if (res->ref_dropout > res->case_dropout) {
        snprintf(res->why, sizeof res->why, "the framework's model has %d Dropout modules with "
                 "p > 0, the imported graph %d dropout layers: the exporter removed them (export "
                 "in training mode)", res->ref_dropout, res->case_dropout);
    } else if (res->n_grads_missing) {
        snprintf(res->why, sizeof res->why, "the reference has %d gradients of parameters the "
                 "imported model does not have (first: %s): the exporter dropped or renamed "
                 "them (BatchNorm folded into the convolutions, or weights stored under new "
                 "names, as torch's dynamo exporter does for transposed weights)",
                 res->n_grads_missing, res->first_missing);
    } else if (worst) {
        snprintf(res->why, sizeof res->why, "%s differs from the framework's: relative L2 %.3g "
                 "> %g%s", worst->name, worst->rel_l2, CK_FAITHFUL_REL_L2,
                 res->case_batchnorm == 0 && res->has_eval && res->train_eval_rel_l2 > 0
                     ? " (the graph has no BatchNormalization: folded by the exporter?)"
                     : "");
    } else if (res->has_eval && res->train_eval_rel_l2 > CK_FAITHFUL_REL_L2 &&
               res->case_batchnorm == 0 && res->case_dropout == 0) {
        snprintf(res->why, sizeof res->why, "the reference's train-mode and eval-mode outputs "
                 "differ (relative L2 %.3g), so the framework's model behaves differently in "
                 "training, but the imported graph has no BatchNormalization or Dropout: the "
                 "exporter folded or removed them", res->train_eval_rel_l2);
    } else {
        res->pass = true;
        res->why[0] = '\0';
    }
}

ck_status ck_faithful_check(ck_backend *b, const ck_graph *g, const ck_onnx_origins *origins,
                            const ck_tensorset *ref, const char *ref_path, int case_batchnorm,
                            int case_dropout, ck_faithful_result *res, ck_error *err)
{
    memset(res, 0, sizeof *res);
    res->case_batchnorm = case_batchnorm;
    res->case_dropout = case_dropout;
    res->ref_batchnorm = ref_count(ref, "count.batchnorm");
    res->ref_dropout = ref_count(ref, "count.dropout");
    char s1[64], s2[64];
    const ck_named_tensor *want = ref_tensor(ref, "output");
    if (!want)
        return bad_ref(err, ref_path, "no tensor `output` (the framework's train-mode output)");
    if (!ck_shape_equal(&want->shape, &g->output_shape))
        return bad_ref(err, ref_path, "`output` is %s, the imported model's output is %s",
                       ck_shape_str(&want->shape, s1, sizeof s1),
                       ck_shape_str(&g->output_shape, s2, sizeof s2));
    const ck_named_tensor *want_loss = ref_tensor(ref, "loss");
    bool has_grads = false;
    for (int i = 0; i < ref->n; i++)
        has_grads = has_grads || strncmp(ref->t[i].name, "grad.", 5) == 0;
    bool need_target = (want_loss || has_grads) && (g->cs->loss == CK_LOSS_MSE ||
                                                    g->cs->loss == CK_LOSS_CROSS_ENTROPY);
    ck_tensor x, y;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    ck_model model;
    memset(&model, 0, sizeof model);
    last_out lo = {.last = g->n - 1, .b = b};
    case_grad *cg = NULL;
    int n_cg = 0;
    double loss = 0;
    ck_status st = step_data(b, g, ref, ref_path, need_target, &x, &y, err);
    if (st == CK_OK)
        st = run_step(b, g, &model, &x, &y, &lo, &loss, err);
    if (st == CK_OK) {
        int64_t n = ck_shape_numel(&want->shape);
        double diff, norm;
        ck_faithful_item *it = add_item(res, "output", n);
        if (!it) {
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
            goto out;
        }
        l2(lo.out, want, n, &diff, &norm);
        judge(it, diff, norm, 0);
        const ck_named_tensor *ev = ref_tensor(ref, "output_eval");
        if (ev && ck_shape_equal(&ev->shape, &want->shape)) {
            double *w = malloc((size_t)n * sizeof *w + 1);
            if (!w) {
                st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
                goto out;
            }
            for (int64_t i = 0; i < n; i++)
                w[i] = elem_d(want, i);
            l2(w, ev, n, &diff, &norm);
            free(w);
            res->has_eval = true;
            res->train_eval_rel_l2 = norm > 0 ? diff / norm : diff;
        }
    }
    if (st == CK_OK && want_loss && ck_shape_numel(&want_loss->shape) == 1) {
        ck_faithful_item *it = add_item(res, "loss", 1);
        if (!it) {
            st = ck_fail(err, CK_ERR_NOMEM, "out of memory");
            goto out;
        }
        double diff, norm;
        l2(&loss, want_loss, 1, &diff, &norm);
        judge(it, diff, norm, 0);
        res->has_loss = true;
    }
    if (st == CK_OK && has_grads &&
        (st = download_grads(b, g, &model, origins, &cg, &n_cg, err)) == CK_OK)
        st = judge_grads(res, ref, cg, n_cg, err);
    if (st == CK_OK)
        verdict(res);
out:
    for (int i = 0; i < n_cg; i++)
        free(cg[i].grad);
    free(cg);
    free(lo.out);
    if (x.data)
        b->free(b, x.data);
    if (y.data)
        b->free(b, y.data);
    if (model.layers)
        ck_model_free(&model);
    if (st != CK_OK)
        ck_faithful_result_free(res);
    return st;
}
