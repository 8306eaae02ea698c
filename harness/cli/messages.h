/*
 * What the CLI writes to the terminal about itself: one-line errors and notes with every
 * user string escaped (ck_text_escape), and the signal handling that removes a half-written
 * temporary file when the run is interrupted.
 */
#ifndef CK_CLI_MESSAGES_H
#define CK_CLI_MESSAGES_H

#include <stdio.h>

/* "ckpt-harness: <msg>" on stderr, on one line whatever msg holds. */
void ck_cli_error(const char *msg);
/* The same on f (a worker's stream). */
void ck_cli_error_to(FILE *f, const char *msg);
/* The same, formatted; every argument is part of msg before it is escaped. */
void ck_cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "ckpt-harness: note: <msg>" on stderr. */
void ck_cli_note(const char *msg);

/* SIGINT/SIGTERM/SIGHUP: remove the atomic writer's temporary files, then die of the
 * signal as before. CK_TEST_SIGNAL_IN_WRITE=1 in the environment (a test hook, used by
 * tests/cli/run.sh) raises SIGTERM right after a temporary file is created. */
void ck_cli_install_signal_cleanup(void);

/* The folder for temporary files: $TMPDIR when set and not empty, else /tmp. */
const char *ck_cli_temp_dir(void);

#endif
