/*
 * A case's typed result (result.h) as bytes, and back: how `run --jobs N` worker
 * processes hand their results to the parent, which renders every report from them as
 * it does from its own runs (no rendered output is parsed back). The encoding is
 * harness/io/wire.h's, versioned:
 *
 *   "CKRESULT" (8 bytes), u32 version (CK_RESULT_WIRE_VERSION), then every field of the
 *   result in a fixed order; arrays as a count and their elements; nothing after.
 *
 * The reader is strict: a short, long or altered encoding, an out-of-range enum or index
 * (a layer beyond the graph, a first-divergence beyond the tensors, a first bad element
 * beyond its tensor) is refused with one line, and nothing is half-filled. Both processes
 * hold the same case and graph, which the result points at; they are not encoded.
 */
#ifndef CK_RESULT_WIRE_H
#define CK_RESULT_WIRE_H

#include "harness/io/wire.h"
#include "harness/verify/result.h"

#define CK_RESULT_WIRE_MAGIC "CKRESULT"
#define CK_RESULT_WIRE_VERSION 4 /* 2: each run's predicted peak and held bytes; 3: how
                                    plain-equivalence was established; 4: each step's
                                    training seconds */

/* Appends r's encoding to w (w->failed when out of memory). */
void ck_result_encode(const ck_result *r, ck_wire_out *w);

/* Reads one encoded result from r (which may hold more after it) for case graph g into
 * res (free with ck_result_free, also after a failure). */
ck_status ck_result_decode(ck_wire_in *r, const ck_graph *g, ck_result *res, ck_error *err);

#endif
