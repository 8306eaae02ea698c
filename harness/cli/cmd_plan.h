/*
 * The `plan` subcommand: each run's predicted peak activation bytes (plain and checkpointed,
 * per segment) for a case and dtype, from a dry run of the executor's schedule
 * (harness/engine/memory_plan.h), without allocating a tensor.
 */
#ifndef CK_CMD_PLAN_H
#define CK_CMD_PLAN_H

/* `ckpt-harness plan CASE.json [--dtype LIST]` (argv[0] is "plan"); returns the exit code. */
int ck_main_plan(int argc, char **argv);

#endif
