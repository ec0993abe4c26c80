/* baton ckpt verify CKPT: every CRC, and every tensor covered exactly once. */
#include <stdio.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "util/buf.h"

static void verify_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt verify CKPT\n\n"
               "Checks the manifest's own CRC32C and that it lists every tensor of the model it\n"
               "records (and both optimizer moments of each, when it holds optimizer state)\n"
               "and nothing else, then reads every shard of a checkpoint and checks its CRC32C\n"
               "(per block, so damage is located to the byte range), its length, and that the\n"
               "shards of every tensor cover it exactly once. Each problem is printed with the\n"
               "file, byte range and tensor. A manifest written before manifests carried a\n"
               "checksum is read unchecked, with a note. CKPT is a checkpoint directory or a\n"
               "run directory (its newest complete checkpoint; one a run's retention removes\n"
               "while it is read is not damage: the run's newest is checked instead).\n\n"
               "Exit status: 0 intact, 1 damaged, 2 not a checkpoint, or one that could not\n"
               "be read (unreadable here, or removed while it was read).\n");
}

/* What verify prints on stdout, kept until the checkpoint is known to have stayed while
 * it was read (a removed one is no damage). */
static void verify_print(void *ctx, const char *line) {
    bt_buf_printf(ctx, "DAMAGED: %s\n", line);
}

/* A problem of the manifest's tensor list: named as the manifest's. */
typedef struct verify_where {
    bt_buf *out;
    const char *manifest;
} verify_where;

static void verify_print_manifest(void *ctx, const char *line) {
    const verify_where *w = ctx;
    bt_buf_printf(w->out, "DAMAGED: %s: %s\n", w->manifest, line);
}

/* The tensor list against the model (ckpt_check_tensor_set), after a note when the
 * manifest carries no checksum of its own: its other fields are unchecked. */
static uint64_t verify_manifest(bt_buf *out, const char *dir, const Baton__Manifest *m) {
    char where[CKPT_PATH_MAX + 32];
    snprintf(where, sizeof where, "%s/%s", dir, CKPT_MANIFEST);
    if (!ckpt_manifest_checked(m))
        bt_buf_printf(out,
                      "note: %s carries no checksum of its own (written before baton checksummed "
                      "manifests): its tensor list is checked against its model, its other "
                      "fields (step, data position, model) cannot be\n",
                      where);
    verify_where w = {.out = out, .manifest = where};
    return ckpt_check_tensor_set(m, verify_print_manifest, &w);
}

/* One verification (ckpt_gone_try): its report and what it prints into out. */
typedef struct verify_try {
    const char *path;
    bt_buf out;
    ckpt_verify_report rep;
    int bad_manifest; /* its manifest does not decode, or is empty: damaged */
    int damaged;      /* read through, with problems */
} verify_try;

/* BT_EIO when damaged (v->damaged), so that a checkpoint removed while it was read
 * is told from one that is damaged. */
static int verify_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    verify_try *v = ctx;
    bt_buf_free(&v->out);
    bt_buf_init(&v->out);
    v->rep = (ckpt_verify_report){0}, v->bad_manifest = v->damaged = 0;
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(v->path, dir, cap, &m, diag);
    v->bad_manifest = rc == BT_EINVAL && dir[0] != '\0';
    if (rc != 0) return rc;
    ckpt_gone_fault(dir);
    rc = ckpt_verify(dir, m, verify_print, &v->out, &v->rep, diag);
    if (rc == 0) v->rep.problems += verify_manifest(&v->out, dir, m);
    baton__manifest__free_unpacked(m, NULL);
    v->damaged = rc == 0 && v->rep.problems > 0;
    return v->damaged ? BT_EIO : rc;
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
    char dir[CKPT_PATH_MAX];
    verify_try v = {.path = path};
    bt_buf_init(&v.out);
    int gone;
    int rc =
        ckpt_gone_retry("baton ckpt verify", path, verify_once, &v, dir, sizeof dir, &gone, &diag);
    const ckpt_verify_report *rep = &v.rep;
    if (rc == 0 || (!gone && v.damaged)) {
        fputs(bt_buf_str(&v.out), stdout);
        printf("%s: %llu tensors, %llu fp8 histories, %llu shards, %llu bytes checked: %s\n", dir,
               (unsigned long long)rep->tensors, (unsigned long long)rep->fp8_histories,
               (unsigned long long)rep->shards, (unsigned long long)rep->bytes,
               rep->problems ? "DAMAGED" : "intact");
        if (rep->problems)
            printf("%llu problem%s found\n", (unsigned long long)rep->problems,
                   rep->problems == 1 ? "" : "s");
        status = rep->problems ? BT_EXIT_FAILURE : BT_EXIT_OK;
    } else if (!gone && v.bad_manifest) {
        printf("DAMAGED: %s\n%s: DAMAGED (its manifest)\n", diag.msg, dir);
        status = BT_EXIT_FAILURE;
    } else { /* none there, unreadable here, a newer baton's format, removed: not damage */
        fprintf(stderr, "baton ckpt verify: %s\n", diag.msg);
        status = BT_EXIT_USAGE;
    }
    bt_buf_free(&v.out);
    return status;
}
