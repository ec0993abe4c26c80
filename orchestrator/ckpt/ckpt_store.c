/* baton ckpt push / pull: a checkpoint to and from a remote store (ckpt_store_remote.h),
 * one object per file, manifest.pb last.
 *
 * push sends a shard file again unless the store's manifest.pb lists it with the same size
 * and CRC32C values (and the object has that size): a size alone says nothing of the
 * content, a later checkpoint of the same name having files of the same sizes. Before
 * replacing anything that manifest lists, push removes it (DELETE), and it sends its own
 * manifest.pb last, so that a manifest in the store always describes the files there and
 * marks the copy complete; the replaced checkpoint's files that this one has not go with
 * its manifest.pb. Shard bytes are checked against the manifest's CRC32C as they are read.
 * A push that fails after it changed the store (its checkpoint removed by a
 * run's retention while read, a shard damaged, the store failing) deletes again what it
 * left there without a manifest.pb (push_undo), as far as the store lets it.
 *
 * pull fetches manifest.pb first (it lists the files) into NAME.partial, then every shard
 * file, continuing a partly downloaded one with a Range request, checks each file's CRCs,
 * places manifest.pb last and renames NAME.partial to NAME. Interrupted, it leaves
 * NAME.partial for the next pull to continue. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "ckpt_store_crc.h"
#include "ckpt_store_fs.h"
#include "ckpt_store_remote.h"
#include "../cli.h"
#include "util/cleanup.h"
#include "util/file.h"

#define MANIFEST_DOWNLOAD CKPT_MANIFEST ".download"

typedef struct store_args {
    const char *what, *pos[2];
    int npos, want_pos;
    const char *into, *endpoint;
    long max_time_ms, stall_time_s;
    uint64_t limit_rate;
    const char *given[5]; /* each option's value so far (store_names), or NULL */
} store_args;

static const char *const store_names[] = {"--endpoint", "--max-time", "--stall-time",
                                          "--limit-rate", "--into"};

/* The options push and pull share, as their usage lists them. */
#define STORE_COMMON_OPTIONS                                                                       \
    "  --endpoint URL   the S3 endpoint, http(s)://HOST[:PORT]\n"                                  \
    "  --max-time T     give up on one request after T (then retried): a duration\n"               \
    "                   as recipes write it, 90 (seconds), 30s, 5m, 1h\n"                          \
    "  --stall-time T   give up on one request that moves no byte for T (then\n"                   \
    "                   retried; default 60s, 0: never; whole seconds, rounded up)\n"              \
    "  --limit-rate B   at most B bytes per second: 500K, 100M (K/M/G are powers of\n"             \
    "                   two, 1K = 1024, as in recipes' counts and curl), or 100MB/s\n"             \
    "                   (MB/s powers of ten), 50MiB/s; 0 (the default): no limit;\n"               \
    "                   below 1 byte per second is refused\n"                                      \
    "  --help           show this help\n"

