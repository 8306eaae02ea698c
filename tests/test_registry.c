/*
 * The backend registry (backends/registry.h): what it answers for `cuda` on a machine
 * without a GPU, with the module missing, or in a program built without CUDA (one clean
 * line, the right status, no crash); the names it knows; the preflight's message; the
 * cpu-as-cuda stand-in refusing what the CUDA backend refuses.
 *
 * Every CUDA runtime call happens inside a test, so with CK_FORK (the default) it runs in
 * the forked child and the runner's own process never initialises CUDA. On a machine with
 * a GPU the availability tests check the other branch: create succeeds and the backend
 * describes its device.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "backends/cuda/algo_pin.h"
#include "backends/cuda/cuda_api.h"
#include "backends/cuda/mem_account.h"
#include "backends/cuda/op_support.h"
#include "backends/registry.h"

// ----------------------------------------------------------------------------
// without a GPU: one clean line, the right status

/* One line: non-empty, no newline, ends in a printable character. */
static void assert_one_line(const char *s, const char *what)
{
    ck_assert_msg(s[0] != '\0', "%s: empty", what);
    ck_assert_msg(strchr(s, '\n') == NULL && strchr(s, '\r') == NULL, "%s: '%s' spans lines",
                  what, s);
}

START_TEST(available_answers_with_one_line)
{
    char why[256];
    memset(why, 'x', sizeof why);
    bool ok = ck_backend_available("cuda", why, sizeof why);
    ck_assert_msg(memchr(why, '\0', sizeof why) != NULL, "the reason is NUL-terminated");
    assert_one_line(why, "ck_backend_available");
#ifndef CK_CUDA_MODULE_BUILT
    ck_assert(!ok);
    ck_assert_msg(strstr(why, "built without CUDA") != NULL, "'%s'", why);
#else
    if (!ok)
        ck_assert_msg(strstr(why, "CUDA") != NULL, "'%s' names the cause", why);
#endif
    /* a NULL or empty buffer is fine too */
    ck_assert(ck_backend_available("cuda", NULL, 0) == ok);
    char tiny[1] = {'x'};
    ck_assert(ck_backend_available("cuda", tiny, sizeof tiny) == ok);
    ck_assert_int_eq(tiny[0], '\0');
}
END_TEST

START_TEST(create_fails_cleanly_without_a_gpu_or_works_with_one)
{
    char why[256];
    bool gpu = ck_backend_available("cuda", why, sizeof why);
    ck_backend *b = (ck_backend *)(uintptr_t)1;
    ck_error err;
    memset(&err, 0, sizeof err);
    ck_backend_options o = {.device = 0, .algo = NULL};
    ck_status st = ck_backend_create("cuda", &o, &b, &err);
    if (gpu) {
        ck_assert_msg(st == CK_OK, "%s", err.msg);
        ck_backend_info info;
        b->info(b, &info);
        ck_assert_str_eq(info.name, "cuda");
        assert_one_line(info.device, "device");
        assert_one_line(info.versions, "versions");
        ck_algo_records_fn records = (ck_algo_records_fn)(uintptr_t)ck_backend_proc(b, CK_PROC_ALGO_RECORDS);
        ck_assert_ptr_nonnull((void *)(uintptr_t)records);
        ck_assert_int_eq(records(b, NULL, 0), 0);
        b->destroy(b);
        return;
    }
    ck_assert_ptr_null(b);
    ck_assert_msg(st == CK_ERR_BACKEND || st == CK_ERR_UNSUPPORTED, "status %d", (int)st);
    ck_assert_msg(strstr(err.msg, "--backend cuda: ") == err.msg, "'%s'", err.msg);
#ifndef CK_CUDA_MODULE_BUILT
    ck_assert_int_eq(st, CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "built without CUDA") != NULL, "'%s'", err.msg);
    ck_assert_msg(strstr(err.msg, "CUDA_HOME") != NULL, "'%s' says how to rebuild", err.msg);
