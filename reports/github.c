/*
 * GitHub Actions output (run_set.h): workflow commands that annotate the case file of
 * every failing (::error) or erroring (::error) case and every skipped one (::warning),
 * and a Markdown table appended to the job's step summary ($GITHUB_STEP_SUMMARY).
 */
#include "reports/run_set.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/text.h"
#include "reports/strbuf.h"

/* Workflow-command escaping. User text is first made one visible line (ck_text_escape:
 * control characters, terminal escapes and invalid UTF-8 shown as \n, \e, \xNN), then the
 * documented escapes: data escapes %, CR and LF; properties also : and ,. */
static void put_escaped(FILE *f, const char *raw, bool property)
{
    char shown[4096];
    const char *s = ck_text_escape(raw, shown, sizeof shown);
    for (; *s; s++) {
        switch (*s) {
        case '%': fputs("%25", f); break;
        case '\r': fputs("%0D", f); break;
        case '\n': fputs("%0A", f); break;
        case ':': fputs(property ? "%3A" : ":", f); break;
        case ',': fputs(property ? "%2C" : ",", f); break;
        default: fputc(*s, f);
        }
    }
}

void ck_github_annotate(FILE *f, const ck_run_set *s)
{
    for (int i = 0; i < s->n; i++) {
        const ck_run_item *it = &s->items[i];
        if (it->status == CK_ITEM_PASS)
            continue;
        char line[2048], title[256];
        ck_item_failure_line(it, line, sizeof line);
        snprintf(title, sizeof title, "ckpt-harness %s: %s %s %s", s->command ? s->command : "run",
                 it->case_name, it->dtype, ck_item_status_name(it->status));
        fputs(it->status == CK_ITEM_SKIPPED ? "::warning " : "::error ", f);
        if (it->case_file) {
            fputs("file=", f);
            put_escaped(f, it->case_file, true);
            fputs(",", f);
        }
        fputs("title=", f);
        put_escaped(f, title, true);
        fputs("::", f);
        put_escaped(f, line, false);
        fputc('\n', f);
    }
    fflush(f);
}

/* The Markdown escaper, for a table cell of user text: one visible line first
 * (ck_text_escape), then HTML's specials as entities (GitHub renders inline HTML: an
 * <img src=...> must stay text), Markdown's structural punctuation backslash-escaped and ':'
 * as an entity, so a name can neither break the row (|) nor become a link, an image, code,
 * emphasis with * or a status emoji (an intraword _ is left: GitHub does not emphasise it). */
static void cell(ck_strbuf *b, const char *raw)
{
    char shown[4096];
    for (const char *s = ck_text_escape(raw, shown, sizeof shown); *s; s++) {
        char one[3] = {'\\', *s, 0};
        switch (*s) {
        case '<': ck_sb_add(b, "&lt;"); break;
        case '>': ck_sb_add(b, "&gt;"); break;
        case '&': ck_sb_add(b, "&amp;"); break;
        case ':': ck_sb_add(b, "&#58;"); break; /* no :emoji: status icon from a name */
        case '|': case '\\': case '`': case '*': case '[': case ']': case '(': case ')':
        case '#': case '!': case '~':
            ck_sb_add(b, one);
            break;
        default: ck_sb_add(b, one + 1);
        }
    }
}

ck_status ck_github_step_summary(const ck_run_set *s, const char *summary_path, ck_error *err)
{
    ck_strbuf b = {0};
    char totals[128];
    ck_run_set_totals_line(s, totals, sizeof totals);
    int rc = ck_run_set_exit_code(s);
    ck_sb_addf(&b, "### ckpt-harness %s: %s\n\n", s->command ? s->command : "run",
               rc == 0 ? "passed" : rc == 1 ? "FAILED" : "ERROR");
    ck_sb_addf(&b, "%s\n\n| | case | dtype | backend | outcome |\n|---|---|---|---|---|\n", totals);
    for (int i = 0; i < s->n; i++) {
        const ck_run_item *it = &s->items[i];
        static const char *const marks[] = {":white_check_mark:", ":x:", ":boom:", ":fast_forward:"};
        char line[2048];
        ck_item_failure_line(it, line, sizeof line);
        ck_sb_addf(&b, "| %s | ", (unsigned)it->status < 4 ? marks[it->status] : "?");
        cell(&b, it->case_name);
        ck_sb_add(&b, " | ");
        cell(&b, it->dtype);
        ck_sb_add(&b, " | ");
        cell(&b, it->backend);
        ck_sb_add(&b, " | ");
        cell(&b, line);
        ck_sb_add(&b, " |\n");
    }
    ck_sb_add(&b, "\n");
    if (b.failed) {
        ck_sb_free(&b);
        return ck_fail(err, CK_ERR_NOMEM, "out of memory building the step summary");
    }
    /* appended, as GitHub asks: other steps' summaries stay */
    FILE *f = fopen(summary_path, "a");
    ck_status st = CK_OK;
    if (!f)
        st = ck_fail(err, CK_ERR_IO, "GITHUB_STEP_SUMMARY %s: %s", summary_path, strerror(errno));
    else {
        if (fwrite(b.s, 1, b.n, f) != b.n)
            st = ck_fail(err, CK_ERR_IO, "GITHUB_STEP_SUMMARY %s: write failed", summary_path);
        if (fclose(f) != 0 && st == CK_OK)
            st = ck_fail(err, CK_ERR_IO, "GITHUB_STEP_SUMMARY %s: %s", summary_path, strerror(errno));
    }
    ck_sb_free(&b);
    return st;
}