static void push_usage(FILE *f) {
    fprintf(f,
            "usage: baton ckpt push CKPT URL [--endpoint URL] [--max-time T] [--stall-time T]\n"
            "                                [--limit-rate B]\n\n"
            "Uploads checkpoint CKPT (a checkpoint or run directory) as URL/<name>/<file>,\n"
            "manifest.pb last. A file is skipped when the store's manifest.pb lists it with\n"
            "the same size and CRC32C values; before replacing any file that manifest lists,\n"
            "push removes it (DELETE), so a complete push is needed for the store to hold a\n"
            "manifest.pb again, and a stale manifest never describes new files. A store\n"
            "without DELETE (HTTP 405 or 501), or that refuses it (401, 403: check the\n"
            "credentials), cannot have a checkpoint of the same name replaced: push under\n"
            "another name; push says so before changing anything. A replaced checkpoint's\n"
            "files this one has not are removed too. A push that fails after it sent files\n"
            "removes them again (DELETE), saying so, or says how many stay, and where,\n"
            "when the store does not let it. Replacing is not atomic: once push removed\n"
            "the store's manifest.pb of the name, the store holds no complete checkpoint\n"
            "of it until the push completes, and a failed push leaves none; to keep the\n"
            "old one until the new one is there, push under another name.\n\n"
            "URL: http(s)://HOST[:PORT]/PREFIX (PUT/GET/HEAD, e.g. a WebDAV server) or\n"
            "     s3://BUCKET/PREFIX (path-style, SigV4; credentials from AWS_ACCESS_KEY_ID,\n"
            "     AWS_SECRET_ACCESS_KEY, AWS_REGION)\n\n"
            "options:\n"
            "%s\n"
            "Exit status: 0 pushed, 1 failed (the store refused or could not be reached\n"
            "after the retries, a shard failed its CRC32C, the store refused to delete a\n"
            "replaced checkpoint's file once its manifest.pb was removed), 2 bad usage,\n"
            "URL or checkpoint, or a checkpoint of that name to replace in a store without\n"
            "DELETE or that refuses it.\n",
            STORE_COMMON_OPTIONS);
}

static void pull_usage(FILE *f) {
    fprintf(f,
            "usage: baton ckpt pull URL [--into DIR] [--endpoint URL] [--max-time T]\n"
            "                           [--stall-time T] [--limit-rate B]\n\n"
            "Downloads the checkpoint URL names (http(s)://HOST/PREFIX/<name> or\n"
            "s3://BUCKET/PREFIX/<name>) into DIR/<name> through DIR/<name>.partial,\n"
            "checking every CRC32C before the rename. An interrupted pull is resumed by\n"
            "running it again (Range requests continue partly downloaded files).\n\n"
            "options:\n"
            "  --into DIR       where to put it (default: the current directory)\n"
            "%s\n"
            "A failed pull keeps DIR/<name>.partial to continue from when it holds any\n"
            "shard bytes, else removes it and the directories it created for --into.\n\n"
            "Exit status: 0 pulled, 1 failed (not found, unreachable after the retries, a\n"
            "CRC32C mismatch, a later checkpoint format), 2 bad usage or URL, or\n"
            "DIR/<name> already exists.\n",
            STORE_COMMON_OPTIONS);
}

/* --max-time, --stall-time or --limit-rate's value v; -1 when bad (said). */
static int store_number(store_args *a, const char *o, const char *v) {
    char cmd[16];
    snprintf(cmd, sizeof cmd, "ckpt %s", a->what);
    if (strcmp(o, "--limit-rate") == 0) return cli_rate(cmd, o, v, &a->limit_rate);
    double s;
    if (cli_duration(cmd, o, v, 0, 1e7, &s) != 0) return -1;
    if (strcmp(o, "--max-time") == 0)
        a->max_time_ms = (long)ceil(s * 1e3);
    else
        a->stall_time_s = (long)ceil(s);
    return 0;
}

/* One option with its value at argv[*i + 1]; -1 on a bad one, 0 when not an option. */
static int store_option(store_args *a, int argc, char **argv, int *i) {
    const char *o = argv[*i];
    int k = 0, pull = strcmp(a->what, "pull") == 0;
    while (k < (pull ? 5 : 4) && strcmp(o, store_names[k]) != 0)
        k++;
    if (k == (pull ? 5 : 4)) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "baton ckpt %s: %s needs a value\n", a->what, o);
        return -1;
    }
    const char *v = argv[++*i];
    char cmd[16];
    snprintf(cmd, sizeof cmd, "ckpt %s", a->what);
    if (cli_once(cmd, o, a->given[k], v) != 0) return -1;
    a->given[k] = v;
    if (strcmp(o, "--endpoint") == 0)
        a->endpoint = v;
    else if (strcmp(o, "--into") == 0)
        a->into = v;
    else if (store_number(a, o, v) != 0)
        return -1;
    return 1;
}