#endif
    assert_one_line(err.msg, "ck_backend_create(cuda)");
}
END_TEST

START_TEST(create_checks_its_arguments_first)
{
    ck_backend *b = NULL;
    ck_error err;
    char why[256];
    if (!ck_backend_available("cuda", why, sizeof why) && strstr(why, "module") == NULL &&
        strstr(why, "built without") == NULL) {
        /* the module loads (no GPU here): its argument checks come before the GPU's */
        ck_backend_options o = {.device = -1, .algo = NULL};
        ck_assert_int_eq(ck_backend_create("cuda", &o, &b, &err), CK_ERR_INPUT);
        ck_assert_msg(strstr(err.msg, "--device -1") != NULL, "'%s'", err.msg);
        ck_assert_ptr_null(b);
        o = (ck_backend_options){.device = 0, .algo = "sometimes"};
        ck_assert_int_eq(ck_backend_create("cuda", &o, &b, &err), CK_ERR_INPUT);
        ck_assert_msg(strstr(err.msg, "--algo sometimes") != NULL, "'%s'", err.msg);
        ck_assert_ptr_null(b);
        /* a device number past the last one: CK_ERR_INPUT with a GPU, BACKEND without */
        o = (ck_backend_options){.device = 4096, .algo = "fastest"};
        ck_status st = ck_backend_create("cuda", &o, &b, &err);
        ck_assert(st == CK_ERR_INPUT || st == CK_ERR_BACKEND);
        ck_assert_ptr_null(b);
        assert_one_line(err.msg, "device 4096");
    } else {
        ck_backend_options o = {.device = -1, .algo = NULL};
        ck_status st = ck_backend_create("cuda", &o, &b, &err);
        ck_assert(st != CK_OK);
        ck_assert_ptr_null(b);
    }
}
END_TEST

START_TEST(a_missing_module_is_one_line_naming_it)
{
    /* what a CPU-only machine sees when the program was built with CUDA but the module (or
     * a library it needs) cannot be loaded; CK_FORK gives this test its own registry state */
    setenv("CK_CUDA_MODULE", "/nonexistent/ckpt-harness-cuda.so", 1);
    ck_backend *b = NULL;
    ck_error err;
    ck_status st = ck_backend_create("cuda", NULL, &b, &err);
    ck_assert_int_eq(st, CK_ERR_UNSUPPORTED);
    ck_assert_ptr_null(b);
    assert_one_line(err.msg, "missing module");
#ifdef CK_CUDA_MODULE_BUILT
    ck_assert_msg(strstr(err.msg, "cannot be loaded") != NULL, "'%s'", err.msg);
    ck_assert_msg(strstr(err.msg, "/nonexistent/ckpt-harness-cuda.so") != NULL, "'%s'", err.msg);
#endif
    unsetenv("CK_CUDA_MODULE");
}
END_TEST

START_TEST(registry_knows_its_backends_and_refuses_others)
{
    ck_assert_int_ge(ck_backend_count(), 2);
    bool cpu = false, cuda = false;
    for (int i = 0; i < ck_backend_count(); i++) {
        cpu |= strcmp(ck_backend_name_at(i), "cpu") == 0;
        cuda |= strcmp(ck_backend_name_at(i), "cuda") == 0;
        ck_assert_ptr_nonnull(ck_backend_summary_at(i));
    }
    ck_assert(cpu && cuda);
    ck_assert_ptr_null(ck_backend_name_at(ck_backend_count()));
    ck_backend *b = (ck_backend *)(uintptr_t)1;
    ck_error err;
    ck_assert_int_eq(ck_backend_create("tpu", NULL, &b, &err), CK_ERR_INPUT);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(err.msg, "--backend tpu: unknown backend") != NULL, "'%s'", err.msg);
    ck_assert(!ck_backend_available("tpu", NULL, 0));
}
END_TEST

