/*
 * Judging a framework's runs with the harness's rules (framework_judge.h).
 */
#include "harness/verify/framework_judge.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/half.h"
#include "harness/verify/judge.h"
#include "harness/verify/vacuity.h"

/* ---- the model as a case -------------------------------------------------------------- */

/* Case-insensitive substring test on a module type ("BatchNorm2d", "BatchNormalization"). */
static bool type_has(const char *type, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = type; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)word[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

static bool is_weight_like(const char *type)
{
    return type_has(type, "linear") || type_has(type, "conv") || type_has(type, "dense") ||
           type_has(type, "embedding");
}

ck_status ck_fw_model_build(const ck_fw_input *in, const ck_fw_judge_opts *o, ck_fw_model *m,
                            ck_error *err)
{
    memset(m, 0, sizeof *m);
    ck_case *c = &m->cs;
    int n = in->n_modules;
    c->layers = calloc((size_t)n + 1, sizeof *c->layers);
    m->g.nodes = calloc((size_t)n + 1, sizeof *m->g.nodes);
    if (!c->layers || !m->g.nodes) {
        ck_fw_model_free(m);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        c->layers[i].name = in->modules[i].name; /* borrowed from the input */
        c->layers[i].op_name = in->modules[i].type;
        c->layers[i].op.kind = is_weight_like(in->modules[i].type) ? CK_OP_LINEAR : CK_OP_RELU;
        m->g.nodes[i].spec = &c->layers[i];
        m->g.nodes[i].op = c->layers[i].op;
    }
    c->n_layers = n;
    c->name = in->model_name;
    c->path = (char *)ck_fw_input_shown_path(in);
    int p = ck_fw_find_run(in, CK_FW_PLAIN, CK_F32, NULL, 0, 0);
    c->steps = p >= 0 ? in->runs[p].n_steps : 0;
    c->rtol = c->atol = 0.0;          /* plain vs checkpointed: bitwise */
    c->expect = CK_EXPECT_IDENTICAL;
    c->expect_memory_met = true;
    c->expect_fp16 = c->expect_bf16 = CK_EXPECT_CLOSE;
    c->fp16_rel_l2 = c->bf16_rel_l2 = -1.0;
    c->autocast = CK_AUTOCAST_RESTORE;
    c->loss_scale = CK_SCALE_NONE;
    c->has_min_memory_saving = in->has_min_saving;
    c->min_memory_saving = in->min_saving;
    if (o && o->has_min_saving) {
        c->has_min_memory_saving = true;
        c->min_memory_saving = o->min_saving;
    }
    m->g.cs = c;
    m->g.n = n;
    return CK_OK;
}

void ck_fw_model_free(ck_fw_model *m)
{
    free(m->cs.layers);
    free(m->g.nodes);
    memset(m, 0, sizeof *m);
}

/* ---- helpers ---------------------------------------------------------------------------- */

static void line(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, CK_FW_LINE, fmt, ap);
    va_end(ap);
}

static void add_cause(ck_fw_item *it, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_cause(ck_fw_item *it, const char *fmt, ...)
{
    if (it->n_causes >= CK_BISECT_MAX_CAUSES)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->causes[it->n_causes++], CK_FW_LINE, fmt, ap);
    va_end(ap);
}

/* A module record tensor as an aligned fp32 copy (record files may hold fp32, fp64, fp16,
 * bf16); NULL for other dtypes or out of memory. */
static float *as_f32(const ck_named_tensor *t, int64_t *numel)
{
    size_t bytes;
    if (!ck_file_shape_size(&t->shape, t->dtype, numel, &bytes))
        return NULL;
    float *f = malloc((size_t)*numel * sizeof *f + 1);
    if (!f)
        return NULL;
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < *numel; i++) {
        if (t->dtype == CK_FT_F32) {
            memcpy(&f[i], p + 4 * i, 4);
        } else if (t->dtype == CK_FT_F64) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            f[i] = (float)d;
        } else if (t->dtype == CK_FT_F16 || t->dtype == CK_FT_BF16) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = t->dtype == CK_FT_F16 ? ck_f16_to_f32(h) : ck_bf16_to_f32(h);
        } else {
            free(f);
            return NULL;
        }
    }
    return f;
}

/* Compares two module record tensors bitwise into m; false when they cannot be compared
 * (shapes or dtypes differ: m then says "everything differs"). */
static ck_verdict compare_records(const ck_named_tensor *a, const ck_named_tensor *ref,
                                  ck_metrics *m, int64_t *mask_differs)
{
    memset(m, 0, sizeof *m);
    if (mask_differs)
        *mask_differs = 0;
    int64_t na = 0, nr = 0;
    if (!ck_shape_equal(&a->shape, &ref->shape)) {
        m->numel = ck_shape_numel(&ref->shape);
        m->n_outside = m->numel;
        m->max_abs = INFINITY;
        return CK_VERDICT_MISMATCH;
    }
    float *fa = as_f32(a, &na), *fr = as_f32(ref, &nr);
    ck_verdict v = CK_VERDICT_MISMATCH;
    if (fa && fr && na == nr) {
        v = ck_compare(CK_F32, na, fa, fr, 0.0, 0.0, m);
        for (int64_t i = 0; mask_differs && i < na; i++)
            *mask_differs += (fa[i] == 0.0f) != (fr[i] == 0.0f);
    }
    free(fa);
    free(fr);
    return v;
}