/* 0 to run, 1 for --help, 2 on a usage error (said; the usage follows), 3 on an option's
 * missing or bad value (said). */
static int store_parse(int argc, char **argv, store_args *a) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
        int o = store_option(a, argc, argv, &i);
        if (o < 0) return 3;
        if (o > 0) continue;
        if (argv[i][0] == '-' || a->npos == a->want_pos) {
            fprintf(stderr, "baton ckpt %s: unexpected argument '%s'\n", a->what, argv[i]);
            return 2;
        }
        a->pos[a->npos++] = argv[i];
    }
    if (a->npos < a->want_pos) {
        fprintf(stderr, "baton ckpt %s: missing %s\n", a->what,
                a->want_pos == 2 ? "CKPT or URL" : "URL");
        return 2;
    }
    return 0;
}

static int store_open(const store_args *a, const char *url, ckpt_remote *r, bt_diag *diag) {
    int rc = ckpt_remote_init(r, url, a->endpoint, diag);
    r->max_time_ms = a->max_time_ms;
    r->stall_time_s = a->stall_time_s;
    r->limit_rate = (int64_t)a->limit_rate;
    r->prog = strcmp(a->what, "push") == 0 ? "baton ckpt push" : "baton ckpt pull";
    return rc;
}

/* ---- push ---- */

/* The manifest at path, its checksum checked (ckpt_manifest_decode): BT_EIO when it cannot
 * be read or is damaged (a download gone wrong), BT_EUNSUPPORTED for a newer format. */
static int load_manifest(const char *path, Baton__Manifest **out, bt_diag *diag) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    if (bt_read_file(path, CKPT_MAX_MANIFEST, &buf, &len) != 0) {
        bt_diag_set(diag, "%s: %s", path, strerror(errno));
        return BT_EIO;
    }
    int rc = ckpt_manifest_decode((const uint8_t *)buf, len, path, out, diag);
    free(buf);
    return rc == BT_EINVAL ? BT_EIO : rc;
}

/* The files the store's manifest.pb lists for checkpoint name into *set (empty when
 * there is none, or one that does not decode); *present: a manifest.pb is there (a HEAD
 * that answers 200, with or without its length). A push removes it before changing any
 * file it lists and sends it last, so while it is there the store's files are the ones it
 * lists. */
static int push_remote_files(ckpt_remote *r, const char *name, ckpt_file_set *set, int *present,
                             bt_diag *diag) {
    int64_t size = -1;
    *present = 0;
    int rc = ckpt_remote_head(r, name, CKPT_MANIFEST, &size, diag);
    if (rc <= 0) return rc;
    *present = 1;
    const char *tmpdir = getenv("TMPDIR");
    char tmp[CKPT_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/baton-push-manifest.XXXXXX",
             tmpdir && tmpdir[0] ? tmpdir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot create a temporary file: %s", tmp, strerror(errno));
        return BT_EIO;
    }
    close(fd);
    rc = ckpt_remote_get(r, name, CKPT_MANIFEST, tmp, 0, diag);
    Baton__Manifest *m = NULL;
    bt_diag ignored;
    bt_diag_init(&ignored);
    if (rc == 0 && load_manifest(tmp, &m, &ignored) == 0) {
        if (ckpt_files_from_manifest(m, set, &ignored) != 0) {
            ckpt_files_free(set);
            *set = (ckpt_file_set){0};
        }
        baton__manifest__free_unpacked(m, NULL);
    }
    unlink(tmp);
    return rc;
}

/* What a push changed in the store, for push_undo: the checkpoint's files (set), and which
 * of them it skipped (have: the store holds it as it is here) or began to send (sent); the
 * files the store's manifest.pb listed (old), and which of those set lacks and are still
 * there (extra); dropped: it removed the store's manifest.pb of the name. */
typedef struct push_state {
    ckpt_file_set set, old;
    int *have, *sent, *extra;
    int dropped;
} push_state;

