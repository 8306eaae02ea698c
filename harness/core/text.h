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
 * \e or \xNN and a backslash stays a backslash; bytes that are not valid UTF-8 become \xNN,
 * noncharacters \uXXXX, and the second colon of "::" \x3a (a line beginning "::" is a GitHub
 * workflow command, and wrapped text can begin a line anywhere).
 * Writes at most n bytes (NUL included) into out, cutting with "..." when it does not
 * fit, and returns out. A NULL s gives "". */
const char *ck_text_escape(const char *s, char *out, size_t n);

/* U+FDD0..U+FDEF and U+xFFFE/U+xFFFF of every plane: valid UTF-8, yet refused by XML
 * (U+FFFE, U+FFFF) and meant never to be interchanged. */
bool ck_text_is_noncharacter(unsigned cp);

/* The length of the valid UTF-8 sequence at s[0..n) and its code point, or 0 (invalid). */
size_t ck_utf8_next(const char *s, size_t n, unsigned *cp);

/* The JSON / XML / HTML sinks' cleaner: a malloc'ed NUL-terminated copy of s[0..n) with
 * every byte that is not valid UTF-8 and every noncharacter replaced by U+FFFD (how many
 * in *replaced when it is not NULL). NULL when out of memory. */
char *ck_text_utf8_clean(const char *s, size_t n, size_t *replaced);
/* Whether ck_text_utf8_clean would replace anything in s[0..n). */
bool ck_text_utf8_needs_clean(const char *s, size_t n);

/* Whether ck_text_escape would change s. */
bool ck_text_needs_escape(const char *s);

#endif
