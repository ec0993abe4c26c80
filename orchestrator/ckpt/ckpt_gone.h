/* A checkpoint removed while a command reads it, as a run's retention removes its older
 * checkpoints as it saves new ones (renamed to NAME.deleting, then deleted): how every
 * command that reads one (`baton eval`, `baton ckpt inspect`, `verify`, `reshard`,
 * `export`, `pack`, `push`) tells that from damage, and what it does then. Each runs its
 * read as a try under ckpt_gone_retry, which reads the run's newest checkpoint again when
 * the one read went (at most CKPT_GONE_TRIES reads in all). */
#ifndef BATON_CKPT_GONE_H
#define BATON_CKPT_GONE_H

#include <stddef.h>

#include "util/err.h"

#define CKPT_GONE_TRIES 3 /* reads of a run's newest checkpoint, each removed while read */

/* One read of what the command was given (a checkpoint, or a run directory or checkpoint
 * root: its newest checkpoint, ckpt_resolve), its state in ctx set afresh: the checkpoint
 * directory found into dir (cap bytes; left "" when none was found), then 0, or an error
 * code with diag saying why. */
typedef int (*ckpt_gone_try)(void *ctx, char *dir, size_t cap, bt_diag *diag);

/* Runs fn (cmd, for messages: "baton eval"; named: what the command was given). While a
 * try fails because its checkpoint was removed while it was read, and named is a run
 * directory or checkpoint root that still has a newest checkpoint, says so in a note on
 * stderr, removes what is registered for cleanup (bt_cleanup_run: the failed try's
 * partial output; the caller registers nothing before) and tries again, CKPT_GONE_TRIES
 * tries at most; never after a signal (bt_cleanup_signal). Returns the last try's code,
 * dir its checkpoint; when that try's checkpoint was removed while read, BT_EIO with
 * *gone (may be NULL) 1 and diag saying so, never as damage: the checkpoint named
 * itself, the last one of named, or each of the CKPT_GONE_TRIES read. */
int ckpt_gone_retry(const char *cmd, const char *named, ckpt_gone_try fn, void *ctx, char *dir,
                    size_t cap, int *gone, bt_diag *diag);

/* BATON_FAULT_CKPT_REMOVE=NAME[,NAME...] (tests): checkpoint dir, at position at of the
 * command, removed when its name is one of those and BATON_FAULT_CKPT_REMOVE_AT names that
 * position (unset or empty: "open"), as a run's retention removes it (renamed aside, then
 * deleted). Every command has "open", once it opened the checkpoint; push also has "sent",
 * once it sent a file of it, and "manifest", just before it sends manifest.pb. */
void ckpt_gone_fault_at(const char *dir, const char *at);
/* ckpt_gone_fault_at(dir, "open"). */
void ckpt_gone_fault(const char *dir);

#endif
