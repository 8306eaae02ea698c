/* The CI-facing outputs of a command (run_outputs.h). */
#include "harness/cli/run_outputs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/cli_options.h"
#include "harness/cli/messages.h"
#include "harness/io/files.h"

int ck_cli_check_run_outputs(const char *report_dir, const char *junit, const char *html)
{
    ck_error err;
    if (report_dir) {
        size_t n = strlen(report_dir) + 16;
        char *p = malloc(n);
        if (!p) {
            ck_cli_error("out of memory");
            return CK_EXIT_USAGE;
        }
        snprintf(p, n, "%s%ssummary.json", report_dir,
                 report_dir[0] && report_dir[strlen(report_dir) - 1] == '/' ? "" : "/");
        ck_status st = ck_output_file_check(p, "--report", &err);
        free(p);
        if (st != CK_OK) {
            ck_cli_error(err.msg);
            return CK_EXIT_USAGE;
        }
    }
    if ((junit && ck_output_file_check(junit, "--junit", &err) != CK_OK) ||
        (html && ck_output_file_check(html, "--html", &err) != CK_OK)) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    if (junit && html && ck_same_output_file(junit, html)) {
        ck_cli_errorf("--junit %s and --html %s name the same file", junit, html);
        return CK_EXIT_USAGE;
    }
    const char *gha = getenv("GITHUB_ACTIONS");
    const char *sum = getenv("GITHUB_STEP_SUMMARY");
    if (gha && strcmp(gha, "true") == 0 && sum && *sum &&
        ck_output_file_check(sum, "GITHUB_STEP_SUMMARY", &err) != CK_OK) {
        ck_cli_error(err.msg);
        return CK_EXIT_USAGE;
    }
    return CK_EXIT_PASS;
}

int ck_cli_write_run_outputs(const ck_run_set *set, const char *report_dir, const char *junit,
                             const char *html, bool quiet)
{
    ck_error err;
    int rc = CK_EXIT_PASS;
    if (report_dir) {
        size_t n = strlen(report_dir) + 16;
        char *p = malloc(n);
        if (p)
            snprintf(p, n, "%s%ssummary.json", report_dir,
                     report_dir[0] && report_dir[strlen(report_dir) - 1] == '/' ? "" : "/");
        if (!p || ck_run_set_write_summary(set, p, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: %s\n", p ? err.msg : "out of memory");
            rc = CK_EXIT_USAGE;
        } else if (!quiet) {
            printf("summary: %s\n", p);
        }
        free(p);
    }
    if (junit) {
        if (ck_junit_write(set, junit, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: --junit: %s\n", err.msg);
            rc = CK_EXIT_USAGE;
        } else if (!quiet) {
            printf("junit: %s\n", junit);
        }
    }
    if (html) {
        if (ck_html_write(set, html, &err) != CK_OK) {
            fprintf(stderr, "ckpt-harness: --html: %s\n", err.msg);
            rc = CK_EXIT_USAGE;
        } else if (!quiet) {
            printf("html: %s\n", html);
        }
    }
    const char *gha = getenv("GITHUB_ACTIONS");
    if (gha && strcmp(gha, "true") == 0) {
        fflush(stdout);
        ck_github_annotate(stdout, set);
        const char *sum = getenv("GITHUB_STEP_SUMMARY");
        if (sum && *sum && ck_github_step_summary(set, sum, &err) != CK_OK) {
            ck_cli_error(err.msg);
            rc = CK_EXIT_USAGE;
        }
    }
    fflush(stdout);
    return rc;
}
