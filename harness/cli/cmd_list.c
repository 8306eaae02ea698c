/*
 * `ckpt-harness list`: the ops and their options, the policies, and the shipped cases
 * (commands.h).
 */
#include "harness/cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/case_files.h"
#include "harness/cli/help_text.h"
#include "harness/cli/messages.h"
#include "harness/core/text.h"
#include "harness/model/op_def.h"

/* "a, b, c" from a name list */
static void print_names(FILE *out, const char *what, const ck_name_list *l)
{
    fprintf(out, "%s: ", what);
    for (int i = 0; i < l->n; i++)
        fprintf(out, "%s%s", i ? ", " : "", l->names[i]);
    fprintf(out, "\n");
}

/* A case description's first sentence (up to its first ". "), for the one-line listing. */
static const char *first_sentence(const char *d, char *buf, size_t n)
{
    if (!d)
        return "";
    const char *end = strstr(d, ". ");
    size_t len = end ? (size_t)(end - d) + 1 : strlen(d);
    snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), d);
    return buf;
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

/* The listing, unwrapped, into out. */
static int list_to(FILE *out, const char *cases_dir)
{
    int n_ops = 0;
    const ck_op_info *ops = ck_op_catalogue(&n_ops);
    fprintf(out, "ops (options in a case's layer objects; see cases/README.md):\n");
    for (int i = 0; i < n_ops; i++) {
        fprintf(out, "  %-16s %s\n", ops[i].name, ops[i].summary);
        if (ops[i].options && ops[i].options[0])
            fprintf(out, "  %-16s options: %s\n", "", ops[i].options);
    }
    fprintf(out, "\n");
    print_names(out, "losses", &ck_loss_names);
    print_names(out, "optimizers", &ck_optimizer_names);
    fprintf(out, "rng policies: counter (default), stateful, stash\n");
    fprintf(out, "batchnorm recompute policies: skip (default), update\n");

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
        fprintf(out, "\nshipped cases: none found (%s)\n", ck_text_escape(err.msg, shown, sizeof shown));
        return CK_EXIT_PASS;
    }
    char shown[2048], sentence[1024];
    fprintf(out, "\ncases in %s:\n", ck_text_escape(dir, shown, sizeof shown));
    for (int i = 0; i < n; i++) {
        ck_case c;
        if (ck_case_load(files[i], &c, &err) != CK_OK) {
            char sf[1024];
            fprintf(out, "  %-28s (does not load: %s)\n", ck_text_escape(files[i], sf, sizeof sf),
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
        fprintf(out, "  %-28s expect %-9s %s\n", c.name, expect,
                ck_text_escape(first_sentence(c.description, sentence, sizeof sentence),
                               shown, sizeof shown));
        ck_case_free(&c);
    }
    ck_free_case_files(files, n);
    return CK_EXIT_PASS;
}

/* The listing wrapped at 80 columns (help_text.h). */
int ck_cmd_list(const char *cases_dir)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out) {
        ck_cli_error("list: out of memory");
        return CK_EXIT_USAGE;
    }
    int rc = list_to(out, cases_dir);
    if (fclose(out) != 0 || !text) {
        free(text);
        ck_cli_error("list: out of memory");
        return CK_EXIT_USAGE;
    }
    ck_cli_write_help(stdout, text);
    free(text);
    return rc;
}