static const ck_fw_run *run_at(const ck_fw_input *in, int i)
{
    return i >= 0 ? &in->runs[i] : NULL;
}

/* The two records hold the same tensors in the same order (names, kinds, steps, dtypes,
 * shapes); else a line naming the first difference. */
static ck_status check_layout(const ck_fw_input *in, const ck_fw_run *ref_run,
                              const ck_record *ref, const ck_fw_run *run, const ck_record *rec,
                              ck_error *err)
{
    int n = ref->n < rec->n ? ref->n : rec->n;
    for (int k = 0; k < n; k++) {
        const ck_record_entry *p = &ref->e[k], *q = &rec->e[k];
        if (strcmp(p->name, q->name) != 0 || p->kind != q->kind || p->step != q->step)
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: run \"%s\" step %d: %s `%s` where run \"%s\" has %s `%s`: the "
                           "runs must record the same tensors in the same order",
                           in->path, run->id, q->step, ck_tensor_kind_name(q->kind), q->name,
                           ref_run->id, ck_tensor_kind_name(p->kind), p->name);
        if (p->dtype != q->dtype || !ck_shape_equal(&p->shape, &q->shape))
            return ck_fail(err, CK_ERR_INPUT,
                           "%s: run \"%s\" step %d: %s `%s` has another dtype or shape than in "
                           "run \"%s\"",
                           in->path, run->id, q->step, ck_tensor_kind_name(q->kind), q->name,
                           ref_run->id);
    }
    if (ref->n != rec->n) {
        const ck_record_entry *extra = ref->n > rec->n ? &ref->e[n] : &rec->e[n];
        return ck_fail(err, CK_ERR_INPUT, "%s: %s `%s` at step %d is in run \"%s\" only",
                       in->path, ck_tensor_kind_name(extra->kind), extra->name, extra->step,
                       ref->n > rec->n ? ref_run->id : run->id);
    }
    return CK_OK;
}

static ck_status load_checked(const ck_fw_input *in, const ck_fw_run *ref_run,
                              const ck_record *ref, const ck_fw_run *run, ck_record *rec,
                              ck_error *err)
{
    CK_TRY(ck_fw_load_record(in, run, rec, err));
    return ref ? check_layout(in, ref_run, ref, run, rec, err) : CK_OK;
}

/* The first non-identical entry of a comparison of two records: how many differ. */
static int count_differing(const ck_tensor_result *t, int n, int *first)
{
    int count = 0;
    *first = -1;
    for (int k = 0; k < n; k++)
        if (t[k].verdict != CK_VERDICT_IDENTICAL) {
            if (*first < 0)
                *first = k;
            count++;
        }
    return count;
}

static void free_results(ck_tensor_result *t, int n)
{
    for (int i = 0; t && i < n; i++)
        free(t[i].name);
    free(t);
}

/* ---- the control pair and the ranks ------------------------------------------------------ */

static ck_status judge_control(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_run *pr,
                               const ck_record *plain, ck_fw_item *it, ck_error *err)
{
    int ci = ck_fw_find_run(in, CK_FW_CONTROL, pr->dtype, pr->mode, pr->rank, 0);
    if (ci < 0)
        return CK_OK;
    ck_record ctl;
    ck_status st = load_checked(in, pr, plain, &in->runs[ci], &ctl, err);
    ck_result tmp;
    memset(&tmp, 0, sizeof tmp);
    if (st == CK_OK)
        st = ck_compare_records(&m->g, plain, &ctl, &tmp, err);
    if (st == CK_OK) {
        it->control_ran = true;
        it->control_verdict = tmp.verdict;
        int first;
        it->control_differing = count_differing(tmp.tensors, tmp.n_tensors, &first);
        if (first >= 0) {
            const ck_tensor_result *t = &tmp.tensors[first];
            line(it->control_first, "%s `%s` at step %d (max_abs %.3g)",
                 ck_tensor_kind_name(t->kind), t->name, t->step, t->m.max_abs);
            line(it->extra_failures[it->n_extra_failures++],
                 "control: the plain run and the plain run again (\"%s\", \"%s\") differ in %d "
                 "tensors, first %s: the framework run is not deterministic, so no checkpoint "
                 "verdict means anything; make it deterministic first",
                 pr->id, in->runs[ci].id, it->control_differing, it->control_first);
        }
        /* the noise floor of the bisect section: what the control compared */
        ck_bisect_result *br = it->res.bisect;
        br->noise_floor_measured = true;
        br->floor = tmp.tensors;
        br->n_floor = tmp.n_tensors;
        br->floor_verdict = tmp.verdict;
        tmp.tensors = NULL;
        tmp.n_tensors = 0;
    }
    free_results(tmp.tensors, tmp.n_tensors);
    ck_record_free(&ctl);
    return st;
}

