/*
 * The HTML page (run_set.h): one self-contained file, no network, no script. A summary
 * table, then per case: its outcome, a chart of every tensor's error against its bound
 * (log scale, worst ringed), the loss curves of both runs, the live activation bytes of
 * both runs over their allocator events with the peaks marked, the bisect story and the
 * run metadata; failing and erroring items come first, in the summary and on the page, and
 * the Markdown code spans of causes and failure lines are set as code. Everything is read
 * from the items' JSON reports, so `run --html` and `merge --html` draw the same page.
 */
#include "reports/run_set.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness/io/files.h"
#include "reports/report.h"
#include "reports/strbuf.h"
#include "reports/svg.h"

static const cJSON *get(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = get(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A report number: a JSON number, or one of the strings "NaN", "Infinity", "-Infinity". */
static double jnum(const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return v->valuedouble;
    if (cJSON_IsString(v)) {
        if (strcmp(v->valuestring, "Infinity") == 0)
            return INFINITY;
        if (strcmp(v->valuestring, "-Infinity") == 0)
            return -INFINITY;
    }
    return NAN;
}

/* Escaped text whose Markdown code spans (`name`, as the bisect causes and failure lines
 * write layer names and policies) become <code> elements; a backtick without its pair is
 * text. */
static void add_text_code(ck_strbuf *b, const char *text)
{
    const char *s = text ? text : "";
    while (*s) {
        const char *open = strchr(s, '`');
        const char *close = open ? strchr(open + 1, '`') : NULL;
        size_t plain = close ? (size_t)(open - s) : strlen(s);
        char *piece = strndup(s, plain);
        if (!piece) {
            b->failed = true;
            return;
        }
        ck_sb_add_xml(b, piece);
        free(piece);
        if (!close)
            return;
        if (!(piece = strndup(open + 1, (size_t)(close - open - 1)))) {
            b->failed = true;
            return;
        }
        ck_sb_add(b, "<code>");
        ck_sb_add_xml(b, piece);
        ck_sb_add(b, "</code>");
        free(piece);
        s = close + 1;
    }
}

/* Failures first: the items' indexes with every FAIL and ERROR ahead of the others, each
 * group in the run's order. NULL when out of memory. */
static int *page_order(const ck_run_set *s)
{
    int *order = malloc(((size_t)s->n + 1) * sizeof *order), k = 0;
    if (!order)
        return NULL;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n; i++) {
            bool failed = s->items[i].status == CK_ITEM_FAIL || s->items[i].status == CK_ITEM_ERROR;
            if (failed == (pass == 0))
                order[k++] = i;
        }
    return order;
}

static const char *status_color(ck_item_status st)
{
    static const char *const c[] = {"#2ca02c", "#d62728", "#ff7f0e", "#7f7f7f"};
    return (unsigned)st < 4 ? c[st] : "#000";
}

static void add_style(ck_strbuf *b)
{
    ck_sb_add(b, "<style>\n"
                 "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}\n"
                 "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;"
                 "font-size:13px;text-align:left;vertical-align:top}\n"
                 ".st{font-weight:bold;color:#fff;border-radius:3px;padding:1px 6px}\n"
                 "section.case{border-top:2px solid #ddd;margin-top:24px;padding-top:8px}\n"
                 ".charts{display:flex;flex-wrap:wrap;gap:8px}.story li{font-size:13px}\n"
                 "code{font-size:12px}.meta td{font-size:12px}\n"
                 "</style>\n");
}

static void status_badge(ck_strbuf *b, ck_item_status st)
{
    static const char *const names[] = {"PASS", "FAIL", "ERROR", "SKIP"};
    ck_sb_addf(b, "<span class=\"st\" style=\"background:%s\">%s</span>", status_color(st),
               (unsigned)st < 4 ? names[st] : "?");
}

static void memory_cell(ck_strbuf *b, const cJSON *rep)
{
    const cJSON *mem = get(rep, "memory");
    if (!mem) {
        ck_sb_add(b, "-");
        return;
    }
    char p[32], c[32];
    const cJSON *plain = get(mem, "plain_peak_bytes");
    bool predicted = cJSON_IsNull(plain); /* segment by segment: the plain run did not run */
    ck_format_bytes((int64_t)jnum(predicted ? get(mem, "plain_predicted_peak_bytes") : plain), p,
                    sizeof p);
    ck_format_bytes((int64_t)jnum(get(mem, "checkpointed_peak_bytes")), c, sizeof c);
    ck_sb_addf(b, "%s%s &#8594; %s (saving %.1f%%)", p, predicted ? " (predicted)" : "", c,
               jnum(get(mem, "saving")) * 100.0 + 0.0);
}

static void summary_table(ck_strbuf *b, const ck_run_set *s, const int *order)
{
    ck_sb_add(b, "<table id=\"summary\"><tr><th></th><th>case</th><th>dtype</th><th>backend</th>"
                 "<th>verdict</th><th>peak activations plain &#8594; checkpointed</th><th>outcome</th></tr>\n");
    for (int k = 0; k < s->n; k++) {
        int i = order[k];
        const ck_run_item *it = &s->items[i];
        char line[1024];
        ck_item_summary_line(it, line, sizeof line);
        ck_sb_addf(b, "<tr class=\"item\" data-status=\"%s\"><td>", ck_item_status_name(it->status));
        status_badge(b, it->status);
        ck_sb_addf(b, "</td><td><a href=\"#case-%d\">", i);
        ck_sb_add_xml(b, it->case_name);
        ck_sb_add(b, "</a></td><td>");
        ck_sb_add_xml(b, it->dtype);
        ck_sb_add(b, "</td><td>");
        ck_sb_add_xml(b, it->backend);
        ck_sb_add(b, "</td><td>");
        ck_sb_add_xml(b, it->report ? jstr(it->report, "verdict") : "-");
        ck_sb_add(b, "</td><td>");
        memory_cell(b, it->report);
        ck_sb_add(b, "</td><td>");
        add_text_code(b, it->status == CK_ITEM_PASS ? "" : line);
        ck_sb_add(b, "</td></tr>\n");
    }
    ck_sb_add(b, "</table>\n");
}

/* FNV-1a of a label, for the chart's name -> column table. */
static uint64_t label_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Every distinct tensor name in record order with its worst error/bound over the steps.
 * Linear in the rows: the rows are walked in list order (cJSON_GetArrayItem is O(i)) and
 * names found through a hash table. */
static void bound_chart(ck_strbuf *b, const cJSON *rep)
{
    const cJSON *ts = get(rep, "tensors");
    int n = cJSON_GetArraySize(ts), m = 0;
    size_t cap = 16;
    while (cap < 2 * (size_t)n + 2)
        cap *= 2;
    const char **labels = calloc((size_t)n + 1, sizeof *labels);
    const char **kinds = calloc((size_t)n + 1, sizeof *kinds);
    double *y = calloc((size_t)n + 1, sizeof *y);
    char (*names)[160] = calloc((size_t)n + 1, sizeof *names);
    int *slot = malloc(cap * sizeof *slot);
    if (!labels || !kinds || !y || !names || !slot) {
        b->failed = true;
        goto out;
    }
    for (size_t i = 0; i < cap; i++)
        slot[i] = -1;
    const cJSON *t;
    cJSON_ArrayForEach(t, ts) {
        if (!jstr(t, "name"))
            continue;
        char name[160];
        snprintf(name, sizeof name, "%s %s", jstr(t, "kind") ? jstr(t, "kind") : "", jstr(t, "name"));
        double r = jnum(get(get(t, "metrics"), "bound_ratio"));
        if (isnan(r))
            r = jstr(t, "verdict") && strcmp(jstr(t, "verdict"), "mismatch") == 0 ? INFINITY : 0.0;
        size_t h = (size_t)(label_hash(name) & (cap - 1));
        while (slot[h] >= 0 && strcmp(labels[slot[h]], name) != 0)
            h = (h + 1) & (cap - 1);
        int k = slot[h] >= 0 ? slot[h] : m;
        if (k == m) {
            slot[h] = m;
            snprintf(names[m], sizeof names[m], "%s", name);
            labels[m] = names[m];
            kinds[m] = jstr(t, "kind");
            y[m++] = r;
        } else if (r > y[k]) {
            y[k] = r;
        }
    }
    ck_svg_bound_chart(b, "error against its bound per tensor (worst step)", labels, kinds, y, m);
out:
    free(slot);
    free(labels);
    free(kinds);
    free(y);
    free(names);
}

static void loss_chart(ck_strbuf *b, const cJSON *rep)
{
    const cJSON *runs = get(rep, "runs");
    const cJSON *lp = get(get(runs, "plain"), "losses"), *lc = get(get(runs, "checkpointed"), "losses");
    int np = cJSON_GetArraySize(lp), nc = cJSON_GetArraySize(lc);
    double *x = calloc((size_t)(np > nc ? np : nc) + 1, sizeof *x);
    double *yp = calloc((size_t)np + 1, sizeof *yp), *yc = calloc((size_t)nc + 1, sizeof *yc);
    if (x && yp && yc) {
        for (int i = 0; i < (np > nc ? np : nc); i++)
            x[i] = i;
        const cJSON *v;
        int i = 0;
        cJSON_ArrayForEach(v, lp) yp[i++] = jnum(v);
        i = 0;
        cJSON_ArrayForEach(v, lc) yc[i++] = jnum(v);
        ck_svg_series s[2] = {{"plain", x, yp, np, "#1f77b4", false},
                              {"checkpointed", x, yc, nc, "#ff7f0e", false}};
        ck_svg_axes ax = {"loss per step", "step", "loss", false};
        ck_svg_line_chart(b, &ax, s, 2);
    } else {
        b->failed = true;
    }
    free(x);
    free(yp);
    free(yc);
}

static int timeline(const cJSON *run, double **x, double **y)
{
    const cJSON *pts = get(get(run, "memory_timeline"), "points");
    int n = cJSON_GetArraySize(pts);
    *x = calloc((size_t)n + 1, sizeof **x);
    *y = calloc((size_t)n + 1, sizeof **y);
    if (!*x || !*y)
        return -1;
    const cJSON *p;
    int i = 0;
    cJSON_ArrayForEach(p, pts) {
        (*x)[i] = jnum(cJSON_GetArrayItem(p, 0));
        (*y)[i] = jnum(cJSON_GetArrayItem(p, 1));
        i++;
    }
    return n;
}

static void memory_chart(ck_strbuf *b, const cJSON *rep)
{
    const cJSON *runs = get(rep, "runs");
    double *xp = NULL, *yp = NULL, *xc = NULL, *yc = NULL;
    int np = timeline(get(runs, "plain"), &xp, &yp);
    int nc = timeline(get(runs, "checkpointed"), &xc, &yc);
    if (np >= 0 && nc >= 0) {
        ck_svg_series s[2] = {{"plain", xp, yp, np, "#1f77b4", true},
                              {"checkpointed", xc, yc, nc, "#ff7f0e", true}};
        ck_svg_axes ax = {"live activation bytes over the run", "allocator event (allocations and frees)",
                          "live bytes", true};
        ck_svg_line_chart(b, &ax, s, 2);
    } else {
        b->failed = true;
    }
    free(xp);
    free(yp);
    free(xc);
    free(yc);
}

/* The independent culprit sets of the segment search, one item each (up to CK_CAUSE_NAMED,
 * then a count). A report without `set` members holds one set. */
static void culprit_sets(ck_strbuf *b, const cJSON *ss)
{
    const cJSON *cul = get(ss, "culprit_segments"), *c;
    int n = cJSON_IsNumber(get(ss, "independent_sets")) ? (int)jnum(get(ss, "independent_sets"))
                                                         : cJSON_GetArraySize(cul) > 0;
    int shown = n <= CK_CAUSE_NAMED ? n : CK_CAUSE_NAMED - 1;
    for (int set = 0; set < shown; set++) {
        int members = 0;
        cJSON_ArrayForEach(c, cul) members += !cJSON_IsNumber(get(c, "set")) || (int)jnum(get(c, "set")) == set;
        if (members == 0)
            continue;
        ck_sb_addf(b, "<li>checkpointing segment%s ", members > 1 ? "s" : "");
        int k = 0;
        cJSON_ArrayForEach(c, cul) {
            if (cJSON_IsNumber(get(c, "set")) && (int)jnum(get(c, "set")) != set)
                continue;
            ck_sb_addf(b, "%s%d (<code>", k++ ? ", " : "", (int)jnum(get(c, "index")));
            ck_sb_add_xml(b, jstr(c, "first"));
            ck_sb_add(b, "</code> &#8230; <code>");
            ck_sb_add_xml(b, jstr(c, "last"));
            ck_sb_add(b, "</code>)");
        }
        ck_sb_addf(b, " %s %s divergence</li>\n", members > 1 ? "together cause" : "alone causes",
                   n > 1 ? "a" : "the");
    }
    if (shown < n)
        ck_sb_addf(b, "<li>and %d more like it</li>\n", n - shown);
    if (cJSON_IsTrue(get(ss, "sets_capped")))
        ck_sb_addf(b, "<li>and more: the search stopped after %d</li>\n", n);
}

static void bisect_story(ck_strbuf *b, const cJSON *rep)
{
    const cJSON *bs = get(rep, "bisect");
    if (!cJSON_IsObject(bs))
        return;
    ck_sb_add(b, "<h3>bisect</h3><ul class=\"story\">\n");
    const cJSON *nf = get(bs, "noise_floor");
    if (cJSON_IsTrue(get(nf, "measured"))) {
        ck_sb_add(b, "<li>noise floor (plain run twice): ");
        ck_sb_add_xml(b, jstr(nf, "verdict"));
        ck_sb_add(b, "</li>\n");
    }
    culprit_sets(b, get(bs, "segment_search"));
    const cJSON *c;
    static const char *const finds[] = {"forward", "backward"};
    for (int k = 0; k < 2; k++) {
        const cJSON *f = get(bs, finds[k]);
        if (!cJSON_IsObject(f))
            continue;
        ck_sb_addf(b, "<li>first %s difference: layer <code>", finds[k]);
        ck_sb_add_xml(b, jstr(f, "layer"));
        ck_sb_addf(b, "</code> at step %d, max_abs %.3g</li>\n", (int)jnum(get(f, "step")),
                   jnum(get(f, "max_abs")));
    }
    cJSON_ArrayForEach(c, get(bs, "causes")) {
        if (!cJSON_IsString(c))
            continue;
        ck_sb_add(b, "<li><b>cause:</b> ");
        add_text_code(b, c->valuestring);
        ck_sb_add(b, "</li>\n");
    }
    ck_sb_add(b, "</ul>\n");
}

static void meta_rows(ck_strbuf *b, const cJSON *o, const char *prefix)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        char key[256];
        snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", v->string ? v->string : "");
        if (cJSON_IsObject(v)) {
            meta_rows(b, v, key);
            continue;
        }
        ck_sb_add(b, "<tr><td>");
        ck_sb_add_xml(b, key);
        ck_sb_add(b, "</td><td><code>");
        char *text = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);
        ck_sb_add_xml(b, cJSON_IsString(v) ? v->valuestring : text ? text : "?");
        cJSON_free(text);
        ck_sb_add(b, "</code></td></tr>\n");
    }
}

