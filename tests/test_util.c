/*
 * Helpers shared by the Check suites (see test_util.h). No suite of its own.
 */
#include "tests/test_util.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/registry.h"
#include "harness/core/half.h"
#include "harness/core/rng.h"
#include "harness/io/tensorload.h"
#include "harness/io/tensorset.h"
#include "harness/verify/gradcheck.h"

/* ---- the CPU backend ---- */

ck_backend *tu_cpu;

ck_backend *tu_cpu_backend(void)
{
    ck_backend *b = NULL;
    ck_error err = {{0}};
    ck_assert_msg(ck_backend_create("cpu", NULL, &b, &err) == CK_OK, "cpu backend: %s", err.msg);
    return b;
}

void tu_cpu_setup(void)
{
    tu_cpu = tu_cpu_backend();
}

void tu_cpu_teardown(void)
{
    tu_cpu->destroy(tu_cpu);
    tu_cpu = NULL;
}

/* ---- host tensors ---- */

ck_tensor *tu_tensor_new(const char *name, ck_dtype dt, ck_shape shape)
{
    ck_tensor *t = calloc(1, sizeof *t);
    ck_assert_ptr_nonnull(t);
    t->name = name;
    t->dtype = dt;
    t->shape = shape;
    t->data = calloc((size_t)(ck_shape_numel(&shape) ? ck_shape_numel(&shape) : 1),
                     ck_dtype_size(dt));
    ck_assert_ptr_nonnull(t->data);
    return t;
}

void tu_tensor_free(ck_tensor *t)
{
    if (t)
        free(t->data);
    free(t);
}

double tu_tget(const ck_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case CK_F32: return ((const float *)t->data)[i];
    case CK_F64: return ((const double *)t->data)[i];
    case CK_F16: return ck_f16_to_f32(((const uint16_t *)t->data)[i]);
    case CK_BF16: return ck_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: ck_abort_msg("tget: dtype %s", ck_dtype_name(t->dtype)); return 0.0;
    }
}

void tu_tset(ck_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case CK_F32: ((float *)t->data)[i] = (float)v; break;
    case CK_F64: ((double *)t->data)[i] = v; break;
    case CK_F16: ((uint16_t *)t->data)[i] = ck_f64_to_f16(v); break;
    case CK_BF16: ((uint16_t *)t->data)[i] = ck_f64_to_bf16(v); break;
    default: ck_abort_msg("tset: dtype %s", ck_dtype_name(t->dtype));
    }
}

ck_tensor *tu_tensor_of(const char *name, ck_dtype dt, ck_shape shape, const double *v)
{
    ck_tensor *t = tu_tensor_new(name, dt, shape);
    for (int64_t i = 0; i < ck_shape_numel(&shape); i++)
        tu_tset(t, i, v[i]);
    return t;
}

ck_tensor *tu_tensor_rand(const char *name, ck_dtype dt, ck_shape shape, uint64_t seed,
                          uint32_t slot, bool normal)
{
    ck_tensor *t = tu_tensor_new(name, dt, shape);
    ck_rng_stream s = ck_rng_keyed(seed, slot, CK_PURPOSE_TEST, 5);
    for (int64_t i = 0; i < ck_shape_numel(&shape); i++)
        tu_tset(t, i, (float)(normal ? ck_rng_normal_f64(&s, (uint64_t)i)
                                     : 2.0 * ck_rng_uniform_f64(&s, (uint64_t)i) - 1.0));
    return t;
}

void tu_assert_values(const char *desc, const ck_tensor *t, const double *want, double rtol,
                      double atol)
{
    for (int64_t i = 0; i < ck_shape_numel(&t->shape); i++) {
        double got = tu_tget(t, i);
        ck_assert_msg(fabs(got - want[i]) <= atol + rtol * fabs(want[i]),
                      "%s (%s): element %lld is %.17g, want %.17g", desc,
                      ck_dtype_name(t->dtype), (long long)i, got, want[i]);
    }
}

/* ---- ops through tu_cpu ---- */

void tu_forward_ok(const char *desc, const ck_op_params *op, const ck_fwd_args *args,
                   ck_op_io *io)
{
    ck_error err = {{0}};
    ck_status st = tu_cpu->forward(tu_cpu, op, args, io, &err);
    ck_assert_msg(st == CK_OK, "%s: forward failed: %s", desc, err.msg);
}

void tu_backward_ok(const char *desc, const ck_op_params *op, const ck_fwd_args *args,
                    const ck_op_io *io, ck_op_grads *g)
{
    ck_error err = {{0}};
    ck_status st = tu_cpu->backward(tu_cpu, op, args, io, g, &err);
    ck_assert_msg(st == CK_OK, "%s: backward failed: %s", desc, err.msg);
}

