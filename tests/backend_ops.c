/* The op table and its runner (backend_ops.h). */
#include "tests/backend_ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/algo_pin.h"
#include "backends/registry.h"
#include "harness/core/calibration.h"
#include "harness/core/half.h"
#include "harness/core/rng.h"
#include "harness/model/graph.h"
#include "harness/model/params.h"
#include "harness/verify/gradcheck.h"

#define BO_SHAPE(...)                                                                      \
    ((ck_shape){.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
                .dim = {__VA_ARGS__}})

// ----------------------------------------------------------------------------
// results

static void result(bo_ctx *c, int status, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    static const char *const word[] = {"PASS", "FAIL", "SKIP"};
    if (status == 0)
        c->pass++;
    else if (status == 1)
        c->fail++;
    else
        c->skip++;
    if (status == 1 && !c->first_failure[0])
        snprintf(c->first_failure, sizeof c->first_failure, "%s [%s]", line, c->b->name);
    if (c->out && (status != 0 || c->print_passes))
        fprintf(c->out, "%s  %s\n", word[status], line);
}

void bo_ctx_init(bo_ctx *c, ck_backend *ref, ck_backend *b, FILE *out)
{
    memset(c, 0, sizeof *c);
    c->ref = ref;
    c->b = b;
    c->out = out;
    c->cpu_tolerances = strcmp(b->name, "cpu") == 0 || strcmp(b->name, "cpu-as-cuda") == 0;
}

// ----------------------------------------------------------------------------
// host values

/* n doubles drawn from a test stream (bo_vals), each rounded to dt so that a wider copy
 * holds the same values */
static double *draw(int64_t n, uint64_t seed, bo_vals kind, ck_dtype dt)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 0);
    for (int64_t i = 0; i < n; i++) {
        switch (kind) {
        case BO_VALS_TIES: v[i] = (double)((int)ck_rng_below(&s, (uint64_t)i, 9) - 4) / 4.0; break;
        case BO_VALS_POSITIVE: v[i] = 0.5 + ck_rng_uniform_f64(&s, (uint64_t)i); break;
        case BO_VALS_UNIT: v[i] = 2.0 * ck_rng_uniform_f64(&s, (uint64_t)i) - 1.0; break;
        case BO_VALS_ZERO: v[i] = 0.0; break;
        default: v[i] = ck_rng_normal_f64(&s, (uint64_t)i); break;
        }
        if (dt == CK_F32)
            v[i] = (double)(float)v[i];
        else if (dt == CK_F16 || dt == CK_BF16)
            v[i] = ck_round_to_dtype(v[i], dt);
    }
    return v;
}

static double elem(ck_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case CK_F32: return ((const float *)p)[i];
    case CK_F64: return ((const double *)p)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)p)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)p)[i]);
    case CK_I32: return ((const int32_t *)p)[i];
    case CK_I64: return (double)((const int64_t *)p)[i];
    default: return 0.0;
    }
}

// ----------------------------------------------------------------------------
// a tensor on both backends (each in its own dtype, the same values)

typedef struct {
    char name[96];
    ck_tensor r, t; /* on ref, on the backend under test */
    ck_backend *rb, *tb;
    bool live;
} pair;

static bool pair_make(bo_ctx *c, pair *p, const char *name, ck_dtype rdt, ck_dtype tdt,
                      ck_shape s, const double *vals)
{
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rb = c->ref;
    p->tb = c->b;
    p->r = (ck_tensor){p->name, rdt, s, NULL};
    p->t = (ck_tensor){p->name, tdt, s, NULL};
    const int64_t n = ck_shape_numel(&s);
    ck_tensor *both[2] = {&p->r, &p->t};
    ck_backend *be[2] = {c->ref, c->b};
    bool ok = true;
    ck_error err = {{0}};
    for (int k = 0; k < 2 && ok; k++) {
        const size_t bytes = (size_t)n * ck_dtype_size(both[k]->dtype);
        void *host = calloc(1, bytes ? bytes : 1);
        ok = host != NULL;
        if (ok && vals)
            ck_convert_from_f64(both[k]->dtype, host, vals, n);
        if (ok && (be[k]->alloc(be[k], bytes, &both[k]->data, &err) != CK_OK ||
                   be[k]->upload(be[k], both[k], host, &err) != CK_OK)) {
            result(c, 1, "%s: %s", name, err.msg);
            ok = false;
        }
        free(host);
    }
    p->live = ok;
    return ok;
}

static void pair_free(pair *p)
{
    if (p->r.data)
        p->rb->free(p->rb, p->r.data);
    if (p->t.data)
        p->tb->free(p->tb, p->t.data);
    memset(p, 0, sizeof *p);
}

static void *fetch(ck_backend *b, const ck_tensor *t)
{
    size_t bytes = ck_tensor_bytes(t);
    void *host = malloc(bytes ? bytes : 1);
    ck_error err = {{0}};
    if (host && b->download(b, t, host, &err) != CK_OK) {
        free(host);
        return NULL;
    }
    return host;
}

// ----------------------------------------------------------------------------
// comparisons

bo_tolerance bo_tolerance_for(bo_class cl, ck_dtype dt, bool cpu)
{
    bo_tolerance t = {0.0, 0.0, cl == BO_EXACT};
    const bool lib = cl == BO_LIB;
    switch (dt) {
    case CK_F64: t.rtol = t.atol_frac = lib ? 1e-10 : 1e-14; break;
    case CK_F32: t.rtol = t.atol_frac = lib ? (cpu ? 1e-5 : 1e-4) : 1e-6; break;
    case CK_F16:
        t.rtol = lib ? (cpu ? 2e-3 : 4e-3) : 1e-3;
        t.atol_frac = lib ? (cpu ? 1e-3 : 4e-3) : 1e-3;
        break;
    case CK_BF16:
        t.rtol = lib ? (cpu ? 1.6e-2 : 3e-2) : 8e-3;
        t.atol_frac = lib ? (cpu ? 1e-3 : 3e-2) : 8e-3;
        break;
    default: break;
    }
    return t;
}

static const char *class_name(bo_class cl)
{
    return cl == BO_EXACT ? "exact" : cl == BO_TRANS ? "trans" : "lib";
}

/* The tested tensor of p against ref's, same dtype, within the class. */
static void compare_class(bo_ctx *c, const char *what, const pair *p, bo_class cl)
{
    const ck_dtype dt = p->t.dtype;
    const int64_t n = ck_shape_numel(&p->t.shape);
    const size_t es = ck_dtype_size(dt);
    unsigned char *a = fetch(c->b, &p->t), *b = fetch(c->ref, &p->r);
    if (!a || !b) {
        result(c, 1, "%s: download failed", what);
        free(a);
        free(b);
        return;
    }
    const bo_tolerance tol = bo_tolerance_for(cl, dt, c->cpu_tolerances);
    double maxref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = fabs(elem(dt, b, i));
        if (isfinite(v) && v > maxref)
            maxref = v;
    }
    int64_t same = 0, bad = 0, worst = -1;
    double worst_err = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(a + i * es, b + i * es, es) == 0) {
            same++;
            continue;
        }
        double x = elem(dt, a, i), y = elem(dt, b, i);
        double e = fabs(x - y);
        bool ok = !tol.bitwise && (isnan(x) == isnan(y)) &&
                  (isnan(x) || x == y || e <= tol.rtol * fabs(y) + tol.atol_frac * maxref);
        if (isnan(x) != isnan(y))
            e = INFINITY;
        bad += !ok;
        if (e >= worst_err) {
            worst_err = e;
            worst = i;
        }
    }
    if (bad)
        result(c, 1, "%-60s %-5s %-5s n=%lld: %lld outside (worst at %lld: %.9g vs ref %.9g)",
               what, ck_dtype_name(dt), class_name(cl), (long long)n, (long long)bad,
               (long long)worst, elem(dt, a, worst), elem(dt, b, worst));
    else
        result(c, 0, "%-60s %-5s %-5s n=%lld bitwise %.1f%% max|err| %.3g (max|ref| %.3g)", what,
               ck_dtype_name(dt), class_name(cl), (long long)n,
               n ? 100.0 * (double)same / (double)n : 100.0, worst_err, maxref);
    free(a);
    free(b);
}

/* ordered position of a 16-bit float pattern (fp16 and bf16 both keep the sign on top) */
static int32_t order16(uint16_t bits)
{
    return bits & 0x8000u ? -(int32_t)(bits & 0x7FFFu) : (int32_t)bits;
}

/* The low-precision rule: the tested low-dtype tensor within one unit of the last place
 * of ref's float64 result rounded once, or, where that result cancels, within the row's
 * fp32 class tolerance of it (an fp32 accumulator's own error, which an fp32 run has
 * too). Returns the number of elements outside. */
static int64_t lowp_outside(bo_ctx *c, const pair *p, bo_class cl, int64_t *n_out,
                            int32_t *worst_ulps)
{
    const ck_dtype dt = p->t.dtype;
    const int64_t n = ck_shape_numel(&p->t.shape);
    const bo_tolerance tol = bo_tolerance_for(cl, CK_F32, c->cpu_tolerances);
    uint16_t *a = fetch(c->b, &p->t);
    double *r = fetch(c->ref, &p->r);
    double maxref = 0.0;
    for (int64_t i = 0; r && i < n; i++)
        if (isfinite(r[i]) && fabs(r[i]) > maxref)
            maxref = fabs(r[i]);
    int64_t bad = 0;
    *worst_ulps = 0;
    for (int64_t i = 0; a && r && i < n; i++) {
        uint16_t want;
        ck_convert_from_f64(dt, &want, &r[i], 1);
        const double x = elem(dt, a, i), y = elem(dt, &want, 0);
        if (isnan(x) || isnan(y)) {
            bad += isnan(x) != isnan(y);
            continue;
        }
        int32_t d = abs(order16(a[i]) - order16(want));
        if (d > *worst_ulps)
            *worst_ulps = d;
        const bool fp32_close = !tol.bitwise &&
                                fabs(x - r[i]) <= tol.rtol * fabs(r[i]) + tol.atol_frac * maxref;
        bad += d > 1 && !fp32_close;
    }
    if (!a || !r)
        bad = n ? n : 1;
    free(a);
    free(r);
    *n_out = n;
    return bad;
}

// ----------------------------------------------------------------------------
// the record ledger: the key the CUDA backend files an algorithm choice under

static void ledger_note(bo_ctx *c, const char *weight_name, ck_dtype dt, const char *owner)
{
    char layer[64];
    ck_cuda_layer_name(weight_name, layer, sizeof layer);
    bo_ledger *l = &c->ledger;
    for (int i = 0; i < l->n; i++) {
        if (l->e[i].dtype != dt || strcmp(l->e[i].layer, layer) != 0)
            continue;
        if (strcmp(l->e[i].owner, owner) != 0)
            result(c, 1, "record key (%s, %s) of \"%s\" is also \"%s\"'s: the CUDA backend "
                         "would pin one algorithm for both shapes",
                   layer, ck_dtype_name(dt), owner, l->e[i].owner);
        return;
    }
    if (l->n < BO_LEDGER_MAX) {
        snprintf(l->e[l->n].layer, sizeof l->e[l->n].layer, "%s", layer);
        l->e[l->n].dtype = dt;
        snprintf(l->e[l->n].owner, sizeof l->e[l->n].owner, "%s", owner);
        l->n++;
    }
}

// ----------------------------------------------------------------------------
// one row, forward and backward, on both backends

bo_dtypes bo_dtypes_of(ck_dtype dt)
{
    ck_dtype wide = dt == CK_F64 ? CK_F64 : CK_F32;
    return (bo_dtypes){dt, dt, dt, dt, dt, wide};
}

