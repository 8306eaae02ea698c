/*
 * The default judgement of a low-precision run against fp32: each tensor's bound comes
 * from the model itself.
 *
 * Three runs take part: the fp32 plain run (ref), the fp32 *calibration* run that starts
 * from the same weights and data rounded to the low dtype (fp32 arithmetic on what the
 * low-precision forward sees: the model's own sensitivity to one rounding of its inputs),
 * and the low-precision plain run (b). Per tensor t:
 *   spread_t = ||calib_t - ref_t|| / ||ref_t||       (what rounding the inputs alone does)
 *   error_t  = ||b_t - ref_t|| / ||ref_t||
 *   bound_t  = K * max(spread_t, u)                  ("calibrated")
 * with K = CK_PRECISION_K and u the low dtype's unit roundoff (2^-11 fp16, 2^-8 bf16).
 * A tensor whose value is rounding noise (||ref_t|| == 0, or spread_t >= CK_PRECISION_NOISE:
 * e.g. the gradient of a conv bias feeding a training BatchNorm, mathematically zero) has no
 * meaningful relative error; it is judged against the step's overall gradient norm G:
 *   error_t = ||b_t - ref_t|| / G,  bound_t = K * max(||calib_t - ref_t|| / G, u)
 * ("norm-relative"). From the second step on, the runs no longer start a step from the same
 * state: an optimizer such as Adam turns rounding noise in near-zero gradients into full
 * +-lr updates, and which tensors those few elements disturb next is chaotic, so one tensor's
 * own spread is a poor sample of it (a ReLU-like kink crossed, an Adam sign flipped: a few
 * discrete events that a few calibration runs may or may not hit). There spread_t is at
 * least the step's spread S (the same distance over all of the step's gradients together)
 * and K is CK_PRECISION_K_UPDATED; the same K holds for parameters after any update. Any non-finite value not matched by the reference fails. A case's own
 * low-precision tolerance (tolerance.fp16/bf16, tolerance.tensors) replaces the default for
 * the tensors it covers ("case tolerance"); --rtol/--atol/--rel-l2 on `run` replace both
 * ("override"). The rule's measured basis is in cases/README.md.
 */
#ifndef CK_PRECISION_JUDGE_H
#define CK_PRECISION_JUDGE_H

#include "harness/engine/records.h"
#include "harness/model/graph.h"
#include "harness/verify/tensor_result.h"

#define CK_PRECISION_K 8.0      /* bound = K x the calibrated spread (or u): the first
                                   step's loss, gradients and buffers */
#define CK_PRECISION_K_UPDATED 32.0 /* the same for parameters after an update and for every
                                       tensor of later steps */
#define CK_PRECISION_NOISE 0.5  /* calibrated relative spread at which a tensor is noise */
#define CK_PRECISION_CALIB_RUNS 3 /* calibration runs (perturbation seeds); spread = their max */

/* Overrides from the command line (`run --rtol/--atol/--rel-l2`). */
typedef struct {
    bool set;       /* any of the three given */
    double rtol, atol; /* elementwise (used when rel_l2 < 0) */
    double rel_l2;  /* < 0: unset */
} ck_precision_override;

/* The low dtype's unit roundoff: 2^-11 (fp16), 2^-8 (bf16); 2^-24 otherwise. */
double ck_unit_roundoff(ck_dtype dt);

/* S per step (0 for step 0): the largest relative distance, over all gradient entries of the
 * step together, between any two of the fp32 run and the calibration runs; out has
 * fp32->steps entries. */
void ck_step_spreads(const ck_record *fp32, const ck_record *calib, int n_calib, double *out);
/* The same for one step: the entries of `step` in the records (which may hold that step
 * only, as a lockstep judgement keeps them). */
double ck_step_spread_at(const ck_record *fp32, const ck_record *calib, int n_calib, int step);

/* One tensor's distances between the runs that differ by rounding alone, measured once and
 * shared by the step's spread S, its gradient norm G and the tensor's own judgement. */
#define CK_PRECISION_PAIRS (CK_PRECISION_CALIB_RUNS * (CK_PRECISION_CALIB_RUNS + 1) / 2)
typedef struct {
    int n;                        /* pairs measured: n_calib (n_calib + 1) / 2; 0: none */
    double d[CK_PRECISION_PAIRS]; /* ||calib_j - fp32|| and ||calib_j - calib_i|| (i < j), in
                                     that order for j = 0, 1, ...: finite pairs only */
    bool has_norm;
    double norm;                  /* ||fp32|| over its finite values (with_norm) */
} ck_calib_distances;

/* The distances of one entry (n_calib may be 0); with_norm: its own norm too. */
void ck_calib_distances_of(const ck_record_entry *ref, const ck_record_entry *const *calib,
                           int n_calib, bool with_norm, ck_calib_distances *out);
/* S and G of `step` from the distances of every entry of the fp32 record (dist[k] for
 * fp32->e[k]; every gradient entry of the step measured with its norm): the same numbers
 * as ck_step_spread_at and ck_step_grad_norm_at. */
double ck_step_spread_of(const ck_record *fp32, const ck_calib_distances *dist, int n_calib,
                         int step);
double ck_step_grad_norm_of(const ck_record *fp32, const ck_calib_distances *dist, int step);

/* Judges record entry k of the low-precision run (lowrec) against the fp32 run (ref) with
 * the calibration runs' entries (calib[0..n_calib-1]; n_calib 0: the floor u alone stands
 * in for the spread).
 * step_grad_norm is G for the entry's step, step_spread its S. Fills tr's verdict, error, bound, spread,
 * bound_source, rtol/atol/rel_l2_limit and metrics (tr's name, kind, step, dtype and shape
 * are set by the caller). */
void ck_precision_judge_tensor(const ck_case *c, ck_dtype low, const ck_record_entry *ref,
                               const ck_record_entry *const *calib, int n_calib,
                               const ck_record_entry *lowe,
                               double step_grad_norm, double step_spread,
                               const ck_precision_override *ov,
                               ck_tensor_result *tr);
/* The same with the entry's distances already measured (ck_calib_distances_of). */
void ck_precision_judge_measured(const ck_case *c, ck_dtype low, const ck_record_entry *ref,
                                 const ck_calib_distances *dist, const ck_record_entry *lowe,
                                 double step_grad_norm, double step_spread,
                                 const ck_precision_override *ov, ck_tensor_result *tr);

/* G per step: the L2 norm over every gradient entry of rec recorded at that step; out has
 * rec->steps entries. */
void ck_step_grad_norms(const ck_record *rec, double *out);
/* G for one step (the entries of `step` in rec). */
double ck_step_grad_norm_at(const ck_record *rec, int step);

#endif
