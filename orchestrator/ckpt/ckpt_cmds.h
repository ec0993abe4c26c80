/* `baton ckpt SUBCOMMAND`: one function per subcommand, each taking the arguments after
 * the subcommand's name (argv[0] is the subcommand) and returning an exit status
 * (BT_EXIT_*). Every one accepts a checkpoint directory or a run directory (its newest
 * complete checkpoint, ckpt_resolve). */
#ifndef BATON_CKPT_CMDS_H
#define BATON_CKPT_CMDS_H

#include <stdint.h>

#include "manifest.pb-c.h"
#include "recipe.pb-c.h"
#include "util/buf.h"

int ckpt_cmd_inspect(int argc, char **argv); /* ckpt_inspect.c */
int ckpt_cmd_verify(int argc, char **argv);  /* ckpt_verify.c */
int ckpt_cmd_reshard(int argc, char **argv); /* ckpt_reshard.c */
int ckpt_cmd_export(int argc, char **argv);  /* ckpt_hf.c */
int ckpt_cmd_import(int argc, char **argv);  /* ckpt_hf.c */
int ckpt_cmd_pack(int argc, char **argv);    /* ckpt_pack.c */
int ckpt_cmd_unpack(int argc, char **argv);  /* ckpt_pack.c */
int ckpt_cmd_push(int argc, char **argv);    /* ckpt_store.c */
int ckpt_cmd_pull(int argc, char **argv);    /* ckpt_store.c */

/* A checkpoint's layout in `baton ckpt reshard --to` syntax, the interleaved pipeline (v)
 * and an uneven stage split (layers=) included: "tp2,pp2,v2,layers=2+1+1+1,cp1,dp1,ep1,
 * zero1"; "unknown" for NULL (ckpt_inspect.c). */
void ckpt_layout_text(bt_buf *b, const Baton__Parallel *p);

/* Checks m's tensor list against the model m records (ckpt_tensor_set.c): every tensor of
 * that model (one process: every layer, every expert) with the model's shape, both AdamW
 * moments of each when the checkpoint holds any optimizer state, and no other entry. Each
 * problem goes to fn (may be NULL) as one line; returns how many there were. */
uint64_t ckpt_check_tensor_set(const Baton__Manifest *m, void (*fn)(void *, const char *),
                               void *ctx);

#endif
