/* `baton ckpt SUBCOMMAND`: one function per subcommand, each taking the arguments after
 * the subcommand's name (argv[0] is the subcommand) and returning an exit status
 * (BT_EXIT_*). Every one accepts a checkpoint directory or a run directory (its newest
 * complete checkpoint, ckpt_resolve). */
#ifndef BATON_CKPT_CMDS_H
#define BATON_CKPT_CMDS_H

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

#endif
