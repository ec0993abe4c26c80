/* `baton ckpt SUBCOMMAND`: one function per subcommand, each taking the arguments after
 * the subcommand's name (argv[0] is the subcommand) and returning an exit status
 * (BT_EXIT_*). Every one accepts a checkpoint directory or a run directory (its newest
 * complete checkpoint, ckpt_resolve). */
#ifndef BATON_CKPT_CMDS_H
#define BATON_CKPT_CMDS_H

int ckpt_cmd_inspect(int argc, char **argv); /* ckpt_inspect.c */
int ckpt_cmd_verify(int argc, char **argv);  /* ckpt_verify.c */
int ckpt_cmd_reshard(int argc, char **argv); /* ckpt_reshard.c */
int ckpt_cmd_export(int argc, char **argv);  /* ckpt_hf.c */
int ckpt_cmd_import(int argc, char **argv);  /* ckpt_hf.c */
int ckpt_cmd_pack(int argc, char **argv);    /* ckpt_pack.c */
int ckpt_cmd_unpack(int argc, char **argv);  /* ckpt_pack.c */
int ckpt_cmd_push(int argc, char **argv);    /* ckpt_store.c */
int ckpt_cmd_pull(int argc, char **argv);    /* ckpt_store.c */

#endif