/* Rank r's gradients against rank 0's, for one role (plain or checkpointed). */
static ck_status judge_rank_pair(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_run *run,
                                 const ck_record *rec, int r0, ck_fw_item *it, ck_error *err)
{
    ck_record zero;
    ck_status st = load_checked(in, run, rec, &in->runs[r0], &zero, err);
    for (int k = 0; st == CK_OK && k < rec->n; k++) {
        const ck_record_entry *a = &rec->e[k], *b = &zero.e[k];
        if (a->kind != CK_KIND_GRAD)
            continue;
        ck_metrics mt;
        ck_verdict v = ck_compare(a->dtype, ck_shape_numel(&a->shape), a->data, b->data, 0.0, 0.0,
                                  &mt);
        if (v > it->ranks_verdict)
            it->ranks_verdict = v;
        if (v != CK_VERDICT_IDENTICAL && !it->ranks_first[0]) {
            line(it->ranks_first, "grad `%s` at step %d (max_abs %.3g)", a->name, a->step,
                 mt.max_abs);
            line(it->extra_failures[it->n_extra_failures++],
                 "ranks: rank %d's %s gradients differ from rank 0's, first %s: the processes "
                 "did not train the same model",
                 run->rank, ck_fw_role_name(run->role), it->ranks_first);
        }
    }
    (void)m;
    it->ranks_checked = it->ranks_checked || st == CK_OK;
    ck_record_free(&zero);
    return st;
}

/* ---- the recompute check ------------------------------------------------------------------ */

static ck_dtype module_dtype(char **names, const ck_dtype *dts, int n, const char *record_name)
{
    const char *hash = strchr(record_name, '#');
    size_t len = hash ? (size_t)(hash - record_name) : strlen(record_name);
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && strncmp(names[i], record_name, len) == 0)
            return dts[i];
    return CK_F32;
}

static ck_status add_check(ck_result *res, const ck_recompute_check *c, ck_error *err)
{
    ck_recompute_check *grown = realloc(res->recompute_checks,
                                        (size_t)(res->n_recompute_checks + 1) * sizeof *grown);
    if (!grown)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    res->recompute_checks = grown;
    grown[res->n_recompute_checks++] = *c;
    if (c->verdict != CK_VERDICT_IDENTICAL)
        res->recompute_mismatches++;
    return CK_OK;
}

/* Every recomputed module output of the checkpointed run against its original output. */
static ck_status recompute_checks(const ck_fw_input *in, const ck_fw_run *cr, ck_result *res,
                                  ck_error *err)
{
    ck_status st = CK_OK;
    for (int s = 0; s < cr->n_steps && st == CK_OK; s++) {
        if (!cr->steps[s].has[CK_FW_RECOMPUTED])
            continue;
        res->verified_recompute = true;
        ck_tensorset orig, rec;
        st = ck_fw_load_modules(in, cr, s, CK_FW_OUTPUTS, &orig, err);
        if (st == CK_OK)
            st = ck_fw_load_modules(in, cr, s, CK_FW_RECOMPUTED, &rec, err);
        else
            ck_tensorset_init(&rec);
        for (int k = 0; st == CK_OK && k < rec.n; k++) {
            const ck_named_tensor *r = &rec.t[k], *o = ck_tensorset_find(&orig, r->name);
            int mod = ck_fw_module_index(in, r->name);
            if (mod < 0 || !o) {
                st = ck_fail(err, CK_ERR_INPUT,
                             "%s: run \"%s\" step %d: recomputed output `%s` has no %s", in->path,
                             cr->id, s, r->name,
                             mod < 0 ? "module in the input's modules" : "original output");
                break;
            }
            ck_recompute_check c;
            memset(&c, 0, sizeof c);
            c.layer = mod;
            c.step = s;
            c.orig_dtype = module_dtype(cr->fwd_names, cr->fwd_dtypes, cr->n_fwd, r->name);
            c.recomp_dtype = module_dtype(cr->rec_names, cr->rec_dtypes, cr->n_rec, r->name);
            bool dropout = type_has(in->modules[mod].type, "dropout");
            c.verdict = compare_records(r, o, &c.m, dropout ? &c.rng_differs : NULL);
            if (!dropout)
                c.rng_differs = -1;
            st = add_check(res, &c, err);
        }
        ck_tensorset_free(&orig);
        ck_tensorset_free(&rec);
    }
    return st;
}

/* ---- where the runs part and why ------------------------------------------------------------ */

/* The first module (backward order: highest index first) whose output gradient differs
 * between the plain and the checkpointed run at step s. */
