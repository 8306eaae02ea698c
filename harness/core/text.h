/*
 * Text checks shared by every reader of user files.
 */
#ifndef CK_TEXT_H
#define CK_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). */
bool ck_utf8_valid(const char *s, size_t n);

#endif