START_TEST(records_are_absent_for_other_backends)
{
    ck_backend *cpu = NULL;
    ck_error err;
    ck_assert_int_eq(ck_backend_create("cpu", NULL, &cpu, &err), CK_OK);
    ck_assert_ptr_null(ck_backend_proc(cpu, CK_PROC_ALGO_RECORDS));
    ck_assert_ptr_null(ck_backend_proc(cpu, CK_PROC_ALGO_RECORDS_CLEAR));
    ck_assert_ptr_null(ck_backend_proc(NULL, CK_PROC_ALGO_RECORDS));
    cpu->destroy(cpu);
}
END_TEST

START_TEST(check_ops_names_the_first_unsupported_layer)
{
    ck_backend *cpu = NULL;
    ck_error err;
    ck_assert_int_eq(ck_backend_create("cpu", NULL, &cpu, &err), CK_OK);
    ck_op_params ok_op, bad_op;
    memset(&ok_op, 0, sizeof ok_op);
    memset(&bad_op, 0, sizeof bad_op);
    ok_op.kind = CK_OP_RELU;
    bad_op.kind = (ck_op_kind)CK_OP_KIND_COUNT; /* no backend has it */
    const ck_op_params *ops[2] = {&ok_op, &bad_op};
    const char *names[2] = {"act1", "mystery"};
    const char *op_names[2] = {"relu", "mystery_op"};
    ck_assert_int_eq(ck_backend_check_ops(cpu, 1, ops, names, op_names, CK_F32, "x.json", &err),
                     CK_OK);
    ck_assert_int_eq(ck_backend_check_ops(cpu, 2, ops, names, op_names, CK_F32, "x.json", &err),
                     CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "x.json: layer `mystery` (mystery_op)") == err.msg, "'%s'",
                  err.msg);
    cpu->destroy(cpu);
}
END_TEST

START_TEST(cpu_as_cuda_refuses_what_cuda_refuses)
{
    ck_backend *b = NULL;
    ck_error err;
    ck_assert_int_eq(ck_backend_create("cpu-as-cuda", NULL, &b, &err), CK_OK);
    ck_assert_str_eq(b->name, "cpu-as-cuda");
    ck_op_params op;
    ck_op_params_default(&op, CK_OP_BATCHNORM, 2);
    const ck_dtype dts[] = {CK_F32, CK_F16, CK_BF16, CK_F64};
    for (int d = 0; d < 4; d++) {
        op.low_precision_reduction = false;
        ck_assert(b->supports(b, &op, dts[d]) && ck_cuda_supports_op(&op, dts[d]));
        op.low_precision_reduction = true;
        ck_assert(!b->supports(b, &op, dts[d]) && !ck_cuda_supports_op(&op, dts[d]));
    }
    const ck_op_params *ops[1] = {&op};
    const char *names[1] = {"bn1"}, *op_names[1] = {"batchnorm"};
    ck_assert_int_eq(ck_backend_check_ops(b, 1, ops, names, op_names, CK_F16, "x.json", &err),
                     CK_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err.msg, "low-precision reductions") != NULL, "'%s'", err.msg);
    b->destroy(b);
}
END_TEST

Suite *suite_registry(void)
{
    Suite *s = suite_create("registry");
    TCase *dev = tcase_create("device");
    /* loading libcudart/libcudnn and probing the driver can take a moment */
    tcase_set_timeout(dev, 30);
    tcase_add_test(dev, available_answers_with_one_line);
    tcase_add_test(dev, create_fails_cleanly_without_a_gpu_or_works_with_one);
    tcase_add_test(dev, create_checks_its_arguments_first);
    tcase_add_test(dev, records_are_absent_for_other_backends);
    tcase_add_test(dev, a_missing_module_is_one_line_naming_it);
    tcase_add_test(dev, registry_knows_its_backends_and_refuses_others);
    tcase_add_test(dev, check_ops_names_the_first_unsupported_layer);
    tcase_add_test(dev, cpu_as_cuda_refuses_what_cuda_refuses);
    suite_add_tcase(s, dev);
    return s;
}