static ck_status backward_finding(const ck_fw_input *in, const ck_fw_run *pr, const ck_fw_run *cr,
                                  int s, ck_bisect_result *br, ck_error *err)
{
    ck_tensorset pg, cg;
    ck_status st = ck_fw_load_modules(in, pr, s, CK_FW_OUTPUT_GRADS, &pg, err);
    if (st == CK_OK)
        st = ck_fw_load_modules(in, cr, s, CK_FW_OUTPUT_GRADS, &cg, err);
    else
        ck_tensorset_init(&cg);
    for (int mod = in->n_modules - 1; st == CK_OK && mod >= 0 && br->backward.layer < 0; mod--) {
        for (int k = 0; k < pg.n; k++) {
            if (ck_fw_module_index(in, pg.t[k].name) != mod)
                continue;
            const ck_named_tensor *c = ck_tensorset_find(&cg, pg.t[k].name);
            ck_metrics mt;
            ck_verdict v;
            if (!c) { /* no gradient reached this module's output at all */
                memset(&mt, 0, sizeof mt);
                mt.numel = mt.n_outside = ck_shape_numel(&pg.t[k].shape);
                v = CK_VERDICT_MISMATCH;
            } else {
                v = compare_records(c, &pg.t[k], &mt, NULL);
            }
            if (v != CK_VERDICT_IDENTICAL) {
                br->backward.layer = mod;
                br->backward.step = s;
                br->backward.m = mt;
                br->backward.verdict = v;
                break;
            }
        }
    }
    ck_tensorset_free(&pg);
    ck_tensorset_free(&cg);
    return st;
}

static int64_t find_i64(const ck_record *rec, const char *name, int step)
{
    for (int k = 0; k < rec->n; k++)
        if (rec->e[k].step == step && rec->e[k].dtype == CK_I64 && strcmp(rec->e[k].name, name) == 0)
            return *(const int64_t *)rec->e[k].data;
    return -1;
}

/* The first buffer that differs at step s: its module, and num_batches_tracked when the
 * module has one. */
static void state_finding(const ck_fw_input *in, const ck_result *res, const ck_record *plain,
                          const ck_record *ckpt, int s, ck_bisect_result *br)
{
    for (int k = 0; k < res->n_tensors; k++) {
        const ck_tensor_result *t = &res->tensors[k];
        if (t->step != s || t->kind != CK_KIND_BUFFER || t->verdict == CK_VERDICT_IDENTICAL)
            continue;
        int mod = ck_fw_module_of(in, t->name);
        if (mod < 0)
            continue;
        br->state_layer = mod;
        snprintf(br->state_buffer, sizeof br->state_buffer, "%s",
                 t->name + strlen(in->modules[mod].name) + 1);
        br->state_m = t->m;
        char nbt[512];
        snprintf(nbt, sizeof nbt, "%s.num_batches_tracked", in->modules[mod].name);
        br->nbt_orig = find_i64(plain, nbt, s);
        br->nbt_recomp = find_i64(ckpt, nbt, s);
        return;
    }
}

/* Parameters the checkpointed run gave no gradient (None) at step s while the plain run
 * did: how many, and the first. */
static int missing_grads(const ck_fw_run *pr, const ck_fw_run *cr, int s, const char **first)
{
    int count = 0;
    *first = NULL;
    const ck_fw_step *cs = &cr->steps[s], *ps = &pr->steps[s];
    for (int i = 0; i < cs->n_grads_none; i++) {
        bool in_plain = false;
        for (int j = 0; j < ps->n_grads_none && !in_plain; j++)
            in_plain = strcmp(ps->grads_none[j], cs->grads_none[i]) == 0;
        if (in_plain)
            continue;
        if (!*first)
            *first = cs->grads_none[i];
        count++;
    }
    return count;
}

/* Variables the checkpointed run created while recomputing, at or before step s: the
 * recomputation built new layers (new random weights) instead of rerunning the forward's. */
static void recreated_weights(const ck_fw_run *cr, int s, ck_fw_item *it)
{
    for (int k = 0; k <= s && k < cr->n_steps; k++) {
        const ck_fw_step *st = &cr->steps[k];
        if (st->n_created_in_backward == 0)
            continue;
        add_cause(it, "weights re-created on recompute: %d variable%s created while recomputing "
                      "during backward at step %d (first `%s`): the recomputation built new "
                      "layers with new random weights instead of rerunning the forward's "
                      "(layers created inside the checkpointed function)",
                  st->n_created_in_backward, st->n_created_in_backward == 1 ? " was" : "s were",
                  k, st->created_in_backward[0]);
        return;
    }
}

