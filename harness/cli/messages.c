/* One-line messages and the interrupt cleanup (messages.h). */
#include "harness/cli/messages.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cli/help_text.h"
#include "harness/core/status.h"
#include "harness/core/text.h"
#include "harness/io/files.h"

void ck_cli_error_to(FILE *f, const char *msg)
{
    char shown[CK_ERROR_MAX * 2];
    fflush(stdout);
    fprintf(f, "ckpt-harness: %s\n", ck_text_escape(msg, shown, sizeof shown));
}

void ck_cli_error(const char *msg)
{
    ck_cli_error_to(stderr, msg);
}

void ck_cli_errorf(const char *fmt, ...)
{
    char msg[CK_ERROR_MAX * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ck_cli_error(msg);
}

void ck_cli_note(const char *msg)
{
    char shown[CK_ERROR_MAX], line[CK_ERROR_MAX + 32];
    snprintf(line, sizeof line, "ckpt-harness: note: %s\n",
             ck_text_escape(msg, shown, sizeof shown));
    ck_cli_write_help(stderr, line); /* at 80 columns */
}

static void on_signal(int sig)
{
    /* async-signal-safe only: unlink(2), sigaction(2), raise(3) */
    ck_atomic_cleanup_on_signal();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
}

static void raise_in_write(const char *tmp_path)
{
    (void)tmp_path;
    raise(SIGTERM);
}

void ck_cli_install_signal_cleanup(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa, old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue; /* ignored by whoever started us (nohup): leave it so */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
    const char *hook = getenv("CK_TEST_SIGNAL_IN_WRITE");
    if (hook && strcmp(hook, "1") == 0)
        ck_atomic_after_open_hook = raise_in_write;
}

const char *ck_cli_temp_dir(void)
{
    const char *t = getenv("TMPDIR");
    return t && *t ? t : "/tmp";
}
