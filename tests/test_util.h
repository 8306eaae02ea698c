/*
 * Helpers shared by the Check suites (tests/test_util.c): shape and array macros, the CPU
 * backend as a fixture, host tensors in any float dtype, op dispatch and gradcheck
 * assertions through that backend, and cases built from JSON text or from cases/.
 *
 * Every helper asserts with Check, so it may only be called from inside a test (or a
 * checked fixture).
 */
#ifndef CK_TEST_UTIL_H
#define CK_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "harness/model/graph.h"

/* SHAPE(2, 3): a ck_shape value (an expression). SHAPE_INIT(2, 3): the same shape as a
 * brace initializer, for static tables ({.in = {SHAPE_INIT(2, 3)}}). */
#define SHAPE(...)                                                                         \
    ck_shape_make((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),              \
                  (int64_t[]){__VA_ARGS__})
#define SHAPE_INIT(...)                                                                    \
    {                                                                                      \
        .ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                 \
        .dim = {__VA_ARGS__}                                                               \
    }
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ck_assert_msg records its location on every call (a write to Check's channel): in loops
 * over many elements only a failure may reach Check */
#define REQUIRE(cond, ...)                                                                 \
    do {                                                                                   \
        if (!(cond))                                                                       \
            ck_abort_msg(__VA_ARGS__);                                                     \
    } while (0)

/* fp32 results are the double result rounded once: within one fp32 ulp of it */
#define F32_ULP 1.1920928955078125e-7

/* ---- the CPU backend ---- */

/* The backend of tu_cpu_setup/tu_cpu_teardown (a checked fixture: every test of the
 * TCase gets a fresh one). */
extern ck_backend *tu_cpu;
void tu_cpu_setup(void);
void tu_cpu_teardown(void);

/* A new CPU backend; the caller destroys it. */
ck_backend *tu_cpu_backend(void);

/* ---- host tensors ---- */

/* A zero-filled tensor (at least one element is allocated, so empty shapes work too). The
 * name is not copied. */
ck_tensor *tu_tensor_new(const char *name, ck_dtype dt, ck_shape shape);
void tu_tensor_free(ck_tensor *t);

/* Element i of a float tensor (fp32, fp64, fp16, bf16) as a double; other dtypes abort. */
double tu_tget(const ck_tensor *t, int64_t i);
/* Stores v into element i, rounded to t's float dtype; other dtypes abort. */
void tu_tset(ck_tensor *t, int64_t i, double v);

/* A tensor holding v (numel values). */
ck_tensor *tu_tensor_of(const char *name, ck_dtype dt, ck_shape shape, const double *v);

/* N(0, 1) (normal) or U(-1, 1) values from the test stream (seed, slot), rounded through
 * fp32 so that fp32 and fp64 tensors hold the same numbers. */
ck_tensor *tu_tensor_rand(const char *name, ck_dtype dt, ck_shape shape, uint64_t seed,
                          uint32_t slot, bool normal);

/* Every element within atol + rtol |want| of want. */
void tu_assert_values(const char *desc, const ck_tensor *t, const double *want, double rtol,
                      double atol);

/* ---- ops through tu_cpu ---- */

void tu_forward_ok(const char *desc, const ck_op_params *op, const ck_fwd_args *args,
                   ck_op_io *io);
void tu_backward_ok(const char *desc, const ck_op_params *op, const ck_fwd_args *args,
                    const ck_op_io *io, ck_op_grads *g);

/* A node of op with n_in inputs (none from the graph) and no parameters. */
ck_node tu_node_make(ck_op_params op, int n_in, ck_shape out_shape);

/* ck_gradcheck_op on tu_cpu passes for every input and parameter of node (args NULL: all
 * zero); the failure message lists every entry. */
void tu_gradcheck_ok(const char *desc, const ck_node *node, const ck_shape *in_shapes,
                     const ck_fwd_args *args, uint64_t seed);

/* ---- cases ---- */

typedef struct {
    ck_case cs;
    ck_graph g;
} tu_built_case;

/* The repository root: $CK_ROOT, or "." when unset. */
const char *tu_root(void);

/* Parses json (as the file `path`, which only names it in messages and cs.path) and builds
 * its graph. tu_build_text names it "inline.json". */
void tu_build_named(tu_built_case *bc, const char *json, const char *path);
void tu_build_text(tu_built_case *bc, const char *json);
/* Loads <root>/cases/<name> and builds its graph. */
void tu_build_file(tu_built_case *bc, const char *name);
void tu_free_built(tu_built_case *bc);

/* ---- tensor-file fixtures ---- */

/* <root>/tests/fixtures/<rel> */
void tu_fixture_path(char *buf, size_t n, const char *rel);
/* Every row of bad/EXPECT whose file name starts with prefix: refused by ck_tensorset_load
 * with CK_ERR_INPUT, one line naming the file and the expected fragment, an empty set. */
void tu_check_bad_fixtures(const char *prefix);

#endif
