/*
 * Vacuity: whether a run's gradients carry any information. A comparison of two runs whose
 * gradients are all zero (a forward that underflowed, a dead network) proves nothing, so it
 * is reported as `vacuous`, never as a pass.
 *
 * Per run: the number of gradient elements (over every parameter and step), how many are
 * exactly zero, how many are subnormal in the dtype that held them (fp32 runs: below
 * FLT_MIN; fp16/bf16 runs: |g x loss scale| below the low dtype's smallest normal, i.e.
 * subnormal before unscaling) and, for low-precision runs judged against fp32, how many
 * flushed to zero where fp32 is not zero. A run is vacuous when
 *   (zero + subnormal) / elements >= CK_VACUOUS_FRACTION, or
 *   a step's loss is 0 or not finite, or
 *   the loss scaler skipped every step (no update was ever taken).
 */
#ifndef CK_VACUITY_H
#define CK_VACUITY_H

#include "harness/engine/records.h"

#define CK_VACUOUS_FRACTION 0.99

/* Why a run is vacuous (reports/ words it: ck_report_vacuity_text). */
typedef enum {
    CK_VACUITY_NONE = 0,        /* not vacuous */
    CK_VACUITY_LOSS_ZERO,       /* the loss at `step` is exactly 0 */
    CK_VACUITY_LOSS_NONFINITE,  /* the loss at `step` is not finite */
    CK_VACUITY_ALL_SKIPPED,     /* the loss scaler skipped every step (`skipped` of them) */
    CK_VACUITY_NO_GRADIENTS,    /* the model has no gradients to compare */
    CK_VACUITY_ZERO_GRADIENTS,  /* (zero + subnormal) / elements >= CK_VACUOUS_FRACTION */
    CK_VACUITY_REASONS
} ck_vacuity_reason;

typedef struct {
    int64_t elements, zero, subnormal, flushed; /* flushed: -1 when not judged against fp32 */
    bool vacuous;
    ck_vacuity_reason reason;
    int step;    /* LOSS_ZERO, LOSS_NONFINITE */
    int skipped; /* ALL_SKIPPED */
} ck_vacuity;

/* Measures rec, a run in dtype dt. */
void ck_vacuity_measure(const ck_record *rec, ck_dtype dt, ck_vacuity *v);
/* The same in two parts, for runs that drop each step's tensors once judged: count adds the
 * gradient entries rec holds now to v (start from a zeroed v with flushed -1); finish judges
 * the totals and rec's per-step losses and loss scales. */
void ck_vacuity_count(const ck_record *rec, ck_dtype dt, ck_vacuity *v);
void ck_vacuity_finish(const ck_record *rec, ck_vacuity *v);

#endif