static void explain(const ck_fw_input *in, const ck_fw_run *pr, const ck_fw_run *cr,
                    ck_fw_item *it)
{
    const ck_bisect_result *br = it->res.bisect;
    const ck_fw_module *mods = in->modules;
    if (br->step >= 0)
        recreated_weights(cr, br->step, it);
    const char *first_missing;
    int n_missing = br->step >= 0 ? missing_grads(pr, cr, br->step, &first_missing) : 0;
    int f = br->forward.layer;
    if (n_missing > 0) {
        int mod = ck_fw_module_of(in, first_missing);
        bool reentrant = cr->mode && strcmp(cr->mode, "reentrant") == 0;
        add_cause(it, "no gradient reached parameters inside a %s segment: %d parameter%s got "
                      "none at step %d while the plain run's did, first `%s`%s%s%s (a "
                      "reentrant checkpoint whose inputs need no gradient passes none to the "
                      "parameters inside)",
                  reentrant ? "reentrant" : "checkpointed", n_missing, n_missing == 1 ? "" : "s",
                  br->step, first_missing, mod >= 0 ? " of `" : "", mod >= 0 ? mods[mod].name : "",
                  mod >= 0 ? "`" : "");
    }
    if (f >= 0 && br->forward_orig_dtype != br->forward_recomp_dtype) {
        add_cause(it, "recomputed in %s, forward in %s: `%s` (%s) first differs at step %d "
                      "(max_abs %.3g)",
                  ck_dtype_name(br->forward_recomp_dtype), ck_dtype_name(br->forward_orig_dtype),
                  mods[f].name, mods[f].type, br->forward.step, br->forward.m.max_abs);
    } else if (f >= 0 && type_has(mods[f].type, "dropout")) {
        add_cause(it, "dropout mask redrawn on recompute: `%s` (%s) at step %d kept other "
                      "elements than in the forward (%" PRId64 " of %" PRId64 " mask elements "
                      "differ); the RNG state was not restored for the recomputation",
                  mods[f].name, mods[f].type, br->forward.step, br->rng.rng_differs,
                  br->forward.m.numel);
    } else if (f >= 0 && mods[f].random) {
        add_cause(it, "dropout mask redrawn on recompute: `%s` (%s) draws random numbers in "
                      "its forward, and its recomputed output differs from its original at "
                      "step %d (%" PRId64 " of %" PRId64 " elements, max_abs %.3g); the RNG "
                      "state was not restored for the recomputation",
                  mods[f].name, mods[f].type, br->forward.step,
                  br->forward.m.n_outside ? br->forward.m.n_outside : br->forward.m.numel,
                  br->forward.m.numel, br->forward.m.max_abs);
    } else if (f >= 0 && br->state_layer < 0) {
        add_cause(it, "`%s` (%s): its recomputed output differs from its original at step %d "
                      "(max_abs %.3g, %" PRId64 " of %" PRId64 " elements): cause unknown",
                  mods[f].name, mods[f].type, br->forward.step, br->forward.m.max_abs,
                  br->forward.m.n_outside ? br->forward.m.n_outside : br->forward.m.numel,
                  br->forward.m.numel);
    }
    if (br->state_layer >= 0) {
        const ck_fw_module *sm = &mods[br->state_layer];
        char nbt[96] = "";
        if (br->nbt_orig >= 0 && br->nbt_recomp >= 0)
            snprintf(nbt, sizeof nbt, " num_batches_tracked %" PRId64 " vs %" PRId64
                                      " in the plain run,", br->nbt_recomp, br->nbt_orig);
        if (type_has(sm->type, "batchnorm"))
            add_cause(it, "BatchNorm running statistics updated by the recomputation: `%s` (%s)"
                          "%s %s differs at step %d (max_abs %.3g): the recomputed forward ran "
                          "in training mode and updated them a second time (gradients are "
                          "unaffected)",
                      sm->name, sm->type, nbt, br->state_buffer, br->step, br->state_m.max_abs);
        else
            add_cause(it, "`%s` (%s) buffer %s changed during recomputation at step %d%s "
                          "(max_abs %.3g)",
                      sm->name, sm->type, br->state_buffer, br->step, nbt, br->state_m.max_abs);
    }
    if (it->n_causes == 0 && br->step >= 0) {
        if (br->backward.layer >= 0)
            add_cause(it, "no recomputed output and no buffer differs, but the output gradient "
                          "of `%s` (%s) differs first in backward order at step %d (max_abs "
                          "%.3g): cause unknown",
                      mods[br->backward.layer].name, mods[br->backward.layer].type,
                      br->backward.step, br->backward.m.max_abs);
        else if (!cr->steps[br->step].has[CK_FW_RECOMPUTED]) {
            int rnd = -1;
            for (int i = 0; i < in->n_modules && rnd < 0; i++)
                if (mods[i].random || type_has(mods[i].type, "dropout"))
                    rnd = i;
            if (rnd >= 0)
                add_cause(it, "the runs part at step %d; the checkpointed run recorded no module "
                              "outputs, so the recomputation cannot be compared module by "
                              "module, but `%s` (%s) draws random numbers: a mask redrawn on "
                              "recompute would look like this (cause not proven)",
                          br->step, mods[rnd].name, mods[rnd].type);
            else
                add_cause(it, "the runs part at step %d; the checkpointed run recorded no module "
                              "outputs to localise it: cause unknown",
                          br->step);
        } else
            add_cause(it, "the runs part at step %d, but no recomputed module output, buffer or "
                          "module output gradient differs: cause unknown",
                      br->step);
    }
}