static bool is_norm(ck_op_kind k)
{
    return k == CK_OP_BATCHNORM || k == CK_OP_LAYERNORM || k == CK_OP_RMSNORM ||
           k == CK_OP_GROUPNORM;
}

static bool node_of(bo_ctx *c, const bo_row *r, ck_node *node)
{
    ck_error err = {{0}};
    memset(node, 0, sizeof *node);
    node->op = r->op;
    node->n_in = r->n_in;
    if (ck_op_infer(&node->op, r->n_in, r->in, &node->out_shape, &err) != CK_OK) {
        result(c, 1, "%s: %s", r->desc, err.msg);
        return false;
    }
    ck_op_state_specs(node, &r->in[0]);
    return true;
}

/* Every tensor of one call, on both backends. */
typedef struct {
    pair in[3], out, w, b, rm, rv, nbt, saved, dout, din[3], dw, db, cst;
    ck_op_io io_r, io_t;
    ck_op_grads g_r, g_t;
    ck_fwd_args args;
} call;

static pair *call_pairs(call *k, int *n)
{
    *n = (int)(sizeof k->in / sizeof k->in[0]) * 2 + 11;
    return k->in; /* the pairs are contiguous at the head of the struct */
}

static void call_free(call *k)
{
    int n;
    pair *p = call_pairs(k, &n);
    for (int i = 0; i < n; i++)
        pair_free(&p[i]);
}

/* The op's inputs, parameters, buffers and saved scratch; dr: ref's dtypes, dt: the tested
 * backend's (the values are rounded to dt's). */
static bool call_inputs(bo_ctx *c, const bo_row *r, const ck_node *nd, bo_dtypes dr,
                        bo_dtypes dt, const char *prefix, uint64_t seed, call *k)
{
    const bool norm = is_norm(nd->op.kind);
    char name[128];
    bool ok = true;
    k->io_r.n_in = k->io_t.n_in = r->n_in;
    /* an embedding reads i32 token ids in [0, vocab) */
    const bool ids = nd->op.kind == CK_OP_EMBEDDING;
    for (int i = 0; i < r->n_in && ok; i++) {
        const int src = r->alias ? 0 : i;
        if (src == i) {
            const int64_t n = ck_shape_numel(&r->in[i]);
            double *v = draw(n, seed + 10 + (uint64_t)i, r->vals, dt.in);
            ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 1);
            for (int64_t e = 0; ids && v && e < n; e++)
                v[e] = (double)ck_rng_below(&s, (uint64_t)e, (uint32_t)nd->op.vocab);
            snprintf(name, sizeof name, "%s.in%d", prefix, i);
            ok = v && pair_make(c, &k->in[i], name, ids ? CK_I32 : dr.in, ids ? CK_I32 : dt.in,
                                r->in[i], v);
            free(v);
        }
        k->io_r.in[i] = &k->in[src].r;
        k->io_t.in[i] = &k->in[src].t;
    }
    snprintf(name, sizeof name, "%s.out", prefix);
    ok = ok && pair_make(c, &k->out, name, dr.out, dt.out, nd->out_shape, NULL);
    k->io_r.out = &k->out.r;
    k->io_t.out = &k->out.t;
    for (int p = 0; p < nd->n_params && ok; p++) {
        const ck_param_spec *ps = &nd->params[p];
        const bool is_bias = strcmp(ps->suffix, "bias") == 0;
        const ck_dtype pr = norm ? dr.wide : dr.param, pt = norm ? dt.wide : dt.param;
        double *v = draw(ck_shape_numel(&ps->shape), seed + 20 + (uint64_t)p,
                         norm && !is_bias ? BO_VALS_POSITIVE : BO_VALS_UNIT, pt);
        pair *dst = is_bias ? &k->b : &k->w;
        snprintf(name, sizeof name, "%s.%s", prefix, ps->suffix);
        ok = v && pair_make(c, dst, name, pr, pt, ps->shape, v);
        free(v);
        *(is_bias ? &k->io_r.bias : &k->io_r.weight) = &dst->r;
        *(is_bias ? &k->io_t.bias : &k->io_t.weight) = &dst->t;
    }
    for (int i = 0; i < nd->n_buffers && ok; i++) {
        const ck_param_spec *bs = &nd->buffers[i];
        snprintf(name, sizeof name, "%s.%s", prefix, bs->suffix);
        if (strcmp(bs->suffix, "num_batches_tracked") == 0) {
            const double three = 3.0;
            ok = pair_make(c, &k->nbt, name, CK_I64, CK_I64, bs->shape, &three);
            k->io_r.num_batches_tracked = &k->nbt.r;
            k->io_t.num_batches_tracked = &k->nbt.t;
            continue;
        }
        if (strcmp(bs->suffix, "constant") == 0 || strcmp(bs->suffix, "mask") == 0) {
            /* the broadcast family's constant operand: positive values (a divisor), or a
             * mask of 0 and 1 */
            const bool is_mask = bs->suffix[0] == 'm';
            const int64_t n = ck_shape_numel(&bs->shape);
            double *v = draw(n, seed + 35, is_mask ? BO_VALS_TIES : BO_VALS_POSITIVE, dt.wide);
            for (int64_t e = 0; is_mask && v && e < n; e++)
                v[e] = v[e] > 0.0 ? 1.0 : 0.0;
            ok = v && pair_make(c, &k->cst, name, dr.wide, dt.wide, bs->shape, v);
            free(v);
            k->io_r.constant = &k->cst.r;
            k->io_t.constant = &k->cst.t;
            continue;
        }
        const bool var = strcmp(bs->suffix, "running_var") == 0;
        double *v = draw(ck_shape_numel(&bs->shape), seed + 30 + (uint64_t)i,
                         var ? BO_VALS_POSITIVE : BO_VALS_UNIT, dt.wide);
        pair *dst = var ? &k->rv : &k->rm;
        ok = v && pair_make(c, dst, name, dr.wide, dt.wide, bs->shape, v);
        free(v);
        *(var ? &k->io_r.running_var : &k->io_r.running_mean) = &dst->r;
        *(var ? &k->io_t.running_var : &k->io_t.running_mean) = &dst->t;
    }
    if (ok && nd->has_saved) {
        snprintf(name, sizeof name, "%s.saved", prefix);
        ok = pair_make(c, &k->saved, name, dr.wide, dt.wide, nd->saved_shape, NULL);
        k->io_r.saved = &k->saved.r;
        k->io_t.saved = &k->saved.t;
    }
    memset(&k->args, 0, sizeof k->args);
    k->args.update_running_stats = !nd->op.eval;
    k->args.rng = ck_rng_keyed(seed, 3, nd->op.kind == CK_OP_DROPOUT ? CK_PURPOSE_DROPOUT
                                                                     : CK_PURPOSE_NOISE, 1);
    k->args.rng.offset = r->rng_offset;
    return ok;
}

/* The gradients, starting from random values so accumulation is checked too. */
static bool call_grads(bo_ctx *c, const bo_row *r, const ck_node *nd, bo_dtypes dr,
                       bo_dtypes dt, const char *prefix, uint64_t seed, call *k)
{
    const bool norm = is_norm(nd->op.kind);
    char name[128];
    snprintf(name, sizeof name, "%s.dout", prefix);
    double *v = draw(ck_shape_numel(&nd->out_shape), seed + 40, BO_VALS_NORMAL, dt.dout);
    bool ok = v && pair_make(c, &k->dout, name, dr.dout, dt.dout, nd->out_shape, v);
    free(v);
    k->g_r.dout = &k->dout.r;
    k->g_t.dout = &k->dout.t;
    for (int i = 0; i < r->n_in && ok && nd->op.kind != CK_OP_EMBEDDING; i++) {
        if (r->alias && i > 0) {
            k->g_r.din[i] = &k->din[0].r;
            k->g_t.din[i] = &k->din[0].t;
            continue;
        }
        v = draw(ck_shape_numel(&r->in[i]), seed + 50 + (uint64_t)i, BO_VALS_NORMAL, dt.din);
        snprintf(name, sizeof name, "%s.din%d", prefix, i);
        ok = v && pair_make(c, &k->din[i], name, dr.din, dt.din, r->in[i], v);
        free(v);
        k->g_r.din[i] = &k->din[i].r;
        k->g_t.din[i] = &k->din[i].t;
    }
    const ck_dtype pr = norm ? dr.wide : dr.param, pt = norm ? dt.wide : dt.param;
    if (ok && k->w.live) {
        v = draw(ck_shape_numel(&k->w.t.shape), seed + 60, BO_VALS_NORMAL, pt);
        snprintf(name, sizeof name, "%s.dweight", prefix);
        ok = v && pair_make(c, &k->dw, name, pr, pt, k->w.t.shape, v);
        free(v);
        k->g_r.dweight = &k->dw.r;
        k->g_t.dweight = &k->dw.t;
    }
    if (ok && k->b.live) {
        v = draw(ck_shape_numel(&k->b.t.shape), seed + 61, BO_VALS_NORMAL, pt);
        snprintf(name, sizeof name, "%s.dbias", prefix);
        ok = v && pair_make(c, &k->db, name, pr, pt, k->b.t.shape, v);
        free(v);
        k->g_r.dbias = &k->db.r;
        k->g_t.dbias = &k->db.t;
    }
    return ok;
}

static bool call_run(bo_ctx *c, const bo_row *r, const ck_node *nd, call *k, bool backward)
{
    ck_error err = {{0}};
    ck_backend *be[2] = {c->ref, c->b};
    for (int s = 0; s < 2; s++) {
        ck_status st = backward ? be[s]->backward(be[s], &nd->op, &k->args, s ? &k->io_t : &k->io_r,
                                                  s ? &k->g_t : &k->g_r, &err)
                                : be[s]->forward(be[s], &nd->op, &k->args, s ? &k->io_t : &k->io_r,
                                                 &err);
        if (st != CK_OK) {
            result(c, 1, "%s %s on %s: %s", r->desc, backward ? "backward" : "forward",
                   be[s]->name, err.msg);
            return false;
        }
    }
    return true;
}

/* Whether the tested backend runs this row in dtype dt; a SKIP line when not. */
static bool supported(bo_ctx *c, const bo_row *r, const char *variant, ck_dtype dt)
{
    if (c->b->supports(c->b, &r->op, dt))
        return true;
    result(c, 2, "%s [%s]: the %s backend does not run it (supports)", r->desc, variant,
           c->b->name);
    return false;
}

void bo_run_variant(bo_ctx *c, int index, bo_dtypes d, const char *variant, int cls)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    if (!supported(c, r, variant, d.out) || !node_of(c, r, &nd))
        return;
    char prefix[48], what[192];
    snprintf(prefix, sizeof prefix, "op%02d.%s", index, variant);
    call k;
    memset(&k, 0, sizeof k);
    const uint64_t seed = 1000 + 97 * (uint64_t)index;
    const bo_class fwd = cls >= 0 ? (bo_class)cls : r->fwd, bwd = cls >= 0 ? (bo_class)cls : r->bwd;
    if (call_inputs(c, r, &nd, d, d, prefix, seed, &k) && call_run(c, r, &nd, &k, false)) {
        if (k.w.live) {
            char owner[128];
            snprintf(owner, sizeof owner, "%s [%s]", r->desc, variant);
            ledger_note(c, k.w.t.name, d.out, owner);
        }
        snprintf(what, sizeof what, "%s [%s] forward out", r->desc, variant);
        compare_class(c, what, &k.out, fwd);
        if (k.saved.live) {
            snprintf(what, sizeof what, "%s [%s] forward saved", r->desc, variant);
            compare_class(c, what, &k.saved, BO_TRANS);
        }
        if (k.rm.live) {
            snprintf(what, sizeof what, "%s [%s] running_mean", r->desc, variant);
            compare_class(c, what, &k.rm, BO_TRANS);
            snprintf(what, sizeof what, "%s [%s] running_var", r->desc, variant);
            compare_class(c, what, &k.rv, BO_TRANS);
        }
        if (k.nbt.live) {
            snprintf(what, sizeof what, "%s [%s] num_batches_tracked", r->desc, variant);
            compare_class(c, what, &k.nbt, BO_EXACT);
        }
        if (call_grads(c, r, &nd, d, d, prefix, seed, &k) && call_run(c, r, &nd, &k, true)) {
            for (int i = 0; i < r->n_in; i++) {
                if (!k.din[i].live)
                    continue;
                snprintf(what, sizeof what, "%s [%s] backward din%d", r->desc, variant, i);
                compare_class(c, what, &k.din[i], bwd);
            }
            if (k.dw.live) {
                snprintf(what, sizeof what, "%s [%s] backward dweight", r->desc, variant);
                compare_class(c, what, &k.dw, bwd);
            }
            if (k.db.live) {
                snprintf(what, sizeof what, "%s [%s] backward dbias", r->desc, variant);
                compare_class(c, what, &k.db, is_norm(nd.op.kind) ? bwd : BO_TRANS);
            }
        }
    }
    call_free(&k);
}

