/*
 * The `judge` subcommand: judges a framework driver's dump folder (the judge input,
 * docs/interop.md "Judge input") with the harness's rules and writes the harness's reports.
 */
#ifndef CK_CMD_JUDGE_H
#define CK_CMD_JUDGE_H

/* Parses judge's arguments (argv[0] is "judge") and runs it; returns the exit code: 0 every
 * item passed, 1 a failure, 2 bad input or usage. */
int ck_main_judge(int argc, char **argv);

#endif
