/*
 * JSON syntax, checked strictly before cJSON builds a tree: cJSON alone accepts leading
 * control bytes, raw control characters in strings, "007" and "3.", invalid UTF-8 and
 * "\u0000" (which cuts a C string short). Every JSON reader (case files, tensor headers,
 * tolerance and name-map files) passes this gate first.
 */
#ifndef CK_JSON_SYNTAX_H
#define CK_JSON_SYNTAX_H

#include <stdbool.h>
#include <stddef.h>

/* The one syntax gate of every JSON reader (RFC 8259, strictly): valid UTF-8, no NUL byte,
 * no "\u0000" escape and no unpaired surrogate escape, no raw control character in a
 * string, only space, tab, CR and LF as whitespace (no leading garbage, no byte-order
 * mark), numbers as the grammar writes them (no "007", "3.", "+1", ".5"), literals spelled
 * out, nesting at most 512 deep, nothing but whitespace after the value. Returns true when
 * the text is one valid value; else *offset is where it went wrong and *why says what
 * ("malformed JSON", "unexpected text after the JSON value", ...). */
bool ck_json_syntax_ok(const char *text, size_t len, size_t *offset, const char **why);

#endif
