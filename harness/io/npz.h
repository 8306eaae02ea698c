/*
 * NumPy .npz: a zip archive of .npy members (np.savez: stored; np.savez_compressed:
 * deflated). Each member "<name>.npy" becomes a tensor called <name>.
 *
 * The central directory is the only index trusted: the end-of-central-directory record
 * must sit exactly at the end of the file (after its comment), zip64 records are followed
 * when present, and every offset and size is bounds-checked against the file before it is
 * used. A member's declared uncompressed size is checked (against the file and against
 * deflate's greatest possible ratio) before anything is allocated or inflated; inflating
 * must produce exactly that many bytes, and the CRC-32 must match. Refused: encrypted
 * members, methods other than stored and deflate, members not named *.npy, two members
 * with one name, and anything the .npy reader refuses.
 */
#ifndef CK_NPZ_H
#define CK_NPZ_H

#include "harness/io/tensorset.h"

/* Parses len bytes (path: for messages) into out (initialised here, empty on failure).
 * Stored members point into buf; deflated ones are inflated into memory out owns. */
ck_status ck_npz_parse(const void *buf, size_t len, const char *path, ck_tensorset *out,
                       ck_error *err);

/* Maps path and parses it; the mapping belongs to out. */
ck_status ck_npz_load(const char *path, ck_tensorset *out, ck_error *err);

#endif