/* Whether module `inner` is a submodule of `outer` by name: PyTorch's `blocks.0.attn` in
 * `blocks.0`, a Keras layer path `enc/conv0` in `enc`. */
static bool module_inside(const char *inner, const char *outer)
{
    size_t lo = strlen(outer);
    return strlen(inner) > lo && strncmp(inner, outer, lo) == 0 &&
           (inner[lo] == '.' || inner[lo] == '/');
}

/* Whether the recomputed output of module a is a better first divergence than that of b: a
 * lies inside b (the narrower place), or a comes first in module order and b does not lie
 * inside a. A checkpointed block and the layer inside it that first differs both differ;
 * the layer is where they part. */
static bool inside_first(const ck_fw_input *in, int a, int b)
{
    const char *na = in->modules[a].name, *nb = in->modules[b].name;
    if (module_inside(na, nb))
        return true;
    if (module_inside(nb, na))
        return false;
    return a < b;
}

static ck_status localise(const ck_fw_input *in, const ck_fw_run *pr, const ck_fw_run *cr,
                          const ck_record *plain, const ck_record *ckpt, ck_fw_item *it,
                          ck_error *err)
{
    ck_result *res = &it->res;
    ck_bisect_result *br = res->bisect;
    int s = res->first_divergence >= 0 ? res->tensors[res->first_divergence].step : -1;
    for (int k = 0; k < res->n_recompute_checks; k++) {
        const ck_recompute_check *c = &res->recompute_checks[k];
        if (c->verdict != CK_VERDICT_IDENTICAL && (s < 0 || c->step < s))
            s = c->step;
    }
    br->step = s;
    if (s < 0)
        return CK_OK;
    for (int k = 0; k < res->n_recompute_checks; k++) {
        const ck_recompute_check *c = &res->recompute_checks[k];
        if (c->step != s || c->verdict == CK_VERDICT_IDENTICAL)
            continue;
        if (br->forward.layer < 0 || inside_first(in, c->layer, br->forward.layer)) {
            br->forward.layer = c->layer;
            br->forward.step = s;
            br->forward.m = c->m;
            br->forward.verdict = c->verdict;
            br->forward_orig_dtype = c->orig_dtype;
            br->forward_recomp_dtype = c->recomp_dtype;
            br->rng = *c;
            if (c->rng_differs <= 0)
                br->rng.layer = -1;
        }
    }
    state_finding(in, res, plain, ckpt, s, br);
    if (cr->steps[s].has[CK_FW_OUTPUT_GRADS] && pr->steps[s].has[CK_FW_OUTPUT_GRADS])
        CK_TRY(backward_finding(in, pr, cr, s, br, err));
    explain(in, pr, cr, it);
    return CK_OK;
}

/* ---- one item ------------------------------------------------------------------------------ */

/* An fp32 run judged against the low plain run pr must have skipped the optimizer update at
 * exactly the steps pr's loss scaler skipped (as run's fp32 references do, skip_like):
 * otherwise, from the first step where one updated and the other did not, every parameter
 * compares two different models (a false FAIL, or a PASS of another model). */
static ck_status check_skips_like(const ck_fw_input *in, const ck_fw_run *pr, const ck_fw_run *r,
                                  ck_error *err)
{
    for (int s = 0; s < pr->n_steps && s < r->n_steps; s++) {
        if (pr->steps[s].skipped == r->steps[s].skipped)
            continue;
        return ck_fail(err, CK_ERR_INPUT,
                       "%s: run \"%s\" %s the optimizer update at step %d that the %s run \"%s\" "
                       "%s: an fp32 run judged against it must skip exactly the steps its loss "
                       "scaler skipped (a plain fp32 run of variant \"%s%s\" for the "
                       "reference), or every later parameter compares two different models",
                       in->path, r->id, pr->steps[s].skipped ? "applied" : "skipped", s,
                       ck_dtype_name(pr->dtype), pr->id,
                       pr->steps[s].skipped ? "skipped (its loss scaler saw inf/NaN)" : "applied",
                       CK_FW_SKIP_LIKE_PREFIX, ck_dtype_name(pr->dtype));
    }
    return CK_OK;
}

static bool any_step_skipped(const ck_fw_run *r)
{
    for (int s = 0; s < r->n_steps; s++)
        if (r->steps[s].skipped)
            return true;
    return false;
}

