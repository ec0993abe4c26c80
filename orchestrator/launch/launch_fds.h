/* Whether this process may hold the descriptors a job of N ranks needs: the launcher
 * keeps, per rank, the read ends of its stdout and stderr pipes, its pidfd and (a PMIx
 * client) the PMIx server's connection to it, and opens 7 more for a moment while it
 * starts each one (pipes, /dev/null). A job over RLIMIT_NOFILE would fail part way, at
 * whichever rank the table fills, with EMFILE, the same way every time. Under Slurm the
 * launcher starts one srun, but `baton run` still holds a control connection and a
 * rendezvous-store connection for every rank of the step: those are what count. */
#ifndef BATON_LAUNCH_FDS_H
#define BATON_LAUNCH_FDS_H

#include <stddef.h>

#include "util/err.h"

#define LAUNCH_FDS_PER_RANK 4 /* stdout, stderr, pidfd, the PMIx connection */
#define LAUNCH_FDS_STARTING 8 /* a rank being started: 7 of its own, one for PMIx */

/* The descriptors a job of `ranks` ranks needs on top of those open now: per_rank for
 * each (LAUNCH_FDS_PER_RANK, plus what the caller holds per rank, e.g. a control
 * channel's connection), `others` besides (a Slurm step's one srun process) and
 * LAUNCH_FDS_STARTING. */
long launch_fds_needed(int ranks, int per_rank, long others);

/* 0 when they fit under the soft RLIMIT_NOFILE, which is raised to the hard limit first
 * if that is too low and the hard one is not (note then says so; else note is ""); else
 * BT_ERANGE, diag naming the soft and hard limits and the number needed. */
int launch_fds_check(int ranks, int per_rank, long others, char *note, size_t cap, bt_diag *diag);

#endif
