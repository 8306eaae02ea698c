/*
 * Text checks shared by every reader of user files.
 */
#ifndef CK_TEXT_H
#define CK_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
bool ck_utf8_valid(const char *s, size_t n);
/* The offset of the first byte that is not part of valid UTF-8, or n when all are. */
size_t ck_utf8_invalid_at(const char *s, size_t n);

/* The one escaper for user text shown on a terminal or in a one-line message (case names,
 * descriptions, tensor names, paths): control characters (C0, DEL, C1) become \n, \t, \r,
 * \e or \xNN and a backslash stays a backslash; bytes that are not valid UTF-8 become \xNN.
 * Writes at most n bytes (NUL included) into out, cutting with "..." when it does not
 * fit, and returns out. A NULL s gives "". */
const char *ck_text_escape(const char *s, char *out, size_t n);

/* Whether ck_text_escape would change s. */
bool ck_text_needs_escape(const char *s);

#endif