static ck_status judge_vs_fp32(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_run *pr,
                               const ck_record *low, ck_result *res, ck_error *err)
{
    /* where the low run's loss scaler skipped steps, its fp32 reference is the plain fp32 run
     * that skipped them too (variant skip_like:<dtype>); else the plain fp32 run */
    char variant[32];
    snprintf(variant, sizeof variant, "%s%s", CK_FW_SKIP_LIKE_PREFIX, ck_dtype_name(pr->dtype));
    int fi = any_step_skipped(pr) ? ck_fw_find_run(in, CK_FW_PLAIN, CK_F32, variant, pr->rank, 0)
                                  : -1;
    if (fi < 0)
        fi = ck_fw_find_run(in, CK_FW_PLAIN, CK_F32, NULL, pr->rank, 0);
    if (fi < 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: the %s runs need a plain fp32 run of rank %d to be "
                                          "judged against", in->path, ck_dtype_name(pr->dtype),
                       pr->rank);
    CK_TRY(check_skips_like(in, pr, &in->runs[fi], err));
    ck_record fp32, calib[CK_PRECISION_CALIB_RUNS];
    memset(calib, 0, sizeof calib);
    ck_status st = load_checked(in, pr, low, &in->runs[fi], &fp32, err);
    int n_calib = 0;
    for (int j = 0; j < CK_PRECISION_CALIB_RUNS && st == CK_OK; j++) {
        int ci = ck_fw_find_run(in, CK_FW_CALIBRATION, pr->dtype, NULL, pr->rank, j);
        if (ci < 0) {
            st = ck_fail(err, CK_ERR_INPUT, "%s: no calibration run %d for %s (rank %d): the "
                                            "judgement against fp32 needs %d",
                         in->path, j, ck_dtype_name(pr->dtype), pr->rank,
                         CK_PRECISION_CALIB_RUNS);
            break;
        }
        st = check_skips_like(in, pr, &in->runs[ci], err);
        if (st == CK_OK)
            st = load_checked(in, pr, low, &in->runs[ci], &calib[j], err);
        n_calib = j + 1;
    }
    if (st == CK_OK)
        st = ck_compare_vs_fp32(&m->g, pr->dtype, &fp32, calib, n_calib, low, NULL, res, err);
    ck_record_free(&fp32);
    for (int j = 0; j < CK_PRECISION_CALIB_RUNS; j++)
        ck_record_free(&calib[j]);
    return st;
}

static void memory_facts(const ck_fw_run *pr, const ck_fw_run *cr, ck_fw_item *it)
{
    it->plain_saved_peak = it->ckpt_saved_peak = -1;
    it->plain_device_peak = it->ckpt_device_peak = -1;
    for (int s = 0; s < pr->n_steps; s++) {
        const ck_fw_step *p = &pr->steps[s], *c = &cr->steps[s];
        if (p->saved_bytes_peak > it->plain_saved_peak)
            it->plain_saved_peak = p->saved_bytes_peak;
        if (c->saved_bytes_peak > it->ckpt_saved_peak)
            it->ckpt_saved_peak = c->saved_bytes_peak;
        if (p->device_peak_bytes > it->plain_device_peak)
            it->plain_device_peak = p->device_peak_bytes;
        if (c->device_peak_bytes > it->ckpt_device_peak)
            it->ckpt_device_peak = c->device_peak_bytes;
        it->recomputed_calls += c->recomputed_calls;
    }
}

/* A part the driver wrapped that never recomputed: checkpointing did not run inside it, so
 * "identical" there is what a no-op gives. One line for all such parts. */
static void parts_check(const ck_fw_run *cr, ck_fw_item *it)
{
    char buf[CK_FW_LINE] = "";
    size_t used = 0;
    int bad = 0;
    for (int k = 0; k < cr->n_parts; k++) {
        const ck_fw_part *p = &cr->parts[k];
        if (p->recomputed > 0)
            continue;
        int w = snprintf(buf + used, sizeof buf - used, "%s`%s` (%" PRId64 " forward calls, "
                         "recomputed 0 times)", bad ? ", " : "", p->name, p->forward_calls);
        if (w > 0 && (size_t)w < sizeof buf - used)
            used += (size_t)w;
        bad++;
    }
    if (bad > 0 && it->n_extra_failures < 3)
        line(it->extra_failures[it->n_extra_failures++], "checkpointing did not run inside %s",
             buf);
}

static ck_status judge_records(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_judge_opts *o,
                               const ck_fw_run *pr, const ck_fw_run *cr, ck_record *plain,
                               ck_record *ckpt, ck_fw_item *it, ck_error *err)
{
    ck_result *res = &it->res;
    CK_TRY(ck_compare_records(&m->g, plain, ckpt, res, err));
    ck_vacuity_measure(plain, pr->dtype, &res->plain.vacuity);
    ck_vacuity_measure(ckpt, cr->dtype, &res->ckpt.vacuity);
    memory_facts(pr, cr, it);
    parts_check(cr, it);
    for (int i = 0; i < in->n_modules; i++)
        it->wrapped_modules += in->modules[i].wrapped;
    CK_TRY(recompute_checks(in, cr, res, err));
    CK_TRY(judge_control(in, m, pr, plain, it, err));
    if (pr->rank > 0) {
        int p0 = ck_fw_find_run(in, CK_FW_PLAIN, pr->dtype, pr->mode, 0, 0);
        int c0 = ck_fw_find_run(in, CK_FW_CHECKPOINTED, cr->dtype, cr->mode, 0, 0);
        if (p0 >= 0)
            CK_TRY(judge_rank_pair(in, m, pr, plain, p0, it, err));
        if (c0 >= 0)
            CK_TRY(judge_rank_pair(in, m, cr, ckpt, c0, it, err));
    }
    if (pr->dtype != CK_F32)
        CK_TRY(judge_vs_fp32(in, m, pr, plain, res, err));
    if (o->bisect)
        CK_TRY(localise(in, pr, cr, plain, ckpt, it, err));
    return CK_OK;
}