/* 1 when the store holds file c as it is here: its manifest lists the file with the same
 * size and CRC32C values, and the object has that size. */
static int push_have(ckpt_remote *r, const char *name, const ckpt_file_check *c,
                     const ckpt_file_set *remote, int *have, bt_diag *diag) {
    const ckpt_file_check *known = ckpt_files_find(remote, c->name);
    int64_t size = -1;
    *have = 0;
    if (known == NULL || !ckpt_file_same(c, known)) return 0;
    int rc = ckpt_remote_head(r, name, c->name, &size, diag);
    *have = rc == 1 && size == (int64_t)c->size;
    return rc < 0 ? rc : 0;
}

static int push_file(ckpt_remote *r, const char *dir, const char *name, ckpt_file_check *c,
                     int have, bt_diag *diag) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, dir, c->name);
    if (have) {
        printf("  %s: already there (%" PRIu64 " bytes, the CRC32C values the store's %s "
               "lists), skipped\n",
               c->name, c->size, CKPT_MANIFEST);
        return 0;
    }
    int rc = ckpt_remote_put(r, name, c->name, path, c, diag);
    if (rc == 0) printf("  %s: sent (%" PRIu64 " bytes)\n", c->name, c->size);
    return rc;
}

/* Removes the store's manifest.pb of name before anything it lists is replaced; a store
 * without DELETE, or that refuses it to these credentials, cannot have a checkpoint
 * replaced (BT_EUNSUPPORTED, saying so). */
static int push_drop_manifest(ckpt_remote *r, const char *name, bt_diag *diag) {
    bt_diag d;
    bt_diag_init(&d);
    long status;
    int rc = ckpt_remote_delete(r, name, CKPT_MANIFEST, &status, &d);
    int denied = status == 401 || status == 403;
    if (rc == BT_EUNSUPPORTED)
        bt_diag_set(diag,
                    "%s: the store %s, so the checkpoint already there as %s (other files than "
                    "this one's) cannot be replaced: push under another name, %s",
                    d.msg,
                    denied ? "refused to delete it (no permission with these credentials)"
                           : "does not support DELETE",
                    name,
                    denied ? "or check the credentials (s3://: AWS_ACCESS_KEY_ID, "
                             "AWS_SECRET_ACCESS_KEY) and that they may delete"
                           : "or remove it from the store by other means");
    else if (rc != 0)
        bt_diag_set(diag, "%s", d.msg);
    else
        printf("  %s: removed until the files it lists are replaced\n", CKPT_MANIFEST);
    return rc;
}

/* Once the store's manifest.pb of name is removed: the files it listed that this
 * checkpoint has not (another world size's shards), which no manifest.pb will list again,
 * removed too. */
static int push_drop_extras(ckpt_remote *r, const char *name, push_state *st, bt_diag *diag) {
    long status = 0;
    for (size_t i = 0; i < st->old.n; i++) {
        if (!st->extra[i]) continue;
        const char *file = st->old.file[i].name;
        bt_diag d;
        bt_diag_init(&d);
        int rc = ckpt_remote_delete(r, name, file, &status, &d);
        if (rc == BT_EUNSUPPORTED) /* its manifest.pb went: the store has changed (exit 1) */
            bt_diag_set(diag,
                        "%s: the %s of %s was removed, but the store refused to delete %s (the "
                        "checkpoint replaced had it, this one has not)",
                        d.msg, CKPT_MANIFEST, name, file);
        else if (rc < 0)
            bt_diag_set(diag, "%s", d.msg);
        if (rc < 0) return rc == BT_EUNSUPPORTED ? BT_EIO : rc;
        st->extra[i] = 0;
        if (status != 404) /* a file its manifest.pb listed that the store did not hold */
            printf("  %s: removed (the checkpoint replaced had it, this one has not)\n", file);
    }
    return 0;
}

/* What the store holds of name (st->old, and which of it this push skips or removes as
 * extra); *stale: its manifest.pb is there and must go before anything changes. */
