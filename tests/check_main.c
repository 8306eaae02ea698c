/*
 * The one Check runner: joins every suite_<name>() defined in tests/test_*.c (the list is
 * generated into build/gen/suites.h by the Makefile) and exits non-zero on any failure.
 * CK_RUN_SUITE=<name> and CK_RUN_CASE=<name> (Check's own variables) narrow a run.
 */
#include <check.h>
#include <stdlib.h>

#define CK_SUITE(fn) Suite *fn(void);
#include "suites.h"
#undef CK_SUITE

int main(void)
{
    SRunner *sr = srunner_create(NULL);
#define CK_SUITE(fn) srunner_add_suite(sr, fn());
#include "suites.h"
#undef CK_SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