static ck_status judge_item(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_judge_opts *o,
                            int ci, ck_fw_item *it, ck_error *err)
{
    const ck_fw_run *cr = &in->runs[ci];
    int pi = ck_fw_find_run(in, CK_FW_PLAIN, cr->dtype, cr->reference, cr->rank, 0);
    const ck_fw_run *pr = run_at(in, pi);
    it->ckpt_run = ci;
    it->plain_run = pi;
    snprintf(it->label, sizeof it->label, "%s %s %s%s", in->model_name, cr->mode,
             ck_dtype_name(cr->dtype), cr->rank > 0 ? " rank" : "");
    if (cr->rank > 0) {
        size_t used = strlen(it->label);
        snprintf(it->label + used, sizeof it->label - used, "%d", cr->rank);
    }
    ck_result *res = &it->res;
    it->cs = m->cs;
    it->cs.name = it->label;
    res->cs = &it->cs;
    res->g = &m->g;
    res->dtype = cr->dtype;
    res->first_divergence = res->first_scale_mismatch = -1;
    res->vs_fp32_first = res->vs_fp32_worst = res->vs_backend_first = -1;
    res->precision_check = CK_PRECISION_CHECK_FAIL;
    snprintf(res->backend, sizeof res->backend, "%s", in->framework);
    snprintf(res->backend_device, sizeof res->backend_device, "%s", in->device);
    snprintf(res->backend_versions, sizeof res->backend_versions, "%s %s", in->framework,
             in->framework_version);
    res->bisect = calloc(1, sizeof *res->bisect);
    if (!res->bisect)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    ck_bisect_result *br = res->bisect;
    br->step = -1;
    br->forward.layer = br->backward.layer = br->nondet.layer = br->state_layer = -1;
    br->rng.layer = -1;
    br->nbt_orig = br->nbt_recomp = -1;

    ck_record plain, ckpt;
    memset(&ckpt, 0, sizeof ckpt);
    ck_status st = ck_fw_load_record(in, pr, &plain, err);
    if (st == CK_OK)
        st = load_checked(in, pr, &plain, cr, &ckpt, err);
    if (st == CK_OK)
        st = judge_records(in, m, o, pr, cr, &plain, &ckpt, it, err);
    if (st == CK_OK) {
        ck_fill_summary(&res->plain, "plain", &plain);
        ck_fill_summary(&res->ckpt, "checkpointed", &ckpt);
        res->memory_saving = res->plain.peak_activation_bytes > 0
                                 ? 1.0 - (double)res->ckpt.peak_activation_bytes /
                                             (double)res->plain.peak_activation_bytes
                                 : 0.0;
        res->memory_met = !m->cs.has_min_memory_saving ||
                          res->memory_saving >= m->cs.min_memory_saving;
        ck_result_judge(res);
        it->pass = res->pass && it->n_extra_failures == 0;
    }
    ck_record_free(&plain);
    ck_record_free(&ckpt);
    return st;
}

ck_status ck_fw_judge(const ck_fw_input *in, const ck_fw_model *m, const ck_fw_judge_opts *o,
                      ck_fw_item **items, int *n, ck_error *err)
{
    *items = NULL;
    *n = 0;
    int count = 0;
    for (int i = 0; i < in->n_runs; i++)
        count += in->runs[i].role == CK_FW_CHECKPOINTED;
    if (count == 0)
        return ck_fail(err, CK_ERR_INPUT, "%s: runs: no checkpointed run to judge", in->path);
    ck_fw_item *it = calloc((size_t)count, sizeof *it);
    if (!it)
        return ck_fail(err, CK_ERR_NOMEM, "out of memory");
    *items = it;
    ck_status st = CK_OK;
    for (int i = 0; i < in->n_runs && st == CK_OK; i++) {
        if (in->runs[i].role != CK_FW_CHECKPOINTED)
            continue;
        st = judge_item(in, m, o, i, &it[*n], err);
        (*n)++;
    }
    return st;
}

void ck_fw_items_free(ck_fw_item *items, int n)
{
    for (int i = 0; items && i < n; i++)
        ck_result_free(&items[i].res);
    free(items);
}
