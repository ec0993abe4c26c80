/* metrics.jsonl and valid.jsonl rewound (control_jsonl.h). */
#include "control_jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control_internal.h"
#include "util/file.h"

/* A line's stage index and its step in the stage: 0 when it has both. */
static int jsonl_stage_step(const char *line, uint64_t *stage, uint64_t *step) {
    if (control_metrics_line_field(line, ", \"stage_index\": ", stage) != 0) return -1;
    return control_metrics_line_field(line, ", \"step\": ", step);
}

typedef struct jsonl_scan {
    const control_jsonl_cut *cuts;
    size_t n_cuts;
    control_jsonl_keep_fn keep; /* NULL: none called */
    void *arg;
    FILE *out; /* the kept lines copied there, unless NULL */
    const char *tmp;
    off_t first_cut; /* where the first line dropped starts; -1: none */
    off_t end;       /* where the whole lines end */
    int kept_after;  /* a line kept after one dropped */
    bt_diag *diag;
} jsonl_scan;

static int jsonl_dropped(const jsonl_scan *c, const char *line, int *has, uint64_t *stage,
                         uint64_t *step) {
    *has = jsonl_stage_step(line, stage, step) == 0;
    for (size_t i = 0; *has && i < c->n_cuts; i++)
        if (*stage == c->cuts[i].stage && *step >= c->cuts[i].from) return 1;
    return 0;
}

static int jsonl_scan_line(void *arg, const char *line, size_t n, off_t at) {
    jsonl_scan *c = arg;
    uint64_t stage = 0, step = 0;
    int has;
    c->end = at + (off_t)n;
    if (jsonl_dropped(c, line, &has, &stage, &step)) {
        if (c->first_cut < 0) c->first_cut = at;
        return 0;
    }
    c->kept_after |= c->first_cut >= 0;
    if (c->keep) c->keep(c->arg, line, has, stage, step);
    if (c->out != NULL && fwrite(line, 1, n, c->out) != n) {
        bt_diag_set(c->diag, "%s: cannot write: %s", c->tmp, strerror(errno));
        return BT_EIO;
    }
    return 0;
}

static int jsonl_scan_file(const char *path, jsonl_scan *c, int *torn) {
    FILE *in;
    *torn = 0;
    c->first_cut = -1, c->end = 0, c->kept_after = 0;
    int rc = bt_file_open_read(path, &in, c->diag);
    if (rc != 0 || in == NULL) return rc;
    rc = bt_file_lines(in, path, jsonl_scan_line, c, torn, c->diag);
    fclose(in);
    return rc;
}

typedef struct held_keep {
    control_jsonl_keep_fn keep;
    void *arg;
} held_keep;

static int jsonl_held_line(void *arg, const char *rec, size_t n) {
    held_keep *h = arg;
    uint64_t stage = 0, step = 0;
    (void)n;
    int has = jsonl_stage_step(rec, &stage, &step) == 0;
    h->keep(h->arg, rec, has, stage, step);
    return 0;
}

int control_jsonl_read(const control_jsonl *j, const char *path, int *torn,
                       control_jsonl_keep_fn keep, void *arg, bt_diag *diag) {
    jsonl_scan c = {.keep = keep, .arg = arg, .diag = diag};
    int rc = jsonl_scan_file(path, &c, torn);
    held_keep h = {keep, arg};
    if (rc == 0 && j != NULL) rc = rec_append_each_held(&j->a, jsonl_held_line, &h);
    return rc;
}

/* The directory entry of a rename made durable. */
static int jsonl_sync_dir(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        *slash = '\0';
    int fd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* The file without the lines c drops, written whole to a temp file, synced and renamed
 * over it, then opened again for appending (rec_append_reopen: never the old file). */
static int jsonl_replace(control_jsonl *j, const char *path, jsonl_scan *c) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int torn, rc = BT_EIO;
    c->keep = NULL, c->tmp = tmp; /* kept as the first scan said */
    FILE *out = rec_append_fault() ? NULL : bt_fopen_private(tmp, "w");
    if (out == NULL) {
        bt_diag_set(c->diag, "%s: cannot create: %s", tmp, bt_file_why(errno));
        return BT_EIO;
    }
    c->out = out;
    if ((rc = jsonl_scan_file(path, c, &torn)) != 0) goto error;
    rc = BT_EIO;
    if (fflush(out) != 0 || fsync(fileno(out)) != 0) {
        bt_diag_set(c->diag, "%s: cannot write: %s", tmp, strerror(errno));
        goto error;
    }
    int closed = fclose(out);
    out = NULL;
    if (closed != 0 || rename(tmp, path) != 0) {
        bt_diag_set(c->diag, "%s: cannot replace it with %s: %s", path, tmp, strerror(errno));
        goto error;
    }
    if (jsonl_sync_dir(path) != 0)
        bt_diag_set(c->diag, "%s: cannot sync its directory: %s", path, strerror(errno));
    /* renamed: the rewind is done, and the new file is the one to append to; where it
     * cannot be opened now (EMFILE), the records are held back until it can be (said by
     * the flush that follows) */
    rec_append_reopen(&j->a, NULL);
    return 0;
error:
    if (out != NULL) fclose(out);
    unlink(tmp);
    return rc;
}