ck_node tu_node_make(ck_op_params op, int n_in, ck_shape out_shape)
{
    ck_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    n.n_in = n_in;
    for (int i = 0; i < n_in; i++)
        n.in[i] = -1;
    n.out_shape = out_shape;
    return n;
}

void tu_gradcheck_ok(const char *desc, const ck_node *node, const ck_shape *in_shapes,
                     const ck_fwd_args *args, uint64_t seed)
{
    ck_fwd_args zero;
    memset(&zero, 0, sizeof zero);
    ck_gradcheck_result res;
    ck_error err = {{0}};
    ck_status st = ck_gradcheck_op(tu_cpu, node, in_shapes, args ? args : &zero, seed, NULL,
                                   &res, &err);
    ck_assert_msg(st == CK_OK, "%s: gradcheck did not run: %s", desc, err.msg);
    ck_assert_int_eq(res.n, node->n_in + node->n_params);
    char report[2048];
    size_t used = 0;
    for (int i = 0; i < res.n && used < sizeof report; i++) {
        const ck_gradcheck_entry *e = &res.e[i];
        ck_assert_msg(e->checked > 0, "%s: %s: nothing checked", desc, e->name);
        int w = snprintf(report + used, sizeof report - used,
                         "%s%s: %lld/%lld failed, max abs err %.3g, worst [%lld] %.10g vs %.10g",
                         i ? "; " : "", e->name, (long long)e->failed, (long long)e->checked,
                         e->max_abs_err, (long long)e->worst_index, e->worst_analytic,
                         e->worst_numeric);
        if (w > 0)
            used += (size_t)w;
    }
    ck_assert_msg(res.ok, "%s: %s", desc, report);
}

/* ---- cases ---- */

const char *tu_root(void)
{
    const char *r = getenv("CK_ROOT");
    return r ? r : ".";
}

void tu_build_named(tu_built_case *bc, const char *json, const char *path)
{
    ck_error err;
    ck_status st = ck_case_parse(json, strlen(json), path, &bc->cs, &err);
    ck_assert_msg(st == CK_OK, "parse: %s", err.msg);
    st = ck_graph_build(&bc->cs, &bc->g, &err);
    ck_assert_msg(st == CK_OK, "graph: %s", err.msg);
}

void tu_build_text(tu_built_case *bc, const char *json)
{
    tu_build_named(bc, json, "inline.json");
}

void tu_build_file(tu_built_case *bc, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/cases/%s", tu_root(), name);
    ck_error err;
    ck_status st = ck_case_load(path, &bc->cs, &err);
    ck_assert_msg(st == CK_OK, "load %s: %s", path, err.msg);
    st = ck_graph_build(&bc->cs, &bc->g, &err);
    ck_assert_msg(st == CK_OK, "graph %s: %s", path, err.msg);
}

void tu_free_built(tu_built_case *bc)
{
    ck_graph_free(&bc->g);
    ck_case_free(&bc->cs);
}

/* ---- tensor-file fixtures (tests/fixtures, made by make_fixtures.py) ---- */

void tu_fixture_path(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/tests/fixtures/%s", tu_root(), rel);
}

void tu_check_bad_fixtures(const char *prefix)
{
    char expect[512], line[512];
    tu_fixture_path(expect, sizeof expect, "bad/EXPECT");
    FILE *f = fopen(expect, "r");
    ck_assert_msg(f != NULL, "cannot open %s (set CK_ROOT)", expect);
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || strncmp(line, prefix, strlen(prefix)) != 0)
            continue;
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        ck_assert_ptr_nonnull(tab);
        *tab = '\0';
        const char *frag = tab + 1;
        char path[1200], rel[600];
        snprintf(rel, sizeof rel, "bad/%s", line);
        tu_fixture_path(path, sizeof path, rel);
        ck_tensorset s;
        ck_error err = {{0}};
        ck_status st = ck_tensorset_load(path, &s, &err);
        ck_assert_msg(st == CK_ERR_INPUT, "%s: status %s, want bad input (%s)", line,
                      ck_status_str(st), err.msg);
        ck_assert_msg(strstr(err.msg, path) != NULL, "%s: message does not name the file: %s",
                      line, err.msg);
        ck_assert_msg(strstr(err.msg, frag) != NULL, "%s: message lacks \"%s\": %s", line, frag,
                      err.msg);
        ck_assert_msg(strchr(err.msg, '\n') == NULL, "%s: message is not one line", line);
        ck_assert_int_eq(s.n, 0);
        rows++;
    }
    fclose(f);
    ck_assert_msg(rows >= 10, "only %d bad fixtures start with %s", rows, prefix);
}
