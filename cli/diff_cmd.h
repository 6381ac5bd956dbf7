/* SPDX-License-Identifier: MIT */
/* `memprof diff OLD NEW`: the subcommand (cli/diff.c). */
#ifndef MP_CLI_DIFF_CMD_H
#define MP_CLI_DIFF_CMD_H

/* argv[0] is "diff". Returns the exit status: 0 no limit exceeded, 1 a
 * limit exceeded, 2 bad input (usage, a profile that cannot be read). */
int memprof_cmd_diff(int argc, char **argv);

#endif /* MP_CLI_DIFF_CMD_H */
