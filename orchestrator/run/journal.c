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

/* Scans buf for whole records: their count (into *n, with decoded records into v when
 * not NULL) and the length of the valid prefix. */
static size_t journal_scan(const uint8_t *buf, size_t len, Baton__JournalRecord **v, size_t *n) {
    size_t off = 0, k = 0;
    while (len - off >= 8) {
        uint32_t rl = (uint32_t)buf[off] | (uint32_t)buf[off + 1] << 8 |
                      (uint32_t)buf[off + 2] << 16 | (uint32_t)buf[off + 3] << 24;
        uint32_t crc = (uint32_t)buf[off + 4] | (uint32_t)buf[off + 5] << 8 |
                       (uint32_t)buf[off + 6] << 16 | (uint32_t)buf[off + 7] << 24;
        if (rl > JOURNAL_MAX_RECORD || rl > len - off - 8) break;
        if (crc32c_update(0, buf + off + 8, rl) != crc) break;
        Baton__JournalRecord *r = baton__journal_record__unpack(NULL, rl, buf + off + 8);
        if (r == NULL) break;
        if (v)
            v[k] = r;
        else
            baton__journal_record__free_unpacked(r, NULL);
        k++;
        off += 8 + rl;
    }
    *n = k;
    return off;
}

/* The journal's bytes; a missing journal is empty (*buf NULL). */
static int journal_slurp(const char *path, uint8_t **buf, size_t *len, bt_diag *diag) {
    char *b = NULL;
    *buf = NULL, *len = 0;
    if (bt_read_file(path, JOURNAL_MAX_BYTES, &b, len) == 0) {
        *buf = (uint8_t *)b;
        return 0;
    }
    if (errno == ENOENT) return 0;
    bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
    return BT_EIO;
}

int journal_read(const char *run_dir, Baton__JournalRecord ***out, size_t *n, int *torn,
                 bt_diag *diag) {
    char path[4096];
    journal_path(run_dir, path, sizeof path);
    uint8_t *buf;
    size_t len, count;
    *out = NULL, *n = 0, *torn = 0;
    int rc = journal_slurp(path, &buf, &len, diag);
    if (rc != 0 || buf == NULL) return rc;
    size_t valid = journal_scan(buf, len, NULL, &count);
    *torn = valid != len;
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
    size_t valid = buf ? journal_scan(buf, len, NULL, &count) : 0;
    free(buf);
    j->next_seq = count;
    j->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (j->fd < 0 || ftruncate(j->fd, (off_t)valid) != 0 || lseek(j->fd, 0, SEEK_END) < 0) {
        bt_diag_set(diag, "%s: cannot open for appending: %s", path, strerror(errno));
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