/* The low-precision rule for one row in dtype low: the tested backend in low, ref in
 * float64 on the same values. */
static void run_lowp_rule(bo_ctx *c, int index, ck_dtype low)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    const char *variant = ck_dtype_name(low);
    if (!supported(c, r, variant, low) || !node_of(c, r, &nd))
        return;
    char prefix[48];
    snprintf(prefix, sizeof prefix, "op%02d.rule-%s", index, variant);
    call k;
    memset(&k, 0, sizeof k);
    const uint64_t seed = 1000 + 97 * (uint64_t)index;
    const bo_dtypes dt = bo_dtypes_of(low), dr = bo_dtypes_of(CK_F64);
    /* the reduction canary keeps its low-precision sums on ref too */
    int64_t outside = 0, total = 0;
    int32_t worst = 0;
    if (call_inputs(c, r, &nd, dr, dt, prefix, seed, &k) && call_run(c, r, &nd, &k, false) &&
        call_grads(c, r, &nd, dr, dt, prefix, seed, &k) && call_run(c, r, &nd, &k, true)) {
        /* (one tensor feeding every input gets one rounding per input: not once) */
        pair *low_outputs[] = {&k.out, r->alias ? NULL : &k.din[0], &k.din[1], &k.din[2],
                               is_norm(nd.op.kind) ? NULL : &k.dw,
                               is_norm(nd.op.kind) ? NULL : &k.db};
        const bo_class cls[] = {r->fwd, r->bwd, r->bwd, r->bwd, r->bwd, r->bwd};
        for (size_t i = 0; i < sizeof low_outputs / sizeof low_outputs[0]; i++) {
            if (!low_outputs[i] || !low_outputs[i]->live || low_outputs[i]->t.dtype != low)
                continue;
            int64_t m;
            int32_t w;
            outside += lowp_outside(c, low_outputs[i], cls[i], &m, &w);
            total += m;
            worst = w > worst ? w : worst;
        }
        const bool want_break = r->breaks_lowp_rule;
        if ((outside > 0) == want_break)
            result(c, 0, "%-60s %-5s rounded once: %lld of %lld outside 1 ulp (worst %d ulp)%s",
                   r->desc, variant, (long long)outside, (long long)total, (int)worst,
                   want_break ? ", caught as it must be" : "");
        else
            result(c, 1, "%-60s %-5s %s: %lld of %lld elements more than 1 ulp from ref's "
                         "float64 result rounded once (worst %d ulp)",
                   r->desc, variant, want_break ? "the low-precision reduction went unnoticed"
                                                : "not computed wide and rounded once",
                   (long long)outside, (long long)total, (int)worst);
    }
    call_free(&k);
}

/* A rounding (a cast to or from float16/bfloat16): finite differences measure nothing
 * (gradcheck.h, ck_gradcheck_not_smooth); the row's forward and backward are still compared
 * with ref's in every dtype, and the rounding against exact values and PyTorch's in
 * tests/test_ops_unary.c and tests/test_torch_fixtures.c. */
static bool not_smooth(bo_ctx *c, const bo_row *r, const ck_node *nd, const char *variant)
{
    const char *why = ck_gradcheck_not_smooth(nd);
    if (why)
        result(c, 2, "%s [%s]: not checkable by finite differences: %s", r->desc, variant, why);
    return why != NULL;
}

/* The fp32 backward of the tested backend against float64 central differences of ref's
 * forward (L = sum(y * dout)), on up to 24 elements of every input and parameter. */
static void run_fp32_gradcheck(bo_ctx *c, int index)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    if (r->alias || !supported(c, r, "fp32 gradcheck", CK_F32) || !node_of(c, r, &nd) ||
        not_smooth(c, r, &nd, "fp32 gradcheck"))
        return;
    bo_row normal = *r;
    normal.vals = BO_VALS_NORMAL; /* no ties: every element has a derivative */
    char prefix[48];
    snprintf(prefix, sizeof prefix, "op%02d.grad32", index);
    call k;
    memset(&k, 0, sizeof k);
    const uint64_t seed = 3000 + 97 * (uint64_t)index;
    const bo_dtypes d64 = bo_dtypes_of(CK_F64), d32 = bo_dtypes_of(CK_F32);
    if (!call_inputs(c, &normal, &nd, d64, d32, prefix, seed, &k)) {
        call_free(&k);
        return;
    }
    k.args.update_running_stats = false;
    ck_error err = {{0}};
    bool ok = c->b->forward(c->b, &nd.op, &k.args, &k.io_t, &err) == CK_OK &&
              call_grads(c, &normal, &nd, d64, d32, prefix, seed, &k);
    /* analytic gradients from zero */
    pair *grads[] = {&k.din[0], &k.din[1], &k.din[2], &k.dw, &k.db};
    for (size_t i = 0; ok && i < sizeof grads / sizeof grads[0]; i++)
        if (grads[i]->live)
            ok = c->b->zero(c->b, &grads[i]->t, &err) == CK_OK;
    ok = ok && c->b->backward(c->b, &nd.op, &k.args, &k.io_t, &k.g_t, &err) == CK_OK;
    if (!ok) {
        result(c, 1, "%s fp32 gradcheck on %s: %s", r->desc, c->b->name, err.msg);
        call_free(&k);
        return;
    }
    const int64_t ny = ck_shape_numel(&nd.out_shape);
    const double *dy = k.dout.r.data;
    pair *targets[] = {&k.in[0], &k.in[1], &k.in[2], &k.w, &k.b};
    int64_t checked = 0, bad = 0;
    double worst = 0.0;
    char worst_text[256] = "";
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        if (!targets[t]->live || !grads[t]->live)
            continue;
        float *an = fetch(c->b, &grads[t]->t);
        const int64_t numel = ck_shape_numel(&targets[t]->r.shape);
        for (int64_t s = 0; an && s < 24 && s < numel; s++) {
            const int64_t i = s * 7919 % numel;
            double *v = (double *)targets[t]->r.data + i;
            const double keep = *v, eps = 1e-6;
            double L[2];
            for (int side = 0; side < 2; side++) {
                *v = keep + (side ? -eps : eps);
                if (c->ref->forward(c->ref, &nd.op, &k.args, &k.io_r, &err) != CK_OK) {
                    result(c, 1, "%s fp32 gradcheck: ref forward: %s", r->desc, err.msg);
                    free(an);
                    call_free(&k);
                    return;
                }
                L[side] = 0.0;
                const double *y = k.out.r.data;
                for (int64_t j = 0; j < ny; j++)
                    L[side] += y[j] * dy[j];
            }
            *v = keep;
            const double num = (L[0] - L[1]) / (2 * eps), a = an[i];
            const double excess = fabs(a - num) - (1e-5 + 1e-3 * fabs(num));
            checked++;
            if (excess > 0) {
                bad++;
                if (excess > worst) {
                    worst = excess;
                    snprintf(worst_text, sizeof worst_text, "%s[%lld]: analytic %.9g, numeric %.9g",
                             targets[t]->name, (long long)i, a, num);
                }
            }
        }
        free(an);
    }
    if (bad)
        result(c, 1, "%-60s fp32 backward vs float64 differences: %lld of %lld outside "
                     "1e-5 + 1e-3|n| (%s)",
               r->desc, (long long)bad, (long long)checked, worst_text);
    else
        result(c, 0, "%-60s fp32 backward vs float64 differences: %lld elements", r->desc,
               (long long)checked);
    call_free(&k);
}

/* The tested backend's float64 backward against its own float64 forward's differences. */
static void run_fp64_gradcheck(bo_ctx *c, int index)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    if (r->alias || !supported(c, r, "fp64 gradcheck", CK_F64) || !node_of(c, r, &nd) ||
        not_smooth(c, r, &nd, "fp64 gradcheck"))
        return;
    ck_fwd_args a;
    memset(&a, 0, sizeof a);
    a.rng = ck_rng_keyed(5, 2, CK_PURPOSE_DROPOUT, 0);
    ck_gradcheck_opts o;
    ck_gradcheck_opts_default(&o);
    ck_gradcheck_result *res = calloc(1, sizeof *res);
    ck_error err = {{0}};
    if (!res || ck_gradcheck_op(c->b, &nd, r->in, &a, 11, &o, res, &err) != CK_OK) {
        result(c, 1, "%s fp64 gradcheck: %s", r->desc, res ? err.msg : "out of memory");
        free(res);
        return;
    }
    double worst = 0.0;
    for (int e = 0; e < res->n; e++)
        worst = fmax(worst, res->e[e].max_rel_err);
    result(c, res->ok ? 0 : 1, "%-60s fp64 gradcheck: max rel err %.3g", r->desc, worst);
    free(res);
}

/* Whether the tested backend's tensors a and b hold the same bytes. */
static bool same_bytes(ck_backend *b, const ck_tensor *x, const ck_tensor *y)
{
    void *hx = fetch(b, x), *hy = fetch(b, y);
    bool same = hx && hy && memcmp(hx, hy, ck_tensor_bytes(x)) == 0;
    free(hx);
    free(hy);
    return same;
}

/* Which of din[0], dweight, dbias first differs between two calls' results, or NULL. */
static const char *first_differing(ck_backend *b, const call k[2])
{
    return !same_bytes(b, &k[0].din[0].t, &k[1].din[0].t)                  ? "din0"
           : k[0].dw.live && !same_bytes(b, &k[0].dw.t, &k[1].dw.t) ? "dweight"
           : k[0].db.live && !same_bytes(b, &k[0].db.t, &k[1].db.t) ? "dbias"
                                                                    : NULL;
}

/* ck_backward_dx_over_input (backend.h) on the tested backend: one backward computing dx,
 * dW and db against two, dW and db without dx, then dx alone with the input hidden, from
 * the same values. Every gradient must have the same bits. */