static void case_section(ck_strbuf *b, const ck_run_item *it, int i)
{
    char line[1024];
    ck_item_summary_line(it, line, sizeof line);
    ck_sb_addf(b, "<section class=\"case\" id=\"case-%d\" data-status=\"%s\"><h2>", i,
               ck_item_status_name(it->status));
    status_badge(b, it->status);
    ck_sb_add(b, " <span class=\"case-name\">");
    ck_sb_add_xml(b, it->case_name);
    ck_sb_add(b, "</span> ");
    ck_sb_add_xml(b, it->dtype);
    ck_sb_add(b, " on ");
    ck_sb_add_xml(b, it->backend);
    ck_sb_add(b, "</h2>\n<p>");
    ck_sb_add_xml(b, it->case_file);
    if (it->report) {
        const char *desc = jstr(get(it->report, "case"), "description");
        if (desc) {
            ck_sb_add(b, "<br><i>");
            ck_sb_add_xml(b, desc);
            ck_sb_add(b, "</i>");
        }
    }
    ck_sb_add(b, "</p>\n");
    if (it->status != CK_ITEM_FAIL || !it->report) { /* a failure's lines follow in red */
        ck_sb_add(b, "<p><b>");
        add_text_code(b, line);
        ck_sb_add(b, "</b></p>\n");
    }
    if (!it->report) {
        ck_sb_add(b, "</section>\n");
        return;
    }
    char eq[CK_REPORT_LINE_MAX];
    ck_report_equivalence_from_json(it->report, eq, sizeof eq);
    if (eq[0]) {
        ck_sb_add(b, "<p>");
        ck_sb_add_xml(b, eq);
        ck_sb_add(b, "</p>\n");
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, get(it->report, "failures")) {
        if (cJSON_IsString(f)) {
            ck_sb_add(b, "<p class=\"failure\" style=\"color:#d62728\">");
            add_text_code(b, f->valuestring);
            ck_sb_add(b, "</p>\n");
        }
    }
    ck_sb_add(b, "<div class=\"charts\">\n");
    bound_chart(b, it->report);
    loss_chart(b, it->report);
    memory_chart(b, it->report);
    ck_sb_add(b, "</div>\n");
    bisect_story(b, it->report);
    const cJSON *run = get(it->report, "run");
    if (cJSON_IsObject(run)) {
        ck_sb_add(b, "<details><summary>run metadata</summary><table class=\"meta\">\n");
        ck_sb_add(b, "<tr><td>tool.version</td><td><code>");
        ck_sb_add_xml(b, jstr(get(it->report, "tool"), "version"));
        ck_sb_add(b, "</code></td></tr>\n");
        meta_rows(b, run, "");
        ck_sb_add(b, "</table></details>\n");
    }
    ck_sb_add(b, "</section>\n");
}

