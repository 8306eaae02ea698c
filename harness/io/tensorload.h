/*
 * Loading tensor files by their extension (.safetensors, .npy, .npz) or a directory of them.
 */
#ifndef CK_TENSORLOAD_H
#define CK_TENSORLOAD_H

#include "harness/io/tensorset.h"

/* Loads path into out, which is initialised here and left empty on failure. path is a .safetensors,
 * .npy or .npz file (by extension), or a directory: every *.safetensors, *.npy and *.npz in it (not
 * recursive, in name order). A .npy file's tensor is named after the file's stem; a
 * .npz member after the member name without ".npy". Two tensors with one name are an
 * error naming both files. */
ck_status ck_tensorset_load(const char *path, ck_tensorset *out, ck_error *err);

#endif