static void run_split_backward(bo_ctx *c, int index, ck_dtype dt)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    if (!ck_backward_dx_over_input(r->op.kind) || r->n_in != 1 ||
        !c->b->supports(c->b, &r->op, dt) || !node_of(c, r, &nd))
        return;
    const bo_dtypes d = bo_dtypes_of(dt);
    const uint64_t seed = 5000 + 97 * (uint64_t)index;
    char prefix[2][64];
    call k[2];
    memset(k, 0, sizeof k);
    bool ok = true;
    for (int w = 0; w < 2 && ok; w++) {
        snprintf(prefix[w], sizeof prefix[w], "op%02d.split.%s.%s", index, ck_dtype_name(dt),
                 w ? "parts" : "whole");
        ok = call_inputs(c, r, &nd, d, d, prefix[w], seed, &k[w]) &&
             call_grads(c, r, &nd, d, d, prefix[w], seed, &k[w]);
    }
    ck_error err = {{0}};
    ck_backend *b = c->b;
    ok = ok && b->backward(b, &nd.op, &k[0].args, &k[0].io_t, &k[0].g_t, &err) == CK_OK;
    ck_op_grads g1 = k[1].g_t, g2 = k[1].g_t;
    g1.din[0] = NULL;
    g2.dweight = g2.dbias = NULL;
    ck_op_io io2 = k[1].io_t;
    ck_tensor hidden = *io2.in[0];
    hidden.data = NULL; /* dx must not read x */
    io2.in[0] = &hidden;
    ok = ok && b->backward(b, &nd.op, &k[1].args, &k[1].io_t, &g1, &err) == CK_OK &&
         b->backward(b, &nd.op, &k[1].args, &io2, &g2, &err) == CK_OK;
    if (!ok) {
        result(c, 1, "%s [%s] split backward: %s", r->desc, ck_dtype_name(dt), err.msg);
    } else {
        const char *bad = first_differing(b, k);
        result(c, bad ? 1 : 0, "%s [%s] backward in two calls (dW, db; then dx with x hidden)%s%s",
               r->desc, ck_dtype_name(dt), bad ? ": differs in " : " bitwise equal to one",
               bad ? bad : "");
    }
    call_free(&k[0]);
    call_free(&k[1]);
}

/* Sets the first `count` elements of t on backend b to -0 (neg_zero) or clears their sign
 * bits (every value non-negative), whatever the float dtype: the sign is the top bit of an
 * element's last byte on a little-endian host. */
static bool set_signs(ck_backend *b, ck_tensor *t, int64_t count, bool neg_zero)
{
    unsigned char *h = fetch(b, t);
    if (!h)
        return false;
    const size_t es = ck_dtype_size(t->dtype);
    for (int64_t i = 0; i < count; i++) {
        unsigned char *e = h + (size_t)i * es;
        if (neg_zero)
            memset(e, 0, es);
        e[es - 1] = neg_zero ? 0x80 : (unsigned char)(e[es - 1] & 0x7f);
    }
    ck_error err = {{0}};
    bool ok = b->upload(b, t, h, &err) == CK_OK;
    free(h);
    return ok;
}

/* Fills t on backend b with NaN: a kernel that reads a buffer it was told holds nothing
 * puts NaN in its result. */
static bool fill_nan(ck_backend *b, ck_tensor *t)
{
    const int64_t n = ck_shape_numel(&t->shape);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    void *h = malloc(ck_tensor_bytes(t) ? ck_tensor_bytes(t) : 1);
    bool ok = v && h;
    for (int64_t i = 0; ok && i < n; i++)
        v[i] = NAN;
    ck_error err = {{0}};
    if (ok)
        ck_convert_from_f64(t->dtype, h, v, n);
    ok = ok && b->upload(b, t, h, &err) == CK_OK;
    free(v);
    free(h);
    return ok;
}

/* Sets column col of every row of t (rows of t's last dim) on backend b to -0. */
static bool set_column_neg_zero(ck_backend *b, ck_tensor *t, int64_t col)
{
    unsigned char *h = fetch(b, t);
    if (!h)
        return false;
    const size_t es = ck_dtype_size(t->dtype);
    const int64_t last = t->shape.dim[t->shape.ndim - 1], n = ck_shape_numel(&t->shape);
    for (int64_t i = col; i < n; i += last) {
        unsigned char *e = h + (size_t)i * es;
        memset(e, 0, es);
        e[es - 1] = 0x80;
    }
    ck_error err = {{0}};
    bool ok = b->upload(b, t, h, &err) == CK_OK;
    free(h);
    return ok;
}

/* Fresh gradients on the tested backend, the backward written with the flag into buffers
 * full of NaN against the same backward accumulating into zeroed ones, from the same values;
 * every bit of dx, dW and db must be the same:
 *  - params false: ck_backward_dx_fresh (backend.h), din0_fresh into din[0]. The weights are
 *    made non-negative and dy's first row -0, so that row's products are all -0;
 *  - params true: capability "params_fresh" where the backend claims the op, dparams_fresh
 *    into dW and db. x is made non-negative and dy's first column -0, so every product of
 *    the first unit's weight and bias gradients is -0.
 * A sum that did not start at +0 would be -0 there instead of the zeroed buffer's +0. */
static void run_fresh_backward(bo_ctx *c, int index, ck_dtype dt, bool params)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    union {
        void *p;
        ck_params_fresh_fn fresh;
    } u = {ck_backend_proc(c->b, CK_PROC_PARAMS_FRESH)};
    const bool claimed = params ? u.p && u.fresh(c->b, r->op.kind) : ck_backward_dx_fresh(r->op.kind);
    if (!claimed || r->n_in != 1 || !c->b->supports(c->b, &r->op, dt) || !node_of(c, r, &nd))
        return;
    const bo_dtypes d = bo_dtypes_of(dt);
    const uint64_t seed = (params ? 9500 : 9000) + 97 * (uint64_t)index;
    const int64_t row = nd.out_shape.dim[nd.out_shape.ndim - 1];
    ck_backend *b = c->b;
    char prefix[2][64];
    call k[2];
    memset(k, 0, sizeof k);
    bool ok = true;
    ck_error err = {{0}};
    for (int w = 0; w < 2 && ok; w++) {
        snprintf(prefix[w], sizeof prefix[w], "op%02d.%s.%s.%s", index,
                 params ? "pfresh" : "fresh", ck_dtype_name(dt), w ? "fresh" : "zeroed");
        ok = call_inputs(c, r, &nd, d, d, prefix[w], seed, &k[w]) &&
             call_grads(c, r, &nd, d, d, prefix[w], seed, &k[w]) && k[w].w.live &&
             (params ? set_signs(b, &k[w].in[0].t, ck_shape_numel(&k[w].in[0].t.shape), false) &&
                           set_column_neg_zero(b, &k[w].dout.t, 0)
                     : set_signs(b, &k[w].w.t, ck_shape_numel(&k[w].w.t.shape), false) &&
                           set_signs(b, &k[w].dout.t, row, true));
    }
    pair *fresh_t[2] = {params ? &k[0].dw : &k[0].din[0], params ? &k[0].db : NULL};
    pair *nan_t[2] = {params ? &k[1].dw : &k[1].din[0], params ? &k[1].db : NULL};
    for (int q = 0; q < 2 && ok; q++)
        if (fresh_t[q] && fresh_t[q]->live)
            ok = b->zero(b, &fresh_t[q]->t, &err) == CK_OK && fill_nan(b, &nan_t[q]->t);
    ck_op_grads fresh = k[1].g_t;
    fresh.din0_fresh = !params;
    fresh.dparams_fresh = params;
    ok = ok && b->backward(b, &nd.op, &k[0].args, &k[0].io_t, &k[0].g_t, &err) == CK_OK &&
         b->backward(b, &nd.op, &k[1].args, &k[1].io_t, &fresh, &err) == CK_OK;
    const char *what = params ? "dW, db written fresh over NaN" : "dx written fresh over NaN";
    if (!ok) {
        result(c, 1, "%s [%s] %s: %s", r->desc, ck_dtype_name(dt), what,
               err.msg[0] ? err.msg : "setup failed");
    } else {
        const char *bad = first_differing(b, k);
        result(c, bad ? 1 : 0, "%s [%s] %s%s%s", r->desc, ck_dtype_name(dt), what,
               bad ? ": differs in " : " bitwise equal to it into zeros", bad ? bad : "");
    }
    call_free(&k[0]);
    call_free(&k[1]);
}


/* The special values of the fused relu tests: a relu output r with NaN, -0, +0, negative
 * values and infinities among ordinary ones, and a gradient dy with NaN, infinities and -0
 * (so that dx holds non-finite values where r passes and where it does not). */
static double *relu_r_values(int64_t n, uint64_t seed, ck_dtype dt)
{
    double *v = draw(n, seed, BO_VALS_NORMAL, dt);
    static const double special[] = {NAN, -0.0, 0.0, -1.5, INFINITY, -INFINITY, -3e-3};
    for (int64_t i = 0; v && i < n; i++)
        if (i % 3 == 0)
            v[i] = special[(i / 3) % 7];
    return v;
}

static double *relu_dy_values(int64_t n, uint64_t seed, ck_dtype dt)
{
    double *v = draw(n, seed, BO_VALS_NORMAL, dt);
    for (int64_t i = 0; v && i < n; i++)
        v[i] = i % 23 == 5 ? INFINITY : i % 29 == 7 ? NAN : i % 31 == 3 ? -INFINITY
             : i % 5 == 1 ? -0.0 : v[i];
    return v;
}

/* The relu's backward on the tested backend as the unfused executor runs it: din written
 * over dout's buffer (din0_fresh), reading the relu's output r. */
static ck_status relu_backward_fresh(ck_backend *b, const ck_tensor *r, ck_tensor *d,
                                     ck_error *err)
{
    ck_op_params op;
    memset(&op, 0, sizeof op);
    ck_op_params_default(&op, CK_OP_RELU, 0);
    ck_tensor x = *r;
    x.data = NULL; /* relu's backward reads its output, not its input */
    ck_op_io io = {.n_in = 1, .in = {&x}, .out = (ck_tensor *)r};
    ck_op_grads g = {.dout = d, .din = {d}, .din0_fresh = true};
    ck_fwd_args args;
    memset(&args, 0, sizeof args);
    return b->backward(b, &op, &args, &io, &g, err);
}

/* ck_op_grads.din0_relu_over_input (backend.h) on the tested backend: the input gradient of
 * a linear or convolution written over its input r (a relu's output) with the relu's
 * backward applied, against the unfused sequence (dx into a zeroed buffer, then the relu's
 * backward writing over it), from the same values, NaN, infinities and signed zeros among
 * them. Every bit must be the same. */
static void run_relu_fused_backward(bo_ctx *c, int index, ck_dtype dt)
{
    int n;
    const bo_row *r = &bo_rows(&n)[index];
    ck_node nd;
    if (!ck_backward_relu_over_input(r->op.kind) || r->n_in != 1 ||
        !c->b->supports(c->b, &r->op, dt) || !node_of(c, r, &nd))
        return;
    const bo_dtypes d = bo_dtypes_of(dt);
    const uint64_t seed = 7000 + 97 * (uint64_t)index;
    char prefix[64], name[96];
    snprintf(prefix, sizeof prefix, "op%02d.relu_fused.%s", index, ck_dtype_name(dt));
    call k;
    memset(&k, 0, sizeof k);
    pair rv, fused, dx, dy;
    memset(&rv, 0, sizeof rv);
    memset(&fused, 0, sizeof fused);
    memset(&dx, 0, sizeof dx);
    memset(&dy, 0, sizeof dy);
    const int64_t nx = ck_shape_numel(&r->in[0]), ny = ck_shape_numel(&nd.out_shape);
    double *vr = relu_r_values(nx, seed + 1, dt), *vy = relu_dy_values(ny, seed + 2, dt);
    bool ok = vr && vy && call_inputs(c, r, &nd, d, d, prefix, seed, &k);
    snprintf(name, sizeof name, "%s.r", prefix);
    ok = ok && pair_make(c, &rv, name, dt, dt, r->in[0], vr);
    snprintf(name, sizeof name, "%s.fused", prefix);
    ok = ok && pair_make(c, &fused, name, dt, dt, r->in[0], vr);
    snprintf(name, sizeof name, "%s.dx", prefix);
    ok = ok && pair_make(c, &dx, name, dt, dt, r->in[0], NULL); /* zeroed */
    snprintf(name, sizeof name, "%s.dy", prefix);
    ok = ok && pair_make(c, &dy, name, dt, dt, nd.out_shape, vy);
    free(vr);
    free(vy);
    ck_error err = {{0}};
    ck_backend *b = c->b;
    /* unfused: dx alone with x hidden into the zeroed buffer, then relu's backward on it */
    ck_tensor hidden = rv.t;
    hidden.data = NULL;
    ck_op_io io = k.io_t;
    io.in[0] = &hidden;
    ck_op_grads g = {.dout = &dy.t, .din = {&dx.t}};
    ok = ok && b->backward(b, &nd.op, &k.args, &io, &g, &err) == CK_OK &&
         relu_backward_fresh(b, &rv.t, &dx.t, &err) == CK_OK;
    /* fused: the input gradient written over r itself */
    ck_op_io fio = k.io_t;
    fio.in[0] = &fused.t;
    ck_op_grads fg = {.dout = &dy.t, .din = {&fused.t}, .din0_relu_over_input = true};
    ok = ok && b->backward(b, &nd.op, &k.args, &fio, &fg, &err) == CK_OK;
    if (!ok) {
        result(c, 1, "%s [%s] fused relu backward: %s", r->desc, ck_dtype_name(dt), err.msg);
    } else {
        bool same = same_bytes(b, &dx.t, &fused.t);
        result(c, same ? 0 : 1,
               "%s [%s] input gradient over a relu output with its mask (NaN, Inf, -0)%s",
               r->desc, ck_dtype_name(dt),
               same ? " bitwise equal to dx then relu" : ": differs from dx then relu");
    }
    pair_free(&rv);
    pair_free(&fused);
    pair_free(&dx);
    pair_free(&dy);
    call_free(&k);
}