static int push_compare(ckpt_remote *r, const char *name, push_state *st, int *stale,
                        bt_diag *diag) {
    int present = 0;
    *stale = 0;
    int rc = push_remote_files(r, name, &st->old, &present, diag);
    st->extra = calloc(st->old.n ? st->old.n : 1, sizeof *st->extra);
    if (rc == 0 && st->extra == NULL) rc = BT_ENOMEM;
    for (size_t i = 0; rc == 0 && i < st->set.n; i++) {
        rc = push_have(r, name, &st->set.file[i], &st->old, &st->have[i], diag);
        *stale |= !st->have[i];
    }
    for (size_t i = 0; rc == 0 && i < st->old.n; i++) {
        st->extra[i] = ckpt_files_find(&st->set, st->old.file[i].name) == NULL;
        *stale |= st->extra[i];
    }
    *stale &= present;
    return rc;
}

/* Checkpoint dir was removed (a run's retention) before push changed the store:
 * BT_EIO, for ckpt_gone_retry to say so and push the run's next newest, the store's
 * checkpoint of the name left whole. */
static int push_gone(const char *dir, bt_diag *diag) {
    bt_diag_set(diag, "%s: the checkpoint was removed while it was being read", dir);
    return BT_EIO;
}

/* Sends what the store does not hold, the store's manifest.pb removed first when anything
 * it lists is replaced or has no place in this checkpoint (st->dropped; the latter then
 * removed too), each file sent noted in st->sent. */
static int push_files(ckpt_remote *r, const char *dir, const char *name, push_state *st,
                      bt_diag *diag) {
    int stale = 0;
    int rc = push_compare(r, name, st, &stale, diag);
    if (rc == 0 && stale && ckpt_removed(dir)) /* gone before the store's copy is touched */
        rc = push_gone(dir, diag);
    if (rc == 0 && stale) rc = push_drop_manifest(r, name, diag);
    st->dropped = rc == 0 && stale;
    if (st->dropped) rc = push_drop_extras(r, name, st, diag);
    for (size_t i = 0; rc == 0 && i < st->set.n; i++) {
        st->sent[i] = !st->have[i];
        rc = push_file(r, dir, name, &st->set.file[i], st->have[i], diag);
        if (rc == 0 && st->sent[i]) ckpt_gone_fault_at(dir, "sent"); /* tests */
    }
    return rc;
}

/* Item k of what a failed push may leave of name in the store unvouched for (k < set.n +
 * old.n): the name of a file of the checkpoint it sent (or began to), or skipped and then
 * removed the manifest.pb of, or of the replaced checkpoint's extra files not yet removed;
 * else NULL. */
static const char *push_left(const push_state *st, size_t k) {
    if (k < st->set.n)
        return st->sent[k] || (st->dropped && st->have[k]) ? st->set.file[k].name : NULL;
    k -= st->set.n;
    return st->dropped && st->extra[k] ? st->old.file[k].name : NULL;
}

/* push_undo's HEAD (how: "may stay") or DELETE ("stay") failed, d saying why: left files
 * of name said to stay, into out (cap bytes). */
static void push_undo_failed(ckpt_remote *r, const char *name, size_t left, const char *how,
                             const bt_diag *d, char *out, size_t cap) {
    char shown[CKPT_PATH_MAX];
    ckpt_url_shown(r->base, shown, sizeof shown);
    const char *them = left == 1 ? "it" : "them";
    snprintf(out, cap,
             "baton ckpt push: %s: %zu file%s of %s %s%s under %s/%s/ without a %s (the next "
             "push of %s replaces %s; or remove %s by other means)\n",
             d->msg, left, left == 1 ? "" : "s", name, how,
             left == 1 && strcmp(how, "stay") == 0 ? "s" : "", shown, name, CKPT_MANIFEST, name,
             them, them);
}

