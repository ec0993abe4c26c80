/* baton ckpt: dispatches to the checkpoint tools (orchestrator/ckpt/). */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt_cmds.h"
#include "cli.h"
#include "util/err.h"

typedef struct ckpt_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} ckpt_command;

static const ckpt_command ckpt_commands[] = {
    {"inspect", ckpt_cmd_inspect, "tensors, shapes, layout, bytes, step and stage"},
    {"verify", ckpt_cmd_verify, "check every CRC and that the shards cover each tensor once"},
    {"reshard", ckpt_cmd_reshard, "rewrite a checkpoint for another layout (offline)"},
    {"export", ckpt_cmd_export, "write a Hugging Face LLaMA model (safetensors + config.json)"},
    {"import", ckpt_cmd_import, "make a checkpoint from a Hugging Face LLaMA model"},
    {"pack", ckpt_cmd_pack, "archive a checkpoint as tar + zstd (streaming, CRC-checked)"},
    {"unpack", ckpt_cmd_unpack, "restore a packed checkpoint (CRC-checked)"},
    {"push", ckpt_cmd_push, "upload a checkpoint to an HTTP or S3-compatible store"},
    {"pull", ckpt_cmd_pull, "download a checkpoint from an HTTP or S3-compatible store"},
};

static void ckpt_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt COMMAND [ARGS]\n\n"
               "Checkpoint tools. CKPT is a checkpoint directory or a run directory (its newest\n"
               "complete checkpoint). A checkpoint that a run's retention removes while a tool\n"
               "reads it is not damage: given the run directory, the tool reads the run's\n"
               "newest instead (3 tries in all); given the checkpoint, it says it was removed.\n"
               "\ncommands:\n");
    for (size_t i = 0; i < sizeof ckpt_commands / sizeof ckpt_commands[0]; i++)
        fprintf(f, "  %-8s %s\n", ckpt_commands[i].name, ckpt_commands[i].summary);
    fprintf(f, "\nRun 'baton ckpt COMMAND --help' for a command's options.\n");
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2) {
        ckpt_usage(stderr);
        return BT_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        ckpt_usage(stdout);
        return BT_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof ckpt_commands / sizeof ckpt_commands[0]; i++)
        if (strcmp(argv[1], ckpt_commands[i].name) == 0)
            return ckpt_commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "baton ckpt: unknown %s '%s'\n\n", argv[1][0] == '-' ? "option" : "subcommand",
            argv[1]);
    ckpt_usage(stderr);
    return BT_EXIT_USAGE;
}
