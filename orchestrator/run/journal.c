#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "util/file.h"

#define JOURNAL_MAX_RECORD (1u << 20)
#define JOURNAL_MAX_BYTES  (1u << 30)

static void journal_path(const char *run_dir, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", run_dir, JOURNAL_FILE);
}

/* The payload length of the whole record that starts at buf[off], or 0 when none does
 * (fewer than 8 bytes left, a length past the end or over the limit, a CRC or protobuf
 * that does not check out). Every record written has a seq, so a zero length is damage
 * too: the zero-filled tail a crash can leave is not read as empty records. With r, the
 * record is decoded into *r. */
static uint32_t journal_frame(const uint8_t *buf, size_t len, size_t off,
                              Baton__JournalRecord **r) {
    if (off > len || len - off < 8) return 0;
    uint32_t rl = (uint32_t)buf[off] | (uint32_t)buf[off + 1] << 8 | (uint32_t)buf[off + 2] << 16 |
                  (uint32_t)buf[off + 3] << 24;
    uint32_t crc = (uint32_t)buf[off + 4] | (uint32_t)buf[off + 5] << 8 |
                   (uint32_t)buf[off + 6] << 16 | (uint32_t)buf[off + 7] << 24;
    if (rl == 0 || rl > JOURNAL_MAX_RECORD || rl > len - off - 8) return 0;
    if (crc32c_update(0, buf + off + 8, rl) != crc) return 0;
    Baton__JournalRecord *d = baton__journal_record__unpack(NULL, rl, buf + off + 8);
    if (d == NULL) return 0;
    if (r)
        *r = d;
    else
        baton__journal_record__free_unpacked(d, NULL);
    return rl;
}

/* Scans buf for whole records from the start: their count (into *n, with decoded
 * records into v when not NULL) and the length of the valid prefix. */
static size_t journal_scan(const uint8_t *buf, size_t len, Baton__JournalRecord **v, size_t *n) {
    size_t off = 0, k = 0;
    uint32_t rl;
    while ((rl = journal_frame(buf, len, off, v ? &v[k] : NULL)) != 0)
        k++, off += 8 + (size_t)rl;
    *n = k;
    return off;
}

/* What follows the valid prefix buf[0..valid): nothing, a torn last record, or damage.
 * A crash in the middle of an append leaves a prefix of one record, with no whole record
 * after it; bad bytes with a whole record somewhere after them are damage. The length
 * field is outside the CRC, so a bad record's own length cannot be trusted to find the
 * next one: every later offset is tried, for this diagnosis only (records past damage are
 * never read). A false whole record in a torn tail needs a 32-bit CRC to match by chance. */
static void journal_classify(const uint8_t *buf, size_t len, size_t valid, journal_tail *t) {
    t->valid = valid, t->size = len;
    t->torn = t->damaged = 0;
    if (valid == len) return;
    for (size_t p = valid + 1; p + 8 < len; p++)
        if (journal_frame(buf, len, p, NULL) != 0) {
            t->damaged = 1;
            return;
        }
    t->torn = 1;
}

void journal_diag_damaged(const char *run_dir, const journal_tail *t, bt_diag *diag) {
    bt_diag_set(diag,
                "%s/%s is damaged at byte %zu of %zu: the record there does not check out "
                "(its length or CRC32C) and whole records follow it, so it is not the torn "
                "end a crash leaves; the journal was not changed. Restore it from a copy, or "
                "keep only the %zu bytes before the damage ('truncate -s %zu %s/%s': the "
                "records after it are lost) or move it aside",
                run_dir, JOURNAL_FILE, t->valid, t->size, t->valid, t->valid, run_dir,
                JOURNAL_FILE);
}