/* After a failed push: what it left of name in the store with no manifest.pb to vouch for
 * it (push_left) removed again, so that a push broken off (its checkpoint removed by a
 * run's retention while read, a shard failing its CRC32C, the store failing) leaves no
 * files of a checkpoint no one can pull; what it did said into out (cap bytes), for the
 * caller to print after the failure's cause. It counts the DELETEs that found their object
 * (a file whose PUT never began, or was cut short, may be none; an S3 store answers every
 * DELETE alike, so there each one tried counts). Nothing goes when a manifest.pb of name is
 * there again (ours arrived though its answer did not, or another push of name completed
 * meanwhile). The first DELETE that fails ends it (an unreachable store would fail every
 * one), saying how many files stay and where; a HEAD that fails, how many may. */
static void push_undo(ckpt_remote *r, const char *name, const push_state *st, char *out,
                      size_t cap) {
    size_t n = 0, done = 0, removed = 0, all = st->set.n + st->old.n;
    for (size_t k = 0; k < all; k++)
        n += push_left(st, k) != NULL;
    if (n == 0) return;
    bt_diag d;
    bt_diag_init(&d);
    int64_t size = -1;
    long status = 0;
    int rc = ckpt_remote_head(r, name, CKPT_MANIFEST, &size, &d);
    if (rc == 1)
        snprintf(out, cap,
                 "baton ckpt push: the store holds a %s of %s again (this push's, or "
                 "another's): its files are left as they are\n",
                 CKPT_MANIFEST, name);
    if (rc < 0) push_undo_failed(r, name, n, "may stay", &d, out, cap);
    if (rc != 0) return;
    for (size_t k = 0; rc == 0 && k < all; k++) {
        if (push_left(st, k) == NULL) continue;
        rc = ckpt_remote_delete(r, name, push_left(st, k), &status, &d);
        done += rc == 0;
        removed += rc == 0 && status != 404;
    }
    if (rc != 0)
        push_undo_failed(r, name, n - done, "stay", &d, out, cap);
    else if (removed > 0)
        snprintf(out, cap,
                 "baton ckpt push: removed from the store the %zu file%s of %s this push left "
                 "there without a %s\n",
                 removed, removed == 1 ? "" : "s", name, CKPT_MANIFEST);
}

static void push_state_free(push_state *st) {
    ckpt_files_free(&st->set);
    ckpt_files_free(&st->old);
    free(st->have), free(st->sent), free(st->extra);
}

/* Pushes checkpoint dir as name; a failure's undo said into undo (cap bytes). */
static int push_ckpt(ckpt_remote *r, const char *dir, const char *name, char *undo, size_t cap,
                     bt_diag *diag) {
    Baton__Manifest *m = NULL;
    push_state st = {0};
    int rc = ckpt_manifest_read(dir, &m, diag);
    if (rc == 0) rc = ckpt_files_from_manifest(m, &st.set, diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    st.have = calloc(st.set.n ? st.set.n : 1, sizeof *st.have);
    st.sent = calloc(st.set.n ? st.set.n : 1, sizeof *st.sent);
    if (rc == 0 && (st.have == NULL || st.sent == NULL)) rc = BT_ENOMEM;
    if (rc == 0) ckpt_gone_fault(dir); /* tests */
    if (rc == 0) rc = push_files(r, dir, name, &st, diag);
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, dir, CKPT_MANIFEST);
    if (rc == 0) ckpt_gone_fault_at(dir, "manifest"); /* tests */
    if (rc == 0) rc = ckpt_remote_put(r, name, CKPT_MANIFEST, path, NULL, diag);
    if (rc == 0) printf("  %s: sent\n", CKPT_MANIFEST);
    if (rc != 0 && st.have && st.sent && (st.extra || st.old.n == 0))
        push_undo(r, name, &st, undo, cap);
    push_state_free(&st);
    return rc;
}

