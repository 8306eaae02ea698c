/*
 * Progress on stderr for people. On a terminal: one line rewritten in place, at most ten
 * times a second, "[2/15] unet3d_bn fp16  calibration 2/3 step 2/3  backward 14/30  3.2s
 * ETA 12s" (each of the trainings that advance together named in turn: plain,
 * checkpointed, fp32 reference, calibration k/3), within 79 columns, cleared when the case
 * ends. Elsewhere (a CI log): one plain line per case as it starts and, in a case running
 * for minutes, a line when a training finishes a step at least CK_PROGRESS_LOG_S seconds
 * after the last one ("  checkpointed step 1/2 done  312s  ETA 1490s"). --quiet: nothing.
 */
#ifndef CK_PROGRESS_H
#define CK_PROGRESS_H

#include <stdbool.h>

#include "harness/verify/run_case.h"

typedef struct {
    bool tty, quiet;
    int k, total;          /* this case is k of total (1-based) */
    char label[160];       /* the case's name, escaped: "unet3d_bn" */
    char dtype[17];        /* "fp32" */
    double t_start;        /* the command's start */
    double t_case;         /* this case's start */
    double t_drawn;        /* last redraw */
    bool drawn;
    int last_run, last_step; /* elsewhere: the training and step of the latest event */
    char last_label[32];     /* and its training's label */
    double last_fraction;
    double t_logged;         /* elsewhere: the last step line (or the case's start) */
} ck_progress;

#define CK_PROGRESS_LOG_S 30.0

void ck_progress_init(ck_progress *p, bool quiet, int total);
/* A case starts: the plain line (not a terminal) or the first live line. */
void ck_progress_case(ck_progress *p, int k, const char *name, const char *file, const char *dtype);
/* The engine's callback (run_case.h); user is the ck_progress. */
void ck_progress_update(void *user, const ck_progress_info *info);
/* A later stage of the case (bisect, the recompute check, the other backend) starts: the
 * live line says so (on a terminal; nothing elsewhere or with --quiet). */
void ck_progress_stage(ck_progress *p, const char *what);
/* The case ended: clears the live line before the case's result is printed. */
void ck_progress_done(ck_progress *p);

#endif
