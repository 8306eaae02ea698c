/* Progress on stderr (progress.h). */
#include "harness/cli/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness/core/text.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ck_progress_init(ck_progress *p, bool quiet, int total)
{
    memset(p, 0, sizeof *p);
    p->quiet = quiet;
    p->tty = isatty(fileno(stderr)) != 0;
    p->total = total;
    p->t_start = now_s();
}

/* The line is "[k/n] LABEL DTYPE  WHAT  3.2s  ETA 12s" in at most 79 columns (one terminal
 * line, the cursor after it): the case's name gives way first (down to 8 characters), then
 * WHAT, so the dtype, the time and the ETA always show. */
static void draw(ck_progress *p, const char *what, double frac)
{
    double t = now_s(), elapsed = t - p->t_start;
    /* cases done plus the fraction of this one, against the time they took */
    double done = (p->k - 1) + (frac > 0 && frac <= 1 ? frac : 0);
    char eta[32] = "";
    if (done > 0.05)
        snprintf(eta, sizeof eta, "  ETA %.0fs", elapsed / done * (p->total - done));
    char head[32], timing[64];
    int nh = snprintf(head, sizeof head, "[%d/%d] ", p->k, p->total);
    int nt = snprintf(timing, sizeof timing, "  %.1fs%s", t - p->t_case, eta);
    int nd = (int)strlen(p->dtype) + 1, nl = (int)strlen(p->label), nw = (int)strlen(what);
    int room = 79 - nh - nd - nt - 2; /* for the name and WHAT */
    int name = nl + nw <= room ? nl : room - nw >= 8 ? room - nw : nl < 8 ? nl : 8;
    int wroom = room - name > 0 ? room - name : 0;
    char line[512];
    snprintf(line, sizeof line, "%s%.*s%s %s  %.*s%s", head, name < nl ? name - 1 : name,
             p->label, name < nl ? "~" : "", p->dtype, nw <= wroom ? nw : wroom, what, timing);
    line[79] = '\0';
    fprintf(stderr, "\r%s\033[K", line);
    fflush(stderr);
    p->drawn = true;
    p->t_drawn = t;
}

void ck_progress_case(ck_progress *p, int k, const char *name, const char *file, const char *dtype)
{
    p->k = k;
    p->t_case = p->t_logged = now_s();
    p->last_run = p->last_step = -1;
    /* the case name and file are user text: escaped (no line break, no terminal escape,
     * no "::" a CI runner would read as a command) */
    char sn[128], sf[1024];
    ck_text_escape(name, sn, sizeof sn);
    ck_text_escape(file, sf, sizeof sf);
    snprintf(p->label, sizeof p->label, "%s", sn);
    snprintf(p->dtype, sizeof p->dtype, "%s", dtype);
    if (p->quiet)
        return;
    if (!p->tty) {
        char line[1200];
        int w = snprintf(line, sizeof line, "[%d/%d] %s (%s, %s)", k, p->total, sn, sf, dtype);
        if (w > 80) /* at 80 columns: the file's name without its folders */
            snprintf(line, sizeof line, "[%d/%d] %s (%s, %s)", k, p->total, sn,
                     strrchr(sf, '/') ? strrchr(sf, '/') + 1 : sf, dtype);
        fprintf(stderr, "%s\n", line);
        return;
    }
    draw(p, "starting", 0.0);
}

/* Elsewhere than a terminal: a line when a training has finished a step, if the last line
 * is CK_PROGRESS_LOG_S old (short cases print none). */
static void log_step(ck_progress *p, const ck_progress_info *info)
{
    if ((info->run != p->last_run || info->step != p->last_step) && p->last_run >= 0) {
        double t = now_s();
        if (t - p->t_logged >= CK_PROGRESS_LOG_S) {
            double done = (p->k - 1) + p->last_fraction, elapsed = t - p->t_start;
            char eta[32] = "";
            if (done > 0.05)
                snprintf(eta, sizeof eta, "  ETA %.0fs", elapsed / done * (p->total - done));
            fprintf(stderr, "  %s step %d/%d done  %.0fs%s\n", p->last_label, p->last_step + 1,
                    info->steps, t - p->t_case, eta);
            fflush(stderr);
            p->t_logged = t;
        }
    }
    p->last_run = info->run;
    p->last_step = info->step;
    p->last_fraction = info->fraction;
    snprintf(p->last_label, sizeof p->last_label, "%s", info->run_label);
}

void ck_progress_update(void *user, const ck_progress_info *info)
{
    ck_progress *p = user;
    if (p->quiet)
        return;
    if (!p->tty) {
        log_step(p, info);
        return;
    }
    if (p->drawn && now_s() - p->t_drawn < 0.1)
        return;
    char what[128];
    snprintf(what, sizeof what, "%s step %d/%d  %s %d/%d", info->run_label, info->step + 1,
             info->steps, info->backward ? "backward" : info->recompute ? "recompute" : "forward",
             info->layer + 1, info->n_layers);
    draw(p, what, info->fraction);
}

void ck_progress_stage(ck_progress *p, const char *what)
{
    if (p->quiet || !p->tty)
        return;
    draw(p, what, 1.0);
}

void ck_progress_done(ck_progress *p)
{
    if (p->tty && p->drawn && !p->quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}
