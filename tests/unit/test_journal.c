/* journal.c: a torn last record (what a crash in the middle of an append leaves) is
 * dropped, and cut off when the journal is opened for appending; a bad record with whole
 * records after it (a flipped byte in a payload or in a length field) is damage: reading
 * stops before it and says where, opening refuses and leaves every byte as it was. */
#define _GNU_SOURCE /* mkdtemp */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "journal.h"
#include "util/file.h"

#define N_RECORDS 5

static char dir[64], path[128];

/* The byte offset of each record as written (N_RECORDS + 1 entries: the last is the
 * file's length), from the lengths journal_append framed them with. */
static size_t offsets[N_RECORDS + 1];

static void write_journal(void) {
    unlink(path);
    journal j;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(journal_open(&j, dir, &d) == 0);
    for (int i = 0; i < N_RECORDS; i++) {
        Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
        r.has_kind = 1, r.kind = BATON__JOURNAL_RECORD__KIND__ATTEMPT_ENDED;
        r.has_step = 1, r.step = 100 + (uint64_t)i;
        r.detail = "a cause long enough to make the record more than a few bytes";
        CHECK(journal_append(&j, &r, &d) == 0);
    }
    journal_close(&j);
    char *b = NULL;
    size_t len = 0;
    CHECK(bt_read_file(path, 1 << 20, &b, &len) == 0);
    size_t off = 0;
    for (int i = 0; i < N_RECORDS; i++) {
        offsets[i] = off;
        const uint8_t *u = (const uint8_t *)b + off;
        off += 8 + ((size_t)u[0] | (size_t)u[1] << 8 | (size_t)u[2] << 16 | (size_t)u[3] << 24);
    }
    offsets[N_RECORDS] = off;
    CHECK_EQ_U64(off, len);
    free(b);
}

static void xor_byte(size_t at, uint8_t x) {
    int fd = open(path, O_RDWR);
    uint8_t c = 0;
    CHECK(fd >= 0 && pread(fd, &c, 1, (off_t)at) == 1);
    c ^= x;
    CHECK(pwrite(fd, &c, 1, (off_t)at) == 1);
    close(fd);
}

static size_t file_size(void) {
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* Reads the journal: the number of records (each checked to be the one written at its
 * place), with *tail. */
static size_t read_journal(journal_tail *tail) {
    Baton__JournalRecord **v;
    size_t n;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(journal_read(dir, &v, &n, tail, &d) == 0);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_U64(v[i]->seq, i);
        CHECK_EQ_U64(v[i]->step, 100 + i);
    }
    journal_records_free(v, n);
    return n;
}

/* A torn tail: dropped on reading, cut off on opening, and the next append follows the
 * whole records with the next seq. */
static void test_torn_tail(void) {
    write_journal();
    journal_tail t;
    CHECK_EQ_U64(read_journal(&t), N_RECORDS);
    CHECK(!t.torn && !t.damaged);
    size_t cuts[] = {offsets[N_RECORDS - 1] + 3, offsets[N_RECORDS - 1] + 8,
                     offsets[N_RECORDS] - 1};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        write_journal();
        CHECK(truncate(path, (off_t)cuts[c]) == 0);
        CHECK_EQ_U64(read_journal(&t), N_RECORDS - 1);
        CHECK(t.torn && !t.damaged);
        CHECK_EQ_U64(t.valid, offsets[N_RECORDS - 1]);
        journal j;
        bt_diag d;
        bt_diag_init(&d);
        CHECK(journal_open(&j, dir, &d) == 0);
        CHECK_EQ_U64(file_size(), offsets[N_RECORDS - 1]);
        Baton__JournalRecord r = BATON__JOURNAL_RECORD__INIT;
        r.has_step = 1, r.step = 100 + N_RECORDS - 1;
        CHECK(journal_append(&j, &r, &d) == 0);
        journal_close(&j);
        CHECK_EQ_U64(read_journal(&t), N_RECORDS);
        CHECK(!t.torn && !t.damaged);
    }
    /* the last record whole in length but bad in its bytes is a torn tail too */
    write_journal();
    xor_byte(offsets[N_RECORDS - 1] + 20, 0x55);
    CHECK_EQ_U64(read_journal(&t), N_RECORDS - 1);
    CHECK(t.torn && !t.damaged);
    /* a zero-filled tail (the blocks of an append a crash left unwritten) is torn, not
     * read as empty records */
    write_journal();
    int fd = open(path, O_WRONLY | O_APPEND);
    uint8_t zeros[40] = {0};
    CHECK(fd >= 0 && write(fd, zeros, sizeof zeros) == (ssize_t)sizeof zeros);
    close(fd);
    CHECK_EQ_U64(read_journal(&t), N_RECORDS);
    CHECK(t.torn && !t.damaged);
}

/* Damage at the record written at index k: reading stops before it and says where,
 * opening refuses with that place in the message and changes nothing. */
static void check_damaged(size_t k, const char *what) {
    journal_tail t;
    size_t size = file_size();
    CHECK_EQ_U64(read_journal(&t), k);
    CHECK(t.damaged && !t.torn);
    CHECK_EQ_U64(t.valid, offsets[k]);
    CHECK_EQ_U64(t.size, size);
    journal j;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(journal_open(&j, dir, &d) == BT_EINVAL);
    char want[64];
    snprintf(want, sizeof want, "is damaged at byte %zu of %zu", offsets[k], size);
    CHECK_STR_CONTAINS(d.msg, want);
    CHECK_EQ_U64(file_size(), size);
    if (check_failures) fprintf(stderr, "  (after %s)\n", what);
}

static void test_damage(void) {
    for (size_t k = 0; k + 1 < N_RECORDS; k++) {
        write_journal();
        xor_byte(offsets[k] + 8 + 5, 0x55); /* a payload byte */
        check_damaged(k, "a flipped payload byte");
        write_journal();
        xor_byte(offsets[k] + 4, 0x01); /* the CRC */
        check_damaged(k, "a flipped CRC byte");
        /* the length, shorter and longer: the next record is not where it says */
        write_journal();
        xor_byte(offsets[k], 0x04);
        check_damaged(k, "a flipped low length byte");
        write_journal();
        xor_byte(offsets[k] + 1, 0x55);
        check_damaged(k, "a flipped second length byte");
        write_journal();
        xor_byte(offsets[k] + 3, 0x80);
        check_damaged(k, "a flipped high length byte");
    }
    /* the last but one record's length pointing past the end of the file */
    write_journal();
    xor_byte(offsets[N_RECORDS - 2] + 1, 0x10);
    check_damaged(N_RECORDS - 2, "a length past the end");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/baton-test-journal.XXXXXX");
    if (mkdtemp(dir) == NULL) return 1;
    snprintf(path, sizeof path, "%s/%s", dir, JOURNAL_FILE);
    test_torn_tail();
    test_damage();
    unlink(path);
    rmdir(dir);
    return check_status();
}
