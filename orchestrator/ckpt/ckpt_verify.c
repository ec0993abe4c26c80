/* baton ckpt verify CKPT: every CRC, and every tensor covered exactly once. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"

static void verify_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt verify CKPT\n\n"
               "Checks the manifest's own CRC32C and that it lists every tensor of the model it\n"
               "records (and both optimizer moments of each, when it holds optimizer state)\n"
               "and nothing else, then reads every shard of a checkpoint and checks its CRC32C\n"
               "(per block, so damage is located to the byte range), its length, and that the\n"
               "shards of every tensor cover it exactly once. Each problem is printed with the\n"
               "file, byte range and tensor. A manifest written before manifests carried a\n"
               "checksum is read unchecked, with a note. CKPT is a checkpoint directory or a\n"
               "run directory (its newest complete checkpoint).\n\n"
               "Exit status: 0 intact, 1 damaged, 2 not a checkpoint.\n");
}

static void verify_print(void *ctx, const char *line) {
    (void)ctx;
    printf("DAMAGED: %s\n", line);
}

/* A problem of the manifest's tensor list: named as the manifest's (ctx: its path). */
static void verify_print_manifest(void *ctx, const char *line) {
    printf("DAMAGED: %s: %s\n", (const char *)ctx, line);
}

/* The tensor list against the model (ckpt_check_tensor_set), after a note when the
 * manifest carries no checksum of its own: its other fields are unchecked. */
static uint64_t verify_manifest(const char *dir, const Baton__Manifest *m) {
    char where[CKPT_PATH_MAX + 32];
    snprintf(where, sizeof where, "%s/%s", dir, CKPT_MANIFEST);
    if (!ckpt_manifest_checked(m))
        printf("note: %s carries no checksum of its own (written before baton checksummed "
               "manifests): its tensor list is checked against its model, its other fields "
               "(step, data position, model) cannot be\n",
               where);
    return ckpt_check_tensor_set(m, verify_print_manifest, where);
}

/* The one argument, CKPT; NULL after saying what is wrong (status: the exit status). */
static const char *verify_arg(int argc, char **argv, int *status) {
    const char *path = NULL;
    *status = BT_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            verify_usage(stdout);
            *status = BT_EXIT_OK;
            return NULL;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "baton ckpt verify: unknown option '%s'\n", argv[i]);
            verify_usage(stderr);
            return NULL;
        } else if (path != NULL) {
            fprintf(stderr, "baton ckpt verify: one checkpoint at a time (got '%s' and '%s')\n",
                    path, argv[i]);
            return NULL;
        }
        path = argv[i];
    }
    if (path == NULL) {
        fprintf(stderr, "baton ckpt verify: missing CKPT\n");
        verify_usage(stderr);
    }
    return path;
}

int ckpt_cmd_verify(int argc, char **argv) {
    int status;
    const char *path = verify_arg(argc, argv, &status);
    if (path == NULL) return status;
    bt_diag diag;
    bt_diag_init(&diag);
    char found[CKPT_PATH_MAX], dir[CKPT_PATH_MAX];
    Baton__Manifest *m = NULL;
    if (ckpt_resolve(path, found, sizeof found, &diag) != 0) { /* no checkpoint there */
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
    if (rc == 0) rep.problems += verify_manifest(dir, m);
    baton__manifest__free_unpacked(m, NULL);
    if (rc != 0) {
        fprintf(stderr, "baton ckpt verify: %s\n", diag.msg);
        return BT_EXIT_USAGE;
    }
    printf("%s: %llu tensors, %llu fp8 histories, %llu shards, %llu bytes checked: %s\n", dir,
           (unsigned long long)rep.tensors, (unsigned long long)rep.fp8_histories,
           (unsigned long long)rep.shards, (unsigned long long)rep.bytes,
           rep.problems ? "DAMAGED" : "intact");
    if (rep.problems)
        printf("%llu problem%s found\n", (unsigned long long)rep.problems,
               rep.problems == 1 ? "" : "s");
    return rep.problems ? BT_EXIT_FAILURE : BT_EXIT_OK;
}