/* The journal's bytes; a missing journal is empty (*buf NULL). */
static int journal_slurp(const char *path, uint8_t **buf, size_t *len, bt_diag *diag) {
    char *b = NULL;
    *buf = NULL, *len = 0;
    if (bt_read_private(path, JOURNAL_MAX_BYTES, 0, &b, len) == 0) { /* never a FIFO's wait */
        *buf = (uint8_t *)b;
        return 0;
    }
    if (errno == ENOENT) return 0;
    bt_diag_set(diag, "%s: cannot read: %s", path, bt_file_why(errno));
    return BT_EIO;
}

int journal_read(const char *run_dir, Baton__JournalRecord ***out, size_t *n, journal_tail *tail,
                 bt_diag *diag) {
    char path[4096];
    journal_path(run_dir, path, sizeof path);
    uint8_t *buf;
    size_t len, count;
    *out = NULL, *n = 0;
    memset(tail, 0, sizeof *tail);
    int rc = journal_slurp(path, &buf, &len, diag);
    if (rc != 0 || buf == NULL) return rc;
    size_t valid = journal_scan(buf, len, NULL, &count);
    journal_classify(buf, len, valid, tail);
    *out = calloc(count ? count : 1, sizeof **out);
    if (*out == NULL) {
        free(buf);
        return BT_ENOMEM;
    }
    journal_scan(buf, valid, *out, n);
    free(buf);
    return 0;
}

void journal_records_free(Baton__JournalRecord **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        baton__journal_record__free_unpacked(v[i], NULL);
    free(v);
}

int journal_open(journal *j, const char *run_dir, bt_diag *diag) {
    char path[4096];
    journal_path(run_dir, path, sizeof path);
    uint8_t *buf;
    size_t len, count;
    int rc = journal_slurp(path, &buf, &len, diag);
    if (rc != 0) return rc;
    count = 0;
    journal_tail t;
    size_t valid = buf ? journal_scan(buf, len, NULL, &count) : 0;
    journal_classify(buf, len, valid, &t);
    free(buf);
    j->fd = -1;
    if (t.damaged) {
        journal_diag_damaged(run_dir, &t, diag);
        return BT_EINVAL;
    }
    j->next_seq = count;
    snprintf(j->path, sizeof j->path, "%s", path);
    j->fd = bt_open_private(path, O_WRONLY | O_CREAT);
    if (j->fd < 0 || ftruncate(j->fd, (off_t)valid) != 0 || lseek(j->fd, 0, SEEK_END) < 0) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", path,
                    j->fd < 0 ? bt_file_why(errno) : strerror(errno));
        if (j->fd >= 0) close(j->fd);
        j->fd = -1;
        return BT_EIO;
    }
    return 0;
}

void journal_close(journal *j) {
    if (j->fd >= 0) close(j->fd);
    j->fd = -1;
}

/* Where the open file's name is now (readlink of /proc/self/fd): its directory in dir and
 * 1, or 0 when it has none there (no /proc, or "(deleted)"). */
