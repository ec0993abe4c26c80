/* A checkpoint removed while a command reads it, as a run's retention removes its older
 * checkpoints as it saves new ones (renamed to NAME.deleting, then deleted): how the
 * commands that read one (`baton eval`, `baton ckpt export`) tell that from damage, and
 * what they do then. A command that fails reading checkpoint DIR asks ckpt_gone; 1 means
 * read again what the user named (at most CKPT_GONE_TRIES reads in all). */
#ifndef BATON_CKPT_GONE_H
#define BATON_CKPT_GONE_H

#include "util/err.h"

#define CKPT_GONE_TRIES 3 /* reads of a run's newest checkpoint, each removed while read */

/* After cmd (for messages: "baton eval") failed to read checkpoint dir, which ckpt_open
 * found for named: 0, diag untouched, when dir is still there (dir "" : none was found);
 * when it was removed and named is a run directory or checkpoint root that still has a
 * newest checkpoint, 1 after a note on stderr (read again: that one is read instead);
 * else (the checkpoint named itself, or none left) 0 with diag saying it was removed. */
int ckpt_gone(const char *cmd, const char *named, const char *dir, bt_diag *diag);

/* BATON_FAULT_CKPT_REMOVE=NAME (tests): checkpoint dir, once opened, removed when its
 * name is NAME, as a run's retention removes it (renamed aside, then deleted). */
void ckpt_gone_fault(const char *dir);

#endif