/* One push (ckpt_gone_try) of the checkpoint ckpt names to store r, under its name;
 * usage: the failure was bad usage or input; undo: what the last failed try's push_undo
 * did, to be said after its cause. */
typedef struct push_try {
    const char *ckpt;
    ckpt_remote *r;
    int usage;
    char undo[2 * CKPT_PATH_MAX];
} push_try;

static int push_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    push_try *p = ctx;
    char name[256];
    fputs(p->undo, stderr); /* the try before's, after the note that says why it failed */
    p->undo[0] = '\0';
    p->usage = 1;
    if (ckpt_resolve(p->ckpt, dir, cap, diag) < 0 ||
        ckpt_path_basename(dir, name, sizeof name, diag) < 0)
        return BT_EINVAL;
    p->usage = 0;
    return push_ckpt(p->r, dir, name, p->undo, sizeof p->undo, diag);
}

int ckpt_cmd_push(int argc, char **argv) {
    store_args a = {.what = "push", .want_pos = 2, .stall_time_s = REMOTE_STALL_S};
    int p = store_parse(argc, argv, &a);
    if (p != 0) {
        if (p < 3) push_usage(p == 1 ? stdout : stderr);
        return p == 1 ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    char dir[CKPT_PATH_MAX], name[256];
    bt_diag diag;
    bt_diag_init(&diag);
    ckpt_remote r = {0};
    push_try t = {.ckpt = a.pos[0], .r = &r, .usage = 1};
    int rc = store_open(&a, a.pos[1], &r, &diag);
    if (rc == 0)
        rc = ckpt_gone_retry("baton ckpt push", a.pos[0], push_once, &t, dir, sizeof dir, NULL,
                             &diag);
    if (rc < 0 && t.usage) {
        fprintf(stderr, "baton ckpt push: %s\n", diag.msg);
        ckpt_remote_free(&r);
        return BT_EXIT_USAGE;
    }
    char shown[CKPT_PATH_MAX];
    ckpt_url_shown(r.base, shown, sizeof shown);
    if (rc < 0)
        fprintf(stderr, "baton ckpt push: %s\n", diag.msg);
    else if (ckpt_path_basename(dir, name, sizeof name, &diag) == 0)
        printf("pushed %s to %s/%s\n", dir, shown, name);
    fputs(t.undo, stderr); /* what the failed push removed again, after why it failed */
    ckpt_remote_free(&r);
    if (rc == BT_EUNSUPPORTED) return BT_EXIT_USAGE; /* the store will say the same again */
    return rc < 0 ? BT_EXIT_FAILURE : BT_EXIT_OK;
}

/* ---- pull ---- */

/* Downloads (or continues) one shard file and checks it; a file that fails its check
 * after a resumed download is fetched once more from scratch. */
static int pull_file(ckpt_remote *r, const char *name, const char *partial, ckpt_file_check *c,
                     bt_diag *diag) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, partial, c->name);
    struct stat st;
    int have = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (have && (uint64_t)st.st_size > c->size) have = unlink(path) != 0;
    int rc = 0;
    if (!have || (uint64_t)st.st_size < c->size) {
        if (have) printf("  %s: continuing at byte %lld\n", c->name, (long long)st.st_size);
        rc = ckpt_remote_get(r, name, c->name, path, 1, diag);
    }
    bt_diag first;
    bt_diag_init(&first);
    if (rc == 0 && ckpt_check_file(partial, c, &first) < 0) {
        fprintf(stderr, "baton ckpt pull: %s; fetching it again\n", first.msg);
        rc = ckpt_remote_get(r, name, c->name, path, 0, diag);
        if (rc == 0) rc = ckpt_check_file(partial, c, diag);
        if (rc < 0) unlink(path); /* never continue from damaged bytes */
    }
    if (rc == 0) printf("  %s: %" PRIu64 " bytes, CRC32C ok\n", c->name, c->size);
    return rc;
}