/* The lines of c's cuts dropped from the file: cut in place where they (or a torn line)
 * end it, else a rewrite. */
static int jsonl_apply(control_jsonl *j, const char *path, jsonl_scan *c) {
    int torn, rc = jsonl_scan_file(path, c, &torn);
    if (rc != 0) return rc;
    if (c->first_cut < 0 && !torn) return 0;
    if (c->first_cut >= 0 && (c->kept_after || j->no_cut)) return jsonl_replace(j, path, c);
    return rec_append_truncate(&j->a, c->first_cut >= 0 ? c->first_cut : c->end, c->diag);
}

/* cut kept for a later try; the same stage's merged. */
static int jsonl_pend(control_jsonl *j, const control_jsonl_cut *cut) {
    for (size_t i = 0; i < j->n_cuts; i++)
        if (j->cuts[i].stage == cut->stage) {
            if (cut->from < j->cuts[i].from) j->cuts[i].from = cut->from;
            return 0;
        }
    if (j->n_cuts == CONTROL_JSONL_MAX_CUTS) return -1;
    j->cuts[j->n_cuts++] = *cut;
    return 0;
}

static void jsonl_note(const control_jsonl *j, const char *msg, const bt_diag *d) {
    if (j->a.note == NULL) return;
    char line[7000];
    snprintf(line, sizeof line, "%s: %s%s%s", j->a.path, msg, d ? ": " : "", d ? d->msg : "");
    j->a.note(j->a.note_arg, line);
}

int control_jsonl_rewind(control_jsonl *j, const char *path, const control_jsonl_cut *cut,
                         control_jsonl_keep_fn keep, void *arg, bt_diag *diag) {
    int was = j->n_cuts > 0;
    if (cut != NULL) rec_append_drop_held(&j->a, cut->stage, cut->from);
    if (cut != NULL && jsonl_pend(j, cut) != 0) {
        bt_diag_set(diag, "%s: more than %d rewinds of it pending", path, CONTROL_JSONL_MAX_CUTS);
        return BT_EIO;
    }
    bt_diag d;
    bt_diag_init(&d);
    jsonl_scan c = {.cuts = j->cuts, .n_cuts = j->n_cuts, .keep = keep, .arg = arg, .diag = &d};
    int rc = jsonl_apply(j, path, &c);
    held_keep h = {keep, arg};
    rec_append_each_held(&j->a, jsonl_held_line, &h);
    if (rc == 0) {
        j->n_cuts = 0, j->a.hold = 0;
        if (was) jsonl_note(j, "the records a restart repeats are dropped from it now", NULL);
        rec_append_flush(&j->a, NULL);
        return 0;
    }
    j->a.hold = 1; /* appended now, the records would follow the stale ones they repeat */
    if (!was)
        jsonl_note(j,
                   "cannot drop the records a restart repeats (so they are not appended "
                   "twice); new records held back in memory until it can",
                   &d);
    (void)diag;
    return 0;
}

int control_jsonl_cut_torn(control_jsonl *j, const char *path, bt_diag *diag) {
    jsonl_scan c = {.diag = diag};
    int torn, rc = jsonl_scan_file(path, &c, &torn);
    if (rc != 0 || !torn) return rc;
    if (rec_append_truncate(&j->a, c.end, NULL) != 0) j->a.end = c.end, j->a.dirty = 1;
    return 0;
}

int control_jsonl_retry(control_jsonl *j, const char *path, control_jsonl_keep_fn keep, void *arg,
                        bt_diag *diag) {
    if (j->n_cuts == 0) return 0;
    int rc = control_jsonl_rewind(j, path, NULL, keep, arg, diag);
    return rc ? rc : j->n_cuts > 0 ? BT_EIO : 0;
}
