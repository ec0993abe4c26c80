/* A program executing its own file again, in its own place (same pid): baton-worker and
 * baton for OpenBLAS's kernels (cpu_blas_core.h), baton run and resume to continue a run
 * in a fresh process (run_afresh.h).
 *
 * The kernel names a process (comm: what ps, pgrep, pkill, killall and top show) after
 * the path it executed: "exe" for /proc/self/exe. bt_exec_self carries the name in
 * BT_EXEC_SELF_COMM_ENV; bt_exec_self_restore, first thing in the new image (bt_proc_start
 * calls it), sets it back and removes the variable, so nothing started later sees it. */
#ifndef BATON_EXEC_SELF_H
#define BATON_EXEC_SELF_H

#define BT_EXEC_SELF_COMM_ENV "BATON_COMM"

/* Whether executing /proc/self/exe runs this program again: not where it is the dynamic
 * loader (the program was started as `ld-linux-x86-64.so.2 PROGRAM`: executing the loader
 * again would lose the program), nor where the link cannot be read. */
int bt_exec_self_runnable(void);

/* Executes /proc/self/exe (this program's own file, even if its path was replaced since)
 * with argv, its name carried along; returns only where it could not: -1 with errno set
 * (ENOEXEC where !bt_exec_self_runnable()), the variable removed again. */
int bt_exec_self(char *const argv[]);

/* In the new image: the name bt_exec_self carried set back, where the kernel named the
 * process "exe" (a variable inherited from elsewhere renames nothing); the variable
 * removed in any case. Idempotent. */
void bt_exec_self_restore(void);

#endif
