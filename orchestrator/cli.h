/* The `baton` command-line programs: one function per subcommand, each taking the
 * arguments after the subcommand name and returning a process exit status
 * (BT_EXIT_*). */
#ifndef BATON_CLI_H
#define BATON_CLI_H

int cmd_plan(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_spec(int argc, char **argv);
int cmd_launch(int argc, char **argv);
int cmd_ckpt(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_submit(int argc, char **argv);
int cmd_status(int argc, char **argv);

/* A dataset prefix as given on a command line: "data/x.bin" or "data/x.idx" stands for
 * "data/x" (a path the shell completed). The caller frees it; NULL when out of memory. */
char *cli_data_prefix(const char *arg);

#endif
