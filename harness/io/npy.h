/*
 * NumPy .npy: magic "\x93NUMPY", version byte pair (1.0: 2-byte header length; 2.0 and
 * 3.0: 4-byte), a Python dict literal {'descr': '<f4', 'fortran_order': False,
 * 'shape': (2, 3), } padded with spaces and ending in a newline, then the data.
 *
 * The reader never evaluates the header: it parses exactly that dict (keys in either
 * quote style, in any order, each once; an integer may carry Python 2's L suffix), and
 * refuses with one line naming the file and the field: an unknown version, a header
 * longer than CK_NPY_MAX_HEADER (numpy's own limit) or past the end of the file, an
 * unknown, structured, object or string descr, a shape with more than CK_MAX_DIMS
 * dimensions or whose size overflows, data shorter or longer than the shape needs.
 * Byte order is honoured ('>' data is byte-swapped, '=' means this machine's order) and
 * Fortran-order data is transposed into C order, both into an owned buffer; otherwise the
 * data points into the file's mapping.
 */
#ifndef CK_NPY_H
#define CK_NPY_H

#include "harness/io/tensorset.h"

#define CK_NPY_MAX_HEADER 10000u

/* Parses one .npy image of len bytes (path: for messages) and appends it to set as a
 * tensor called name. Data points into buf unless converted. */
ck_status ck_npy_parse_into(const void *buf, size_t len, const char *path, const char *name,
                            ck_tensorset *set, ck_error *err);

/* Maps path and parses it into out (initialised here, empty on failure); the tensor is
 * named after the file's stem ("grads/fc1.weight.npy" -> "fc1.weight"). */
ck_status ck_npy_load(const char *path, ck_tensorset *out, ck_error *err);

/* Writes t as a version 1.0 .npy (C order, little-endian) to path atomically. BF16 has no
 * .npy dtype and is refused. */
ck_status ck_npy_write(const char *path, const ck_named_tensor *t, ck_error *err);

#endif