static int pull_ckpt(ckpt_remote *r, const char *name, const char *partial, bt_diag *diag) {
    char mpath[CKPT_PATH_MAX], final_m[CKPT_PATH_MAX];
    ckpt_path_join(mpath, sizeof mpath, partial, MANIFEST_DOWNLOAD);
    ckpt_path_join(final_m, sizeof final_m, partial, CKPT_MANIFEST);
    Baton__Manifest *m = NULL;
    ckpt_file_set set = {0};
    int rc = ckpt_remote_get(r, name, CKPT_MANIFEST, mpath, 0, diag);
    if (rc == 0) rc = load_manifest(mpath, &m, diag);
    if (rc == 0) rc = ckpt_files_from_manifest(m, &set, diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    for (size_t i = 0; rc == 0 && i < set.n; i++)
        rc = pull_file(r, name, partial, &set.file[i], diag);
    ckpt_files_free(&set);
    if (rc == 0 && rename(mpath, final_m) != 0) {
        bt_diag_set(diag, "%s: cannot rename to %s: %s", mpath, final_m, strerror(errno));
        rc = BT_EIO;
    }
    return rc;
}

/* After a failed pull: a .partial directory holding no shard byte is nothing to resume
 * from (the manifest not found, say) and goes. */
static void pull_tidy(const char *partial) {
    char p[CKPT_PATH_MAX];
    ckpt_path_join(p, sizeof p, partial, MANIFEST_DOWNLOAD);
    unlink(p);
    rmdir(partial); /* only when empty */
}

int ckpt_cmd_pull(int argc, char **argv) {
    store_args a = {.what = "pull", .want_pos = 1, .into = ".", .stall_time_s = REMOTE_STALL_S};
    int p = store_parse(argc, argv, &a);
    if (p != 0) {
        if (p < 3) pull_usage(p == 1 ? stdout : stderr);
        return p == 1 ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    char store[CKPT_PATH_MAX], name[256], partial[CKPT_PATH_MAX], final[CKPT_PATH_MAX];
    bt_diag diag;
    bt_diag_init(&diag);
    ckpt_remote r = {0};
    if (ckpt_remote_split(a.pos[0], store, sizeof store, name, sizeof name, &diag) < 0 ||
        store_open(&a, store, &r, &diag) < 0) {
        fprintf(stderr, "baton ckpt pull: %s\n", diag.msg);
        ckpt_remote_free(&r);
        return BT_EXIT_USAGE;
    }
    struct stat st;
    snprintf(final, sizeof final, "%s/%s", a.into, name);
    if (a.into[0] == '\0' || lstat(final, &st) == 0) {
        if (a.into[0] == '\0')
            fprintf(stderr, "baton ckpt pull: --into '': name a directory (. for this one)\n");
        else
            fprintf(stderr,
                    "baton ckpt pull: %s: already exists; remove it or choose another --into\n",
                    final);
        ckpt_remote_free(&r);
        return BT_EXIT_USAGE;
    }
    int rc = ckpt_partial_prepare(a.into, name, 1, partial, final, sizeof partial, &diag);
    int made = rc == 0, bad_into = rc == BT_EINVAL; /* --into is a file, say */
    if (rc == 0) rc = pull_ckpt(&r, name, partial, &diag);
    if (rc == BT_EUNSUPPORTED) ckpt_remove_dir(partial); /* nothing worth resuming */
    if (rc == 0) rc = ckpt_partial_publish(a.into, partial, final, &diag);
    if (rc < 0 && made) pull_tidy(partial);
    ckpt_remote_free(&r);
    if (rc < 0) {
        fprintf(stderr, "baton ckpt pull: %s\n", diag.msg);
        return bt_cleanup_exit(bad_into ? BT_EXIT_USAGE : BT_EXIT_FAILURE);
    }
    ckpt_url_shown(a.pos[0], partial, sizeof partial);
    printf("pulled %s into %s\n", partial, final);
    return bt_cleanup_exit(BT_EXIT_OK);
}
