/* The descriptors a process was handed by whatever started it (a caller's `exec 9>lock;
 * flock 9`, a pipe a supervisor waits on for EOF, a jobserver's): open at start and not
 * close-on-exec, noted by bt_proc_start before anything of the program opens a file. They
 * are the caller's, not the program's: a program that executes itself again in its place
 * (bt_exec_self) leaves them open, as any exec would, while its children (ranks, sbatch)
 * get none of them, as they get none of its own. */
#ifndef BATON_FD_INHERITED_H
#define BATON_FD_INHERITED_H

/* At most this many are noted (the lowest numbers); any more are taken as the program's. */
#define BT_FD_INHERITED_MAX 256

/* Notes the descriptors from 3 up open now and not close-on-exec, with the file each is
 * open on; the first call only. Async-signal-safe (no allocation: /proc/self/fd read with
 * getdents64, else fcntl on 3..1023). */
void bt_fd_inherited_note(void);

/* Those noted that are still open on the same file (not closed and the number reused),
 * ascending, into fds (at most BT_FD_INHERITED_MAX); how many. */
int bt_fd_inherited_list(int *fds);

#endif
