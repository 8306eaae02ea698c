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

/* "  ETA 12s" from the cases done plus the fraction of this one, against their time */
static void eta_text(const ck_progress *p, double t, double frac, char *eta, size_t n)
{
    double elapsed = t - p->t_start;
    double done = (p->k - 1) + (frac > 0 && frac <= 1 ? frac : 0);
    eta[0] = '\0';
    if (done > 0.05)
        snprintf(eta, n, "  ETA %.0fs", elapsed / done * (p->total - done));
}

static void draw(ck_progress *p, const char *what, double frac)
{
    double t = now_s();
    char eta[32];
    eta_text(p, t, frac, eta, sizeof eta);
    char line[256];
    snprintf(line, sizeof line, "[%d/%d] %s  %s  %.1fs%s", p->k, p->total, p->label, what,
             t - p->t_case, eta);
    line[79] = '\0'; /* one terminal line */
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
    snprintf(p->label, sizeof p->label, "%.120s %.16s", sn, dtype);
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

static double fraction(const ck_progress_info *info, double pos)
{
    return ((double)info->run * info->steps + info->step + pos) /
           ((double)info->n_runs * (info->steps > 0 ? info->steps : 1));
}

/* Elsewhere than a terminal: a line when a run has finished a step, if the last line is
 * CK_PROGRESS_LOG_S old (short cases print none). */
static void log_step(ck_progress *p, const ck_progress_info *info)
{
    bool moved = info->run != p->last_run || info->step != p->last_step;
    if (moved && p->last_run >= 0) {
        double t = now_s();
        if (t - p->t_logged >= CK_PROGRESS_LOG_S) {
            ck_progress_info done = *info;
            done.run = p->last_run;
            done.step = p->last_step;
            char eta[32];
            eta_text(p, t, fraction(&done, 1.0), eta, sizeof eta);
            fprintf(stderr, "  %s step %d/%d done  %.0fs%s\n", p->last_label,
                    p->last_step + 1, info->steps, t - p->t_case, eta);
            fflush(stderr);
            p->t_logged = t;
        }
    }
    p->last_run = info->run;
    p->last_step = info->step;
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
    snprintf(what, sizeof what, "%s step %d/%d  %s%s %d/%d", info->run_label, info->step + 1,
             info->steps, info->backward ? "backward" : "forward",
             info->recompute ? " (recompute)" : "", info->layer + 1, info->n_layers);
    double per_step = info->n_layers > 0 ? 2.0 * info->n_layers : 1.0;
    double pos = info->backward ? 2.0 * info->n_layers - info->layer : info->layer;
    draw(p, what, fraction(info, pos / per_step));
}

void ck_progress_done(ck_progress *p)
{
    if (p->tty && p->drawn && !p->quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}