void bo_run_row(bo_ctx *c, int index, unsigned what)
{
    static const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16, CK_F64};
    const bool self = c->b == c->ref;
    for (size_t d = 0; (what & BO_RUN_CLASSES) && !self && d < 4; d++)
        bo_run_variant(c, index, bo_dtypes_of(dts[d]), ck_dtype_name(dts[d]), -1);
    for (size_t d = 1; (what & BO_RUN_LOWP) && d < 3; d++)
        run_lowp_rule(c, index, dts[d]);
    for (size_t d = 0; (what & BO_RUN_SPLIT) && d < 4; d++) {
        run_split_backward(c, index, dts[d]);
        run_fresh_backward(c, index, dts[d], false);
        run_fresh_backward(c, index, dts[d], true);
        run_relu_fused_backward(c, index, dts[d]);
    }
    if (what & BO_RUN_GRADCHECK) {
        run_fp64_gradcheck(c, index);
        if (!self)
            run_fp32_gradcheck(c, index);
    }
}

// ----------------------------------------------------------------------------
// the table

static bo_row g_rows[128];
static int g_n_rows;

static ck_op_params mkop(ck_op_kind k, int nsp)
{
    ck_op_params p;
    memset(&p, 0, sizeof p);
    ck_op_params_default(&p, k, nsp);
    return p;
}

/* Appends a row; its description is `text` and the input shapes. */
static void add(const char *text, ck_op_params p, int n_in, const ck_shape *in, bo_vals vals,
                bo_class fwd, bo_class bwd)
{
    if (g_n_rows >= (int)(sizeof g_rows / sizeof g_rows[0]))
        return;
    bo_row *r = &g_rows[g_n_rows++];
    memset(r, 0, sizeof *r);
    r->op = p;
    r->n_in = n_in;
    r->vals = vals;
    r->fwd = fwd;
    r->bwd = bwd;
    size_t used = (size_t)snprintf(r->desc, sizeof r->desc, "%s,", text);
    for (int i = 0; i < n_in; i++) {
        r->in[i] = in[i];
        for (int d = 0; d < in[i].ndim && used < sizeof r->desc; d++)
            used += (size_t)snprintf(r->desc + used, sizeof r->desc - used, "%s%lld",
                                     d ? "x" : " ", (long long)in[i].dim[d]);
    }
}

#define ADD1(text, p, s, vals, f, b) add(text, p, 1, (ck_shape[]){s}, vals, f, b)

static void build_linear_conv(void)
{
    ck_op_params p = mkop(CK_OP_LINEAR, 0);
    p.units = 9;
    ADD1("linear 17->9 bias", p, BO_SHAPE(4, 3, 17), BO_VALS_NORMAL, BO_LIB, BO_LIB);
    p.bias = false;
    p.units = 7;
    ADD1("linear 33->7 no bias", p, BO_SHAPE(5, 33), BO_VALS_NORMAL, BO_LIB, BO_LIB);
    p = mkop(CK_OP_LINEAR, 0);
    p.units = 19;
    ADD1("linear 33->19 bias", p, BO_SHAPE(7, 33), BO_VALS_UNIT, BO_LIB, BO_LIB);
    p.units = 40;
    p.bias = false;
    ADD1("linear 70->40 no bias", p, BO_SHAPE(2, 3, 70), BO_VALS_UNIT, BO_LIB, BO_LIB);

    p = mkop(CK_OP_CONV, 1);
    p.filters = 4;
    p.kernel[0] = 3;
    p.stride[0] = 2;
    p.pad_mode = CK_PAD_SAME;
    ADD1("conv1d k3 s2 same (asymmetric) bias", p, BO_SHAPE(2, 3, 20), BO_VALS_NORMAL, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 1);
    p.filters = 5;
    p.kernel[0] = 3;
    p.stride[0] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 1;
    ADD1("conv1d k3 s2 pad 1 bias", p, BO_SHAPE(2, 3, 21), BO_VALS_UNIT, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 1);
    p.filters = 4;
    p.kernel[0] = 3;
    p.dilation[0] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 2;
    p.bias = false;
    ADD1("conv1d k3 d2 pad 2 no bias", p, BO_SHAPE(3, 2, 17), BO_VALS_UNIT, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 2);
    p.filters = 5;
    p.kernel[0] = 3;
    p.kernel[1] = 2;
    p.stride[1] = 2;
    p.dilation[0] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 1;
    ADD1("conv2d k3x2 s1x2 d2x1 pad 1x0 bias", p, BO_SHAPE(2, 3, 9, 11), BO_VALS_NORMAL, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 2);
    p.filters = 3;
    p.kernel[0] = p.kernel[1] = 2;
    p.pad_mode = CK_PAD_SAME;
    p.bias = false;
    ADD1("conv2d k2 same (pads 0/1) no bias", p, BO_SHAPE(1, 2, 7, 6), BO_VALS_NORMAL, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 2);
    p.filters = 6;
    p.kernel[0] = p.kernel[1] = 3;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = p.pad[1] = 1;
    ADD1("conv2d 3->6 k3 pad 1 bias", p, BO_SHAPE(2, 3, 9, 11), BO_VALS_UNIT, BO_LIB, BO_LIB);
    p.filters = 18;
    ADD1("conv2d 17->18 k3 pad 1 bias", p, BO_SHAPE(1, 17, 8, 10), BO_VALS_UNIT, BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 3);
    p.filters = 4;
    p.kernel[0] = p.kernel[1] = p.kernel[2] = 3;
    p.pad_mode = CK_PAD_SAME;
    p.bias = false;
    ADD1("conv3d 4 filters k3 same no bias (the seed's layer)", p, BO_SHAPE(1, 4, 6, 7, 5),
         BO_VALS_NORMAL, BO_LIB, BO_LIB);
    ADD1("conv3d 4 filters k3 same no bias, wider", p, BO_SHAPE(1, 4, 6, 7, 12), BO_VALS_UNIT,
         BO_LIB, BO_LIB);
    p = mkop(CK_OP_CONV, 3);
    p.filters = 3;
    p.kernel[0] = 2;
    p.kernel[1] = 3;
    p.kernel[2] = 1;
    p.stride[0] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[1] = 1;
    ADD1("conv3d k2x3x1 s2x1x1 pad 0x1x0 bias", p, BO_SHAPE(2, 2, 5, 6, 7), BO_VALS_UNIT, BO_LIB,
         BO_LIB);
}