static int journal_now(const journal *j, char *dir, size_t cap) {
    char link[64], now[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", j->fd);
    ssize_t n = readlink(link, now, sizeof now - 1);
    if (n <= 0) return 0;
    now[n] = '\0';
    char *slash = strrchr(now, '/');
    /* renamed itself (an NFS client's .nfsXXXX of a removed open file): not a move */
    if (slash == NULL || slash == now || strcmp(slash + 1, JOURNAL_FILE) != 0) return 0;
    *slash = '\0';
    snprintf(dir, cap, "%s", now);
    return 1;
}

int journal_where(const journal *j, char *moved_to, size_t cap) {
    struct stat st, at;
    if (j->fd < 0 || fstat(j->fd, &st) != 0) return JOURNAL_HERE; /* nothing to tell by */
    if (st.st_nlink == 0) return JOURNAL_REMOVED;
    if (stat(j->path, &at) == 0) {
        if (at.st_dev == st.st_dev && at.st_ino == st.st_ino) return JOURNAL_HERE;
    } else if (errno != ENOENT && errno != ENOTDIR) {
        return JOURNAL_HERE; /* EIO, ESTALE, EACCES: a passing fault is no evidence */
    }
    char dir[4096], was[4096];
    snprintf(was, sizeof was, "%s", j->path);
    char *slash = strrchr(was, '/');
    if (slash != NULL) *slash = '\0';
    if (!journal_now(j, dir, sizeof dir)) return JOURNAL_AWAY;
    if (strcmp(dir, was) == 0) return JOURNAL_AWAY; /* its name here taken by another file */
    snprintf(moved_to, cap, "%s", dir);
    return JOURNAL_MOVED;
}

/* Test hook: BATON_FAULT_JOURNAL_FULL=SEQ makes every append from record SEQ (0-based)
 * on fail as on a full disk, to check that a run stops when its journal cannot be
 * written (tests/run/check-run.sh journal-full). */
static int journal_fault_full(uint64_t seq) {
    const char *f = getenv("BATON_FAULT_JOURNAL_FULL");
    return f != NULL && f[0] >= '0' && f[0] <= '9' && seq >= strtoull(f, NULL, 10);
}

int journal_append(journal *j, Baton__JournalRecord *r, bt_diag *diag) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->has_seq = 1, r->seq = j->next_seq;
    r->has_wall_time = 1, r->wall_time = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    size_t n = baton__journal_record__get_packed_size(r);
    uint8_t *buf = malloc(n + 8);
    if (buf == NULL) return BT_ENOMEM;
    baton__journal_record__pack(r, buf + 8);
    uint32_t crc = crc32c_update(0, buf + 8, n);
    for (int i = 0; i < 4; i++)
        buf[i] = (uint8_t)(n >> (8 * i)), buf[4 + i] = (uint8_t)(crc >> (8 * i));
    off_t end = lseek(j->fd, 0, SEEK_END);
    size_t off = 0;
    ssize_t w = 0;
    if (journal_fault_full(r->seq)) off = n + 8 + 1, errno = ENOSPC; /* nothing written */
    while (off < n + 8 && ((w = write(j->fd, buf + off, n + 8 - off)) > 0 || errno == EINTR))
        off += w > 0 ? (size_t)w : 0;
    free(buf);
    if (off != n + 8 || fsync(j->fd) != 0) {
        int err = errno;
        /* never leave a torn record in front of later ones: cut it off again */
        if (end >= 0 && ftruncate(j->fd, end) == 0) lseek(j->fd, end, SEEK_SET);
        bt_diag_set(diag, "journal: cannot append a record: %s", strerror(err));
        return BT_EIO;
    }
    j->next_seq++;
    return 0;
}

const char *journal_kind_name(Baton__JournalRecord__Kind k) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&baton__journal_record__kind__descriptor, (int)k);
    return v ? v->name : "UNKNOWN";
}

int journal_started_build(const char *run_dir, char *out, size_t cap) {
    Baton__JournalRecord **v;
    size_t n;
    journal_tail tail;
    bt_diag ignore;
    bt_diag_init(&ignore);
    if (journal_read(run_dir, &v, &n, &tail, &ignore) != 0) return -1;
    int rc = -1;
    for (size_t i = 0; i < n && rc < 0; i++)
        if (v[i]->kind == BATON__JOURNAL_RECORD__KIND__RUN_STARTED)
            rc = v[i]->build && v[i]->build[0] ? 1 : 0;
    for (size_t i = 0; i < n && rc == 1; i++)
        if (v[i]->kind == BATON__JOURNAL_RECORD__KIND__RUN_STARTED) {
            snprintf(out, cap, "%s", v[i]->build);
            break;
        }
    journal_records_free(v, n);
    return rc;
}

const Baton__JournalRecord *journal_run_started(Baton__JournalRecord *const *v, size_t n) {
    for (size_t i = n; i-- > 0;)
        if (v[i]->kind == BATON__JOURNAL_RECORD__KIND__RUN_STARTED && v[i]->has_overrides_crc32c)
            return v[i];
    return NULL;
}