char *ck_html_string(const ck_run_set *s)
{
    ck_strbuf b = {0};
    char totals[128];
    ck_run_set_totals_line(s, totals, sizeof totals);
    int rc = ck_run_set_exit_code(s);
    ck_sb_add(&b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                  "<title>ckpt-harness ");
    ck_sb_add_xml(&b, s->command ? s->command : "run");
    ck_sb_add(&b, ": ");
    ck_sb_add_xml(&b, totals);
    ck_sb_add(&b, "</title>\n");
    add_style(&b);
    ck_sb_add(&b, "</head><body>\n<h1>ckpt-harness ");
    ck_sb_add_xml(&b, s->command ? s->command : "run");
    ck_sb_addf(&b, " <span class=\"st\" style=\"background:%s\">%s</span></h1>\n<p id=\"totals\">",
               rc == 0 ? "#2ca02c" : rc == 1 ? "#d62728" : "#ff7f0e",
               rc == 0 ? "PASSED" : rc == 1 ? "FAILED" : "ERROR");
    ck_sb_add_xml(&b, totals);
    ck_sb_add(&b, "</p>\n");
    int *order = page_order(s);
    if (!order) {
        ck_sb_free(&b);
        return NULL;
    }
    summary_table(&b, s, order);
    for (int k = 0; k < s->n; k++)
        case_section(&b, &s->items[order[k]], order[k]);
    free(order);
    ck_sb_add(&b, "</body></html>");
    if (b.failed) {
        ck_sb_free(&b);
        return NULL;
    }
    return b.s;
}

ck_status ck_html_write(const ck_run_set *s, const char *path, ck_error *err)
{
    char *text = ck_html_string(s);
    if (!text)
        return ck_fail(err, CK_ERR_NOMEM, "%s: out of memory building the HTML page", path);
    ck_status st = ck_write_text_atomic(path, text, err);
    free(text);
    return st;
}
