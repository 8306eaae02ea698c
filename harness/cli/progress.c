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

static void draw(ck_progress *p, const char *what, double frac)
{
    double t = now_s(), elapsed = t - p->t_start;
    /* cases done plus the fraction of this one, against the time they took */
    double done = (p->k - 1) + (frac > 0 && frac <= 1 ? frac : 0);
    char eta[32] = "";
    if (done > 0.05)
        snprintf(eta, sizeof eta, "  ETA %.0fs", elapsed / done * (p->total - done));
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
    p->t_case = now_s();
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

void ck_progress_update(void *user, const ck_progress_info *info)
{
    ck_progress *p = user;
    if (p->quiet || !p->tty)
        return;
    if (p->drawn && now_s() - p->t_drawn < 0.1)
        return;
    char what[128];
    snprintf(what, sizeof what, "%s step %d/%d  %s%s %d/%d", info->run_label, info->step + 1,
             info->steps, info->backward ? "backward" : "forward",
             info->recompute ? " (recompute)" : "", info->layer + 1, info->n_layers);
    double per_step = info->n_layers > 0 ? 2.0 * info->n_layers : 1.0;
    double pos = info->backward ? 2.0 * info->n_layers - info->layer : info->layer;
    double frac = ((double)info->run * info->steps + info->step + pos / per_step) /
                  ((double)info->n_runs * (info->steps > 0 ? info->steps : 1));
    draw(p, what, frac);
}

void ck_progress_done(ck_progress *p)
{
    if (p->tty && p->drawn && !p->quiet) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}