static void build_pointwise(void)
{
    static const struct {
        ck_op_kind k;
        const char *name;
        bo_class cls;
    } acts[] = {{CK_OP_RELU, "relu", BO_EXACT},   {CK_OP_LEAKY_RELU, "leaky_relu", BO_EXACT},
                {CK_OP_GELU, "gelu", BO_TRANS},   {CK_OP_TANH, "tanh", BO_TRANS},
                {CK_OP_SIGMOID, "sigmoid", BO_TRANS}};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        ADD1(acts[a].name, mkop(acts[a].k, 0), BO_SHAPE(3, 5, 7), BO_VALS_TIES, acts[a].cls,
             acts[a].cls);
    ck_op_params p = mkop(CK_OP_SILU, 0);
    ADD1("silu", p, BO_SHAPE(3, 5, 7), BO_VALS_TIES, BO_TRANS, BO_TRANS);
    /* ops defined on x > 0 only: inputs in [0.5, 1.5) */
    ADD1("sqrt", mkop(CK_OP_SQRT, 0), BO_SHAPE(3, 5, 7), BO_VALS_POSITIVE, BO_TRANS, BO_TRANS);
    ADD1("rsqrt", mkop(CK_OP_RSQRT, 0), BO_SHAPE(3, 5, 7), BO_VALS_POSITIVE, BO_TRANS, BO_TRANS);
    ADD1("reciprocal", mkop(CK_OP_RECIPROCAL, 0), BO_SHAPE(3, 5, 7), BO_VALS_POSITIVE, BO_TRANS,
         BO_TRANS);
    ADD1("log", mkop(CK_OP_LOG, 0), BO_SHAPE(3, 5, 7), BO_VALS_POSITIVE, BO_TRANS, BO_TRANS);
    /* the others on U(-1, 1): no input sits exactly on abs's kink at 0 */
    ADD1("exp", mkop(CK_OP_EXP, 0), BO_SHAPE(3, 5, 7), BO_VALS_UNIT, BO_TRANS, BO_TRANS);
    ADD1("erf", mkop(CK_OP_ERF, 0), BO_SHAPE(3, 5, 7), BO_VALS_UNIT, BO_TRANS, BO_TRANS);
    ADD1("neg", mkop(CK_OP_NEG, 0), BO_SHAPE(3, 5, 7), BO_VALS_UNIT, BO_EXACT, BO_EXACT);
    ADD1("abs", mkop(CK_OP_ABS, 0), BO_SHAPE(3, 5, 7), BO_VALS_UNIT, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_GELU, 0);
    p.gelu_tanh = true;
    ADD1("gelu tanh", p, BO_SHAPE(3, 5, 7), BO_VALS_TIES, BO_TRANS, BO_TRANS);
    /* cast: one rounding each way (harness/core/half.h's rule on every backend), exact */
    static const struct {
        const char *name;
        ck_dtype to, from;
    } casts[] = {{"cast to float16", CK_F16, CK_F32},
                 {"cast to float32 from float16", CK_F32, CK_F16},
                 {"cast to bfloat16", CK_BF16, CK_F32},
                 {"cast to bfloat16 from float16", CK_BF16, CK_F16}};
    for (size_t c = 0; c < sizeof casts / sizeof casts[0]; c++) {
        p = mkop(CK_OP_CAST, 0);
        p.cast_to = casts[c].to;
        p.cast_from = casts[c].from;
        ADD1(casts[c].name, p, BO_SHAPE(3, 5, 7), BO_VALS_TIES, BO_EXACT, BO_EXACT);
    }
    p = mkop(CK_OP_ADD, 0);
    add("add of 3", p, 3, (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(2, 3, 5), BO_SHAPE(2, 3, 5)},
        BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    add("add x + x (one tensor, both inputs)", p, 2,
        (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(2, 3, 5)}, BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    g_rows[g_n_rows - 1].alias = true;
    p = mkop(CK_OP_MUL, 0);
    add("mul", p, 2, (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(2, 3, 5)}, BO_VALS_NORMAL, BO_EXACT,
        BO_TRANS);
    add("mul x * x (one tensor, both inputs)", p, 2,
        (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(2, 3, 5)}, BO_VALS_NORMAL, BO_EXACT, BO_TRANS);
    g_rows[g_n_rows - 1].alias = true;
    p = mkop(CK_OP_POSITIONAL, 0);
    ADD1("positional", p, BO_SHAPE(3, 4, 5), BO_VALS_NORMAL, BO_EXACT, BO_TRANS);
    p = mkop(CK_OP_DROPOUT, 0);
    p.rate = 0.3;
    ADD1("dropout 0.3", p, BO_SHAPE(4, 37), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    ADD1("dropout 0.3, stream offset 5", p, BO_SHAPE(4, 37), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    g_rows[g_n_rows - 1].rng_offset = 5;
    p = mkop(CK_OP_GAUSSIAN_NOISE, 0);
    p.stddev = 0.5;
    ADD1("gaussian_noise 0.5, stream offset 8", p, BO_SHAPE(4, 37), BO_VALS_NORMAL, BO_TRANS,
         BO_EXACT);
    g_rows[g_n_rows - 1].rng_offset = 8;
}

static void build_norm(void)
{
    ck_op_params p = mkop(CK_OP_BATCHNORM, 2);
    ADD1("batchnorm train", p, BO_SHAPE(2, 3, 4, 5), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p.eval = true;
    ADD1("batchnorm eval", p, BO_SHAPE(2, 3, 4, 5), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_BATCHNORM, 2);
    p.low_precision_reduction = true;
    ADD1("batchnorm train, low-precision reduction (canary)", p, BO_SHAPE(4, 2, 16, 16),
         BO_VALS_POSITIVE, BO_TRANS, BO_TRANS);
    g_rows[g_n_rows - 1].breaks_lowp_rule = true;
    p = mkop(CK_OP_LAYERNORM, 0);
    ADD1("layernorm", p, BO_SHAPE(3, 4, 5), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p.n_norm = 1;
    p.norm_shape[0] = 5;
    ADD1("layernorm over the last dim", p, BO_SHAPE(3, 4, 5), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_RMSNORM, 0);
    ADD1("rmsnorm", p, BO_SHAPE(3, 4, 5), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_GROUPNORM, 2);
    p.groups = 2;
    ADD1("groupnorm 2 groups", p, BO_SHAPE(2, 4, 3, 3), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p.groups = 0; /* the instancenorm spelling: one group per channel, set by the shape rule */
    ADD1("instancenorm (groupnorm, a group per channel)", p, BO_SHAPE(2, 4, 3, 3), BO_VALS_NORMAL,
         BO_TRANS, BO_TRANS);
}

static void build_pool_upsample(void)
{
    ck_op_params p = mkop(CK_OP_MAXPOOL, 2);
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 2;
    ADD1("maxpool2d k3 s2 (overlapping, ties)", p, BO_SHAPE(2, 3, 7, 8), BO_VALS_TIES, BO_EXACT,
         BO_EXACT);
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = p.pad[1] = 1;
    ADD1("maxpool2d k3 s2 padded (ties)", p, BO_SHAPE(2, 2, 6, 5), BO_VALS_TIES, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_MAXPOOL, 3);
    p.kernel[0] = p.kernel[1] = p.kernel[2] = 2;
    p.stride[0] = p.stride[1] = p.stride[2] = 2;
    ADD1("maxpool3d k2 s2", p, BO_SHAPE(1, 2, 4, 6, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_AVGPOOL, 1);
    p.kernel[0] = 3;
    p.stride[0] = 1;
    ADD1("avgpool1d k3 s1 (overlapping)", p, BO_SHAPE(2, 3, 10), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_AVGPOOL, 3);
    p.kernel[0] = p.kernel[1] = p.kernel[2] = 2;
    p.stride[0] = p.stride[1] = p.stride[2] = 2;
    ADD1("avgpool3d k2 s2", p, BO_SHAPE(1, 2, 4, 6, 4), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_AVGPOOL, 2);
    p.kernel[0] = p.kernel[1] = 3;
    p.stride[0] = p.stride[1] = 1;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = p.pad[1] = 1;
    p.count_include_pad = false;
    ADD1("avgpool2d k3 padded, count_include_pad false", p, BO_SHAPE(2, 2, 5, 4), BO_VALS_NORMAL,
         BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_UPSAMPLE, 1);
    p.scale[0] = 3;
    ADD1("upsample1d x3", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_UPSAMPLE, 3);
    p.scale[0] = 2;
    p.scale[1] = 1;
    p.scale[2] = 3;
    ADD1("upsample3d x(2,1,3)", p, BO_SHAPE(1, 2, 3, 4, 2), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_UPSAMPLE, 2);
    p.mode = CK_UPSAMPLE_LINEAR;
    p.scale[0] = 2;
    p.scale[1] = 3;
    ADD1("upsample2d bilinear x(2,3)", p, BO_SHAPE(1, 2, 3, 4), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_UPSAMPLE, 3);
    p.mode = CK_UPSAMPLE_LINEAR;
    p.align_corners = true;
    p.scale[0] = p.scale[1] = p.scale[2] = 2;
    ADD1("upsample3d trilinear align_corners x2", p, BO_SHAPE(1, 1, 2, 3, 2), BO_VALS_NORMAL,
         BO_TRANS, BO_TRANS);
}

static void build_shape_attention(void)
{
    ck_op_params p = mkop(CK_OP_CONCAT, 0);
    add("concat of 3 along channels", p, 3,
        (ck_shape[]){BO_SHAPE(2, 1, 4, 3), BO_SHAPE(2, 3, 4, 3), BO_SHAPE(2, 2, 4, 3)},
        BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.dim = -1;
    add("concat of 2 along the last dim", p, 2,
        (ck_shape[]){BO_SHAPE(2, 3, 2), BO_SHAPE(2, 3, 5)}, BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.dim = 0;
    add("concat of 2 along dim 0", p, 2, (ck_shape[]){BO_SHAPE(1, 3, 4), BO_SHAPE(2, 3, 4)},
        BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_CONCAT, 0);
    ADD1("flatten", mkop(CK_OP_FLATTEN, 0), BO_SHAPE(3, 2, 4, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_SLICE, 0);
    p.dim = 1;
    p.n_slice = 2;
    p.slice_range[0] = 1;
    p.slice_range[1] = 3;
    ADD1("slice dim 1 [1:3]", p, BO_SHAPE(2, 4, 3), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.dim = -1;
    p.slice_range[0] = 2;
    p.slice_range[1] = 5;
    ADD1("slice last dim [2:5]", p, BO_SHAPE(3, 2, 6), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_RESHAPE, 0);
    p.n_shape = 2;
    p.shape[0] = 6;
    p.shape[1] = -1;
    ADD1("reshape (6, -1)", p, BO_SHAPE(2, 3, 4), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_PERMUTE, 0);
    p.n_perm = 3;
    p.perm[0] = 2;
    p.perm[1] = 0;
    p.perm[2] = 1;
    ADD1("permute (2, 0, 1)", p, BO_SHAPE(2, 3, 4), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    /* the CUDA kernels gather what the reference scatters, so most gradients are summed
     * in another order (close, not bitwise) */
    p = mkop(CK_OP_MATMUL, 0);
    add("matmul", p, 2, (ck_shape[]){BO_SHAPE(2, 3, 4), BO_SHAPE(2, 4, 5)}, BO_VALS_NORMAL,
        BO_TRANS, BO_TRANS);
    p.trans_a = p.trans_b = true;
    add("matmul transposed by a 2-D B", p, 2, (ck_shape[]){BO_SHAPE(2, 4, 3), BO_SHAPE(5, 4)},
        BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_EMBEDDING, 0);
    p.vocab = 11;
    p.units = 6;
    ADD1("embedding vocab 11, dim 6 (repeated ids)", p, BO_SHAPE(3, 7), BO_VALS_NORMAL, BO_EXACT,
         BO_TRANS);
    p = mkop(CK_OP_MATMUL, 0);
    p.units = 6;
    ADD1("matmul by a weight", p, BO_SHAPE(2, 3, 4), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_SOFTMAX, 0);
    p.dim = 1;
    ADD1("softmax dim 1", p, BO_SHAPE(2, 5, 3), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    ADD1("log_softmax dim -1", mkop(CK_OP_LOG_SOFTMAX, 0), BO_SHAPE(2, 3, 7), BO_VALS_NORMAL,
         BO_TRANS, BO_TRANS);
    /* without dropout, fp32 is the cpu backend's GEMM path (backends/cpu/attention_gemm.c):
     * held to the GEMM class like linear and conv */
    p = mkop(CK_OP_ATTENTION, 0);
    p.heads = 2;
    p.causal = true;
    add("attention causal, 2 heads", p, 3,
        (ck_shape[]){BO_SHAPE(2, 7, 6), BO_SHAPE(2, 7, 6), BO_SHAPE(2, 7, 4)}, BO_VALS_NORMAL,
        BO_LIB, BO_LIB);
    p = mkop(CK_OP_ATTENTION, 0);
    p.heads = 2;
    p.causal = true;
    p.rate = 0.2;
    add("attention causal, 2 heads, dropout 0.2", p, 3,
        (ck_shape[]){BO_SHAPE(2, 5, 6), BO_SHAPE(2, 5, 6), BO_SHAPE(2, 5, 4)}, BO_VALS_NORMAL,
        BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_ATTENTION, 0);
    p.rate = 0.1;
    ADD1("self-attention q = k = v, dropout 0.1", p, BO_SHAPE(2, 4, 6), BO_VALS_NORMAL, BO_TRANS,
         BO_TRANS);
    g_rows[g_n_rows - 1].rng_offset = 3;
    p = mkop(CK_OP_CONV_TRANSPOSE, 2);
    p.filters = 3;
    p.kernel[0] = 3;
    p.kernel[1] = 2;
    p.stride[0] = 2;
    p.dilation[1] = 2;
    p.pad_mode = CK_PAD_EXPLICIT;
    p.pad[0] = 1;
    p.out_pad[0] = 1;
    ADD1("conv_transpose2d k3x2 s2x1 d1x2 pad 1x0 out_pad 1x0", p, BO_SHAPE(2, 2, 4, 3),
         BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_CONV_TRANSPOSE, 3);
    p.filters = 2;
    for (int d = 0; d < 3; d++)
        p.kernel[d] = p.stride[d] = 2;
    ADD1("conv_transpose3d k2 s2", p, BO_SHAPE(1, 2, 2, 3, 2), BO_VALS_NORMAL, BO_TRANS, BO_TRANS);
}

/* the broadcast family: numpy broadcasting between two inputs and with constants, expand,
 * reductions (their gradients sum in the reference's order: exact on every backend) */
static void build_broadcast(void)
{
    ck_op_params p = mkop(CK_OP_ADD, 0);
    p.broadcast = true;
    add("add broadcast (2,3,5)+(3,1)", p, 2, (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(3, 1)},
        BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.scalar = 0.5;
    ADD1("add scalar 0.5", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_MUL, 0);
    p.broadcast = true;
    add("mul broadcast (2,3,5)*(1,3,1)", p, 2,
        (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(1, 3, 1)}, BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.n_const = 1;
    p.const_shape[0] = 5;
    ADD1("mul constant tensor (5)", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_SUB, 0);
    add("sub broadcast (2,3,5)-(2,1,5)", p, 2,
        (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(2, 1, 5)}, BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.scalar = 1.0;
    p.const_first = true;
    ADD1("sub 1 - x (constant first)", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_DIV, 0);
    add("div broadcast (2,3,5)/(5)", p, 2, (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(5)},
        BO_VALS_POSITIVE, BO_EXACT, BO_EXACT);
    p.n_const = 2;
    p.const_shape[0] = 3;
    p.const_shape[1] = 1;
    p.const_first = true;
    ADD1("div constant (3,1) / x", p, BO_SHAPE(2, 3, 5), BO_VALS_POSITIVE, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_MAXIMUM, 0);
    add("maximum broadcast (2,3,5),(3,5)", p, 2, (ck_shape[]){BO_SHAPE(2, 3, 5), BO_SHAPE(3, 5)},
        BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_MINIMUM, 0);
    p.scalar = 0.25;
    ADD1("minimum with scalar 0.25", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_POW, 0);
    p.scalar = 2.0;
    ADD1("pow 2", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.scalar = -0.5;
    ADD1("pow -0.5", p, BO_SHAPE(2, 3, 5), BO_VALS_POSITIVE, BO_TRANS, BO_TRANS);
    p = mkop(CK_OP_MASKED_FILL, 0);
    p.scalar = -2.0;
    p.n_const = 3;
    p.const_shape[0] = 1;
    p.const_shape[1] = 3;
    p.const_shape[2] = 5;
    ADD1("masked_fill mask (1,3,5) value -2", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT,
         BO_EXACT);
    p = mkop(CK_OP_EXPAND, 0);
    p.n_shape = 3;
    p.shape[0] = 2;
    p.shape[1] = 3;
    p.shape[2] = 4;
    ADD1("expand to (2,3,4)", p, BO_SHAPE(3, 1), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.shape[1] = -1;
    ADD1("expand to (2,-1,4)", p, BO_SHAPE(2, 3, 1), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_REDUCE_SUM, 0);
    p.n_axes = 1;
    p.axes[0] = 1;
    p.keepdim = true;
    ADD1("sum dim 1 keepdim", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p.n_axes = 2;
    p.axes[0] = 0;
    p.axes[1] = 2;
    p.keepdim = false;
    ADD1("sum dims 0, 2", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_REDUCE_MEAN, 0);
    p.n_axes = 1;
    p.axes[0] = -1;
    ADD1("mean dim -1", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_REDUCE_MAX, 0);
    p.n_axes = 1;
    p.axes[0] = 1;
    ADD1("amax dim 1", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_EXACT, BO_EXACT);
    p = mkop(CK_OP_SOFTMAX, 0); /* softmax(x + mask), an additive constant mask */
    p.n_const = 2;
    p.const_shape[0] = 3;
    p.const_shape[1] = 5;
    ADD1("softmax dim -1, additive mask (3,5)", p, BO_SHAPE(2, 3, 5), BO_VALS_NORMAL, BO_TRANS,
         BO_TRANS);
}

const bo_row *bo_rows(int *n)
{
    if (!g_n_rows) {
        build_linear_conv();
        build_pointwise();
        build_norm();
        build_pool_upsample();
        build_shape_attention();
        build_broadcast();
    }
    *n = g_n_rows;
    return g_rows;
}

bool bo_row_matches(const bo_row *r, const char *filter)
{
    return !filter || !filter[0] || strstr(r->desc, filter) != NULL;
}

// ----------------------------------------------------------------------------
// beyond the ops

void bo_run_dropout_masks(bo_ctx *c)
{
    const double rates[] = {0.1, 0.5, 0.9};
    const uint64_t offsets[] = {0, 1, 2, 3, 7, 1000001};
    const int64_t n = 4099;
    double *ones = malloc((size_t)n * sizeof *ones);
    for (int64_t i = 0; ones && i < n; i++)
        ones[i] = 1.0;
    for (size_t r = 0; ones && r < sizeof rates / sizeof rates[0]; r++)
        for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
            ck_op_params op = mkop(CK_OP_DROPOUT, 0);
            op.rate = rates[r];
            pair x, y;
            memset(&y, 0, sizeof y);
            if (pair_make(c, &x, "mask.x", CK_F32, CK_F32, BO_SHAPE(1, n), ones) &&
                pair_make(c, &y, "mask.y", CK_F32, CK_F32, BO_SHAPE(1, n), NULL)) {
                ck_fwd_args a;
                memset(&a, 0, sizeof a);
                a.rng = ck_rng_keyed(77, CK_RNG_NO_LAYER, CK_PURPOSE_GLOBAL, 0);
                a.rng.offset = offsets[o];
                ck_op_io ir = {.n_in = 1, .in = {&x.r}, .out = &y.r};
                ck_op_io it = {.n_in = 1, .in = {&x.t}, .out = &y.t};
                ck_error err = {{0}};
                char what[96];
                snprintf(what, sizeof what, "dropout mask rate %.1f offset %llu", rates[r],
                         (unsigned long long)offsets[o]);
                if (c->ref->forward(c->ref, &op, &a, &ir, &err) != CK_OK ||
                    c->b->forward(c->b, &op, &a, &it, &err) != CK_OK)
                    result(c, 1, "%s: %s", what, err.msg);
                else
                    compare_class(c, what, &y, BO_EXACT);
            }
            pair_free(&x);
            pair_free(&y);
        }
    free(ones);
}

/* cross-entropy through ce_forward / ce_backward: class dim 2, an ignore_index and label
 * smoothing (the spec path a case with any of them takes) */
static void bo_run_ce_spec(bo_ctx *c, ck_dtype dt, uint64_t seed)
{
    const ck_shape ys = BO_SHAPE(3, 4, 6), ts = BO_SHAPE(3, 4);
    const int64_t nt = ck_shape_numel(&ts);
    double *vy = draw(ck_shape_numel(&ys), seed + 21, BO_VALS_NORMAL, dt);
    double *cls = draw(nt, seed, BO_VALS_ZERO, CK_F64);
    ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 21);
    for (int64_t i = 0; cls && i < nt; i++)
        cls[i] = (double)ck_rng_below(&s, (uint64_t)i, 6);
    pair y, t, dy;
    memset(&y, 0, sizeof y);
    memset(&t, 0, sizeof t);
    memset(&dy, 0, sizeof dy);
    bool ok = vy && cls && pair_make(c, &y, "ce.y", dt, dt, ys, vy) &&
              pair_make(c, &dy, "ce.dy", dt, dt, ys, NULL) &&
              pair_make(c, &t, "ce.target", CK_I32, CK_I32, ts, cls);
    free(vy);
    free(cls);
    const ck_loss_spec spec = {CK_LOSS_CROSS_ENTROPY, 2, true, 2, 0.1};
    ck_error err = {{0}};
    double lr = 0, lt = 0;
    char what[96];
    snprintf(what, sizeof what, "loss cross_entropy dim 2, ignore_index, label_smoothing (%s)",
             ck_dtype_name(dt));
    if (ok && (c->ref->ce_forward(c->ref, &spec, &y.r, &t.r, &lr, &err) != CK_OK ||
               c->b->ce_forward(c->b, &spec, &y.t, &t.t, &lt, &err) != CK_OK)) {
        result(c, 1, "%s: %s", what, err.msg);
        ok = false;
    }
    if (ok) {
        result(c, fabs(lr - lt) <= 1e-12 * fmax(1.0, fabs(lr)) ? 0 : 1,
               "%-60s forward %.17g, ref %.17g", what, lt, lr);
        if (c->ref->ce_backward(c->ref, &spec, &y.r, &t.r, 1024.0, &dy.r, &err) != CK_OK ||
            c->b->ce_backward(c->b, &spec, &y.t, &t.t, 1024.0, &dy.t, &err) != CK_OK)
            result(c, 1, "%s backward: %s", what, err.msg);
        else
            compare_class(c, "loss cross_entropy (spec) backward, scale 2^10", &dy, BO_TRANS);
    }
    pair_free(&y);
    pair_free(&t);
    pair_free(&dy);
}

/* loss_backward's relu_over (backend.h) on the tested backend for mean, sum and mse: the
 * loss gradient written over the prediction y (a relu's output) with the relu's backward
 * applied, against the loss gradient into a buffer of its own and then the relu's backward
 * writing over it; y holds NaN, infinities and signed zeros. Every bit must be the same. */
static void run_loss_relu_over(bo_ctx *c, ck_loss_kind kind, ck_dtype dt, uint64_t seed)
{
    const ck_shape ys = BO_SHAPE(3, 5, 4, 2);
    const int64_t n = ck_shape_numel(&ys);
    double *vy = relu_r_values(n, seed, dt), *vt = draw(n, seed + 9, BO_VALS_UNIT, dt);
    pair y, over, dy, t;
    memset(&y, 0, sizeof y);
    memset(&over, 0, sizeof over);
    memset(&dy, 0, sizeof dy);
    memset(&t, 0, sizeof t);
    bool ok = vy && vt && pair_make(c, &y, "loss_relu.y", dt, dt, ys, vy) &&
              pair_make(c, &over, "loss_relu.over", dt, dt, ys, vy) &&
              pair_make(c, &dy, "loss_relu.dy", dt, dt, ys, NULL);
    if (ok && kind == CK_LOSS_MSE)
        ok = pair_make(c, &t, "loss_relu.target", dt, dt, ys, vt);
    free(vy);
    free(vt);
    ck_error err = {{0}};
    ck_backend *b = c->b;
    const ck_tensor *tt = t.live ? &t.t : NULL;
    ok = ok && b->loss_backward(b, kind, &y.t, tt, 1024.0, &dy.t, false, &err) == CK_OK &&
         relu_backward_fresh(b, &y.t, &dy.t, &err) == CK_OK &&
         b->loss_backward(b, kind, &over.t, tt, 1024.0, &over.t, true, &err) == CK_OK;
    char what[96];
    snprintf(what, sizeof what, "loss %s (%s) gradient over a relu output with its mask",
             ck_loss_kind_name(kind), ck_dtype_name(dt));
    if (!ok)
        result(c, 1, "%s: %s", what, err.msg);
    else
        result(c, same_bytes(b, &dy.t, &over.t) ? 0 : 1, "%-60s %s", what,
               same_bytes(b, &dy.t, &over.t) ? "bitwise equal to the loss gradient then relu"
                                             : "differs from the loss gradient then relu");
    pair_free(&y);
    pair_free(&over);
    pair_free(&dy);
    pair_free(&t);
}

void bo_run_losses(bo_ctx *c)
{
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16};
    const uint64_t seed = 300;
    for (size_t d = 0; d < 3; d++) {
        const ck_dtype dt = dts[d];
        for (int kind = 0; kind < CK_LOSS_KIND_COUNT; kind++) {
            const ck_shape ys = BO_SHAPE(3, 5, 4, 2), ts = BO_SHAPE(3, 4, 2);
            double *vy = draw(ck_shape_numel(&ys), seed + (uint64_t)kind, BO_VALS_NORMAL, dt);
            double *vt = draw(ck_shape_numel(&ys), seed + 9, BO_VALS_UNIT, dt);
            const int64_t nt = ck_shape_numel(&ts);
            ck_rng_stream s = ck_rng_keyed(seed, CK_RNG_NO_LAYER, CK_PURPOSE_TEST, 9);
            double *cls = draw(nt, seed, BO_VALS_ZERO, CK_F64);
            for (int64_t i = 0; cls && i < nt; i++)
                cls[i] = (double)ck_rng_below(&s, (uint64_t)i, 5);
            pair y, t, dy;
            memset(&t, 0, sizeof t);
            memset(&dy, 0, sizeof dy);
            bool ok = vy && vt && cls && pair_make(c, &y, "loss.y", dt, dt, ys, vy) &&
                      pair_make(c, &dy, "loss.dy", dt, dt, ys, NULL);
            if (ok && kind == CK_LOSS_MSE)
                ok = pair_make(c, &t, "loss.target", dt, dt, ys, vt);
            if (ok && kind == CK_LOSS_CROSS_ENTROPY)
                ok = pair_make(c, &t, "loss.target", CK_I32, CK_I32, ts, cls);
            free(vy);
            free(vt);
            free(cls);
            ck_error err = {{0}};
            double lr = 0, lt = 0;
            const ck_tensor *tr = t.live ? &t.r : NULL, *tt = t.live ? &t.t : NULL;
            char what[96];
            snprintf(what, sizeof what, "loss %s (%s)", ck_loss_kind_name(kind), ck_dtype_name(dt));
            if (ok && (c->ref->loss_forward(c->ref, kind, &y.r, tr, &lr, &err) != CK_OK ||
                       c->b->loss_forward(c->b, kind, &y.t, tt, &lt, &err) != CK_OK)) {
                result(c, 1, "%s: %s", what, err.msg);
                ok = false;
            }
            if (ok) {
                result(c, fabs(lr - lt) <= 1e-12 * fmax(1.0, fabs(lr)) ? 0 : 1,
                       "%-60s forward %.17g, ref %.17g", what, lt, lr);
                if (c->ref->loss_backward(c->ref, kind, &y.r, tr, 1024.0, &dy.r, false, &err) != CK_OK ||
                    c->b->loss_backward(c->b, kind, &y.t, tt, 1024.0, &dy.t, false, &err) != CK_OK) {
                    result(c, 1, "%s backward: %s", what, err.msg);
                } else {
                    snprintf(what, sizeof what, "loss %s backward, scale 2^10",
                             ck_loss_kind_name(kind));
                    compare_class(c, what, &dy, kind == CK_LOSS_CROSS_ENTROPY ? BO_TRANS : BO_EXACT);
                }
            }
            pair_free(&y);
            pair_free(&t);
            pair_free(&dy);
        }
        bo_run_ce_spec(c, dt, seed);
        const ck_loss_kind elementwise[] = {CK_LOSS_MEAN, CK_LOSS_SUM, CK_LOSS_MSE};
        for (int k = 0; k < 3; k++)
            run_loss_relu_over(c, elementwise[k], dt, seed + 70 + (uint64_t)k);
    }
}

void bo_run_optimizers(bo_ctx *c)
{
    const ck_shape s = BO_SHAPE(7, 13);
    const int64_t n = ck_shape_numel(&s);
    const uint64_t seed = 400;
    for (int kind = 0; kind < CK_OPT_KIND_COUNT; kind++)
        for (int64_t step = 1; step <= 3; step += 2) {
            ck_optimizer opt = {.kind = kind, .lr = 0.01, .momentum = 0.9, .beta1 = 0.9,
                                .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
            double *vp = draw(n, seed, BO_VALS_UNIT, CK_F32),
                   *vg = draw(n, seed + 1, BO_VALS_NORMAL, CK_F16),
                   *v0 = draw(n, seed + 2, BO_VALS_NORMAL, CK_F32),
                   *v1 = draw(n, seed + 3, BO_VALS_POSITIVE, CK_F32);
            pair p, g, s0, s1;
            memset(&g, 0, sizeof g);
            memset(&s0, 0, sizeof s0);
            memset(&s1, 0, sizeof s1);
            /* master param and state fp32; the gradient fp16 (a low-dtype gradient is read) */
            bool ok = vp && vg && v0 && v1 &&
                      pair_make(c, &p, "opt.param", CK_F32, CK_F32, s, vp) &&
                      pair_make(c, &g, "opt.grad", CK_F16, CK_F16, s, vg) &&
                      pair_make(c, &s0, "opt.state0", CK_F32, CK_F32, s, v0) &&
                      pair_make(c, &s1, "opt.state1", CK_F32, CK_F32, s, v1);
            free(vp);
            free(vg);
            free(v0);
            free(v1);
            ck_error err = {{0}};
            char what[96];
            snprintf(what, sizeof what, "optimizer %s step %lld", ck_optimizer_kind_name(kind),
                     (long long)step);
            if (ok && (c->ref->optimizer_step(c->ref, &opt, step, 1.0 / 1024, &p.r, &g.r, &s0.r,
                                              &s1.r, &err) != CK_OK ||
                       c->b->optimizer_step(c->b, &opt, step, 1.0 / 1024, &p.t, &g.t, &s0.t,
                                            &s1.t, &err) != CK_OK)) {
                result(c, 1, "%s: %s", what, err.msg);
                ok = false;
            }
            if (ok) {
                pair *outs[] = {&p, &s0, &s1};
                const char *names[] = {"param", "state0", "state1"};
                for (int k = 0; k < 3; k++) {
                    char w2[128];
                    snprintf(w2, sizeof w2, "%s %s", what, names[k]);
                    compare_class(c, w2, outs[k], BO_EXACT);
                }
            }
            pair_free(&p);
            pair_free(&g);
            pair_free(&s0);
            pair_free(&s1);
        }
}

/* master -> low casts and low -> master unscaling (backend.h's convert) */
void bo_run_convert(bo_ctx *c)
{
    const ck_shape s = BO_SHAPE(5, 41);
    double *v = draw(ck_shape_numel(&s), 500, BO_VALS_NORMAL, CK_F64);
    if (!v)
        return;
    for (int i = 0; i < 5; i++)
        v[i] *= 1e5 * (i + 1); /* overflow to inf in fp16 */
    v[5] = 1e-9;               /* flush to zero in fp16 */
    const ck_dtype dts[][2] = {{CK_F16, CK_F32}, {CK_BF16, CK_F32}, {CK_F32, CK_F16},
                               {CK_F32, CK_BF16}, {CK_F32, CK_F32}};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            pair dst, src;
            memset(&src, 0, sizeof src);
            if (pair_make(c, &dst, "convert.dst", dts[k][0], dts[k][0], s, v) &&
                pair_make(c, &src, "convert.src", dts[k][1], dts[k][1], s, v)) {
                ck_error err = {{0}};
                const double scale = accumulate ? 1.0 / 65536.0 : 1.0;
                char what[96];
                snprintf(what, sizeof what, "convert %s -> %s%s", ck_dtype_name(dts[k][1]),
                         ck_dtype_name(dts[k][0]), accumulate ? " scaled, accumulated" : "");
                if (c->ref->convert(c->ref, &dst.r, &src.r, scale, accumulate, &err) != CK_OK ||
                    c->b->convert(c->b, &dst.t, &src.t, scale, accumulate, &err) != CK_OK)
                    result(c, 1, "%s: %s", what, err.msg);
                else
                    compare_class(c, what, &dst, BO_EXACT);
            }
            pair_free(&dst);
            pair_free(&src);
        }
    free(v);
}

/* backend.h's calibration_round: bitwise ref's, with and without the dither, for fp16's
 * and bf16's significands; and ref's own known answers (ties to even, no exponent limit) */
void bo_run_calibration_round(bo_ctx *c)
{
    const ck_shape s = BO_SHAPE(3, 1001);
    double *v = draw(ck_shape_numel(&s), 550, BO_VALS_NORMAL, CK_F32);
    if (!v)
        return;
    v[0] = 1.0 + 0x1p-11; /* a tie at 11 bits: to even, 1.0 */
    v[1] = 1.0 + 0x1p-10; /* exact at 11 bits */
    v[2] = 1e-30;         /* far below fp16's range: kept, rounded */
    v[3] = 0.0;
    const int bits[] = {11, 8};
    const double rels[] = {0.0, 1e-3};
    for (int bi = 0; bi < 2; bi++)
        for (int ri = 0; ri < 2; ri++) {
            pair t;
            if (pair_make(c, &t, "calibration.t", CK_F32, CK_F32, s, v)) {
                ck_rng_stream st = ck_rng_keyed(9, 4, CK_PURPOSE_CALIBRATION, 3);
                ck_error err = {{0}};
                char what[96];
                snprintf(what, sizeof what, "calibration_round %d bits, dither %g", bits[bi],
                         rels[ri]);
                if (c->ref->calibration_round(c->ref, &t.r, bits[bi], rels[ri], &st, &err) != CK_OK ||
                    c->b->calibration_round(c->b, &t.t, bits[bi], rels[ri], &st, &err) != CK_OK) {
                    result(c, 1, "%s: %s", what, err.msg);
                } else {
                    compare_class(c, what, &t, BO_EXACT);
                    float *h = fetch(c->ref, &t.r);
                    if (h && bits[bi] == 11 && rels[ri] == 0.0) {
                        const bool known = h[0] == 1.0f && h[1] == (float)(1.0 + 0x1p-10) &&
                                           h[3] == 0.0f && h[2] != 0.0f &&
                                           fabs((double)h[2] - v[2]) <= 0x1p-11 * v[2];
                        result(c, known ? 0 : 1, "calibration_round known answers on ref: "
                                                 "%a %a %a %a", h[0], h[1], h[2], h[3]);
                    }
                    free(h);
                }
            }
            pair_free(&t);
        }
    free(v);
}

/* conv3d, linear and batchnorm backward run twice on the tested backend: the same bits */
void bo_run_determinism(bo_ctx *c)
{
    static const char *what[] = {"conv3d", "linear", "batchnorm"};
    for (int which = 0; which < 3; which++) {
        bo_row r;
        memset(&r, 0, sizeof r);
        r.n_in = 1;
        if (which == 0) {
            r.op = mkop(CK_OP_CONV, 3);
            r.op.filters = 4;
            r.op.kernel[0] = r.op.kernel[1] = r.op.kernel[2] = 3;
            r.op.pad_mode = CK_PAD_SAME;
            r.in[0] = BO_SHAPE(2, 4, 9, 10, 11);
        } else if (which == 1) {
            r.op = mkop(CK_OP_LINEAR, 0);
            r.op.units = 64;
            r.in[0] = BO_SHAPE(256, 96);
        } else {
            r.op = mkop(CK_OP_BATCHNORM, 2);
            r.in[0] = BO_SHAPE(8, 3, 33, 35);
        }
        snprintf(r.desc, sizeof r.desc, "determinism: %s backward twice", what[which]);
        ck_node nd;
        if (!c->b->supports(c->b, &r.op, CK_F32) || !node_of(c, &r, &nd))
            continue;
        char prefix[48];
        snprintf(prefix, sizeof prefix, "determinism.%s", what[which]);
        call k[2];
        memset(k, 0, sizeof k);
        const bo_dtypes d = bo_dtypes_of(CK_F32);
        bool ok = true;
        /* two calls on b from the same values; the second's "ref" side unused */
        for (int run = 0; run < 2 && ok; run++) {
            ok = call_inputs(c, &r, &nd, d, d, prefix, 600, &k[run]) &&
                 call_grads(c, &r, &nd, d, d, prefix, 600, &k[run]);
            ck_error err = {{0}};
            ok = ok && c->b->forward(c->b, &nd.op, &k[run].args, &k[run].io_t, &err) == CK_OK &&
                 c->b->backward(c->b, &nd.op, &k[run].args, &k[run].io_t, &k[run].g_t, &err) == CK_OK;
            if (!ok)
                result(c, 1, "%s: %s", r.desc, err.msg);
        }
        if (ok) {
            pair *a[] = {&k[0].din[0], &k[0].dw}, *b2[] = {&k[1].din[0], &k[1].dw};
            for (int t = 0; t < 2; t++) {
                void *x = fetch(c->b, &a[t]->t), *y = fetch(c->b, &b2[t]->t);
                bool same = x && y && memcmp(x, y, ck_tensor_bytes(&a[t]->t)) == 0;
                result(c, same ? 0 : 1, "%s, %s: %s", r.desc, t ? "dweight" : "dinput",
                       same ? "the same bits" : "the bits differ");
                free(x);
                free(y);
            }
        }
        call_free(&k[0]);
        call_free(&k[1]);
    }
}
