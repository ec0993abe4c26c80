/* baton ckpt verify CKPT: every CRC, and every tensor covered exactly once. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"

static void verify_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt verify CKPT\n\n"
               "Reads every shard of a checkpoint and checks its CRC32C (per block, so damage\n"
               "is located to the byte range), its length, and that the shards of every tensor\n"
               "cover it exactly once. Each problem is printed with the file, byte range and\n"
               "tensor. CKPT is a checkpoint directory or a run directory (its newest complete\n"
               "checkpoint).\n\nExit status: 0 intact, 1 damaged, 2 not a checkpoint.\n");
}

static void verify_print(void *ctx, const char *line) {
    (void)ctx;
    printf("DAMAGED: %s\n", line);
}

int ckpt_cmd_verify(int argc, char **argv) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        verify_usage(stdout);
        return BT_EXIT_OK;
    }
    if (argc != 2 || argv[1][0] == '-') {
        verify_usage(stderr);
        return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    char found[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    Baton__Manifest *m = NULL;
    if (ckpt_resolve(argv[1], found, sizeof found, &diag) != 0) { /* no checkpoint there */
        fprintf(stderr, "baton ckpt verify: %s\n", diag.msg);
        return BT_EXIT_USAGE;
    }
    int orc = ckpt_open(found, dir, sizeof dir, &m, &diag);
    if (orc == BT_EINVAL) { /* its manifest does not decode, or is empty: damaged */
        printf("DAMAGED: %s\n%s: DAMAGED (its manifest)\n", diag.msg, found);
        return BT_EXIT_FAILURE;
    }
    if (orc != 0) { /* unreadable here, or a newer baton's format: not known damaged */
        fprintf(stderr, "baton ckpt verify: %s\n", diag.msg);
        return BT_EXIT_USAGE;
    }
    ckpt_verify_report rep;
    int rc = ckpt_verify(dir, m, verify_print, NULL, &rep, &diag);
    baton__manifest__free_unpacked(m, NULL);
    if (rc != 0) {
        fprintf(stderr, "baton ckpt verify: %s\n", diag.msg);
        return BT_EXIT_USAGE;
    }
    printf("%s: %llu tensors, %llu fp8 histories, %llu shards, %llu bytes checked: %s\n", dir,
           (unsigned long long)rep.tensors, (unsigned long long)rep.fp8_histories,
           (unsigned long long)rep.shards, (unsigned long long)rep.bytes,
           rep.problems ? "DAMAGED" : "intact");
    if (rep.problems) printf("%llu problem(s) found\n", (unsigned long long)rep.problems);
    return rep.problems ? BT_EXIT_FAILURE : BT_EXIT_OK;
}
