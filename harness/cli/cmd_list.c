/*
 * `ckpt-harness list`: the ops and their options, the policies, and the shipped cases
 * (commands.h).
 */
#include "harness/cli/commands.h"

#include <stdio.h>
#include <stdlib.h>

#include "harness/cli/case_files.h"
#include "harness/cli/messages.h"
#include "harness/core/text.h"
#include "harness/model/op_def.h"

/* "a, b, c" from a name list */
static void print_names(const char *what, const ck_name_list *l)
{
    printf("%s: ", what);
    for (int i = 0; i < l->n; i++)
        printf("%s%s", i ? ", " : "", l->names[i]);
    printf("\n");
}

int ck_cmd_list_markdown(void)
{
    char block[4096];
    for (int k = 0; k < CK_OP_KIND_COUNT; k++) {
        if (!ck_op_options_markdown((ck_op_kind)k, block, sizeof block)) {
            ck_cli_error("list --markdown: an op's option table does not fit its buffer");
            return CK_EXIT_USAGE;
        }
        printf("%s", block);
    }
    return CK_EXIT_PASS;
}

int ck_cmd_list(const char *cases_dir)
{
    int n_ops = 0;
    const ck_op_info *ops = ck_op_catalogue(&n_ops);
    printf("ops (options in a case's layer objects; see cases/README.md):\n");
    for (int i = 0; i < n_ops; i++) {
        printf("  %-16s %s\n", ops[i].name, ops[i].summary);
        if (ops[i].options && ops[i].options[0])
            printf("  %-16s options: %s\n", "", ops[i].options);
    }
    printf("\n");
    print_names("losses", &ck_loss_names);
    print_names("optimizers", &ck_optimizer_names);
    printf("rng policies: counter (default), stateful, stash\n");
    printf("batchnorm recompute policies: skip (default), update\n");

    const char *dir = cases_dir ? cases_dir : "cases";
    char **files = NULL;
    int n = 0;
    ck_error err;
    if (ck_collect_case_files(&dir, 1, &files, &n, &err) != CK_OK) {
        if (cases_dir) { /* a folder the user named: not finding it is an error */
            ck_cli_error(err.msg);
            return CK_EXIT_USAGE;
        }
        char shown[CK_ERROR_MAX];
        printf("\nshipped cases: none found (%s)\n", ck_text_escape(err.msg, shown, sizeof shown));
        return CK_EXIT_PASS;
    }
    char shown[2048];
    printf("\ncases in %s:\n", ck_text_escape(dir, shown, sizeof shown));
    for (int i = 0; i < n; i++) {
        ck_case c;
        if (ck_case_load(files[i], &c, &err) != CK_OK) {
            char sf[1024];
            printf("  %-28s (does not load: %s)\n", ck_text_escape(files[i], sf, sizeof sf),
                   ck_text_escape(err.msg, shown, sizeof shown));
            continue;
        }
        /* what the case expects in the dtypes it runs in: "identical", or per dtype
         * "fp32 identical, fp16 mismatch" when they differ */
        char expect[96];
        ck_expect first = ck_case_expect(&c, c.precisions[0]);
        bool all_same = true;
        for (int k = 1; k < c.n_precisions; k++)
            all_same = all_same && ck_case_expect(&c, c.precisions[k]) == first;
        snprintf(expect, sizeof expect, "%s", ck_expect_name(first));
        for (size_t used = 0, k = 0; !all_same && k < (size_t)c.n_precisions; k++)
            used += (size_t)snprintf(expect + used, sizeof expect - used, "%s%s %s",
                                     k ? ", " : "", ck_dtype_name(c.precisions[k]),
                                     ck_expect_name(ck_case_expect(&c, c.precisions[k])));
        printf("  %-28s expect %-9s %s\n", c.name, expect,
               ck_text_escape(c.description, shown, sizeof shown));
        ck_case_free(&c);
    }
    ck_free_case_files(files, n);
    return CK_EXIT_PASS;
}
