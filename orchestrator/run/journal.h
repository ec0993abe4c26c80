/* The run journal (schema/journal.proto): RUN_DIR/journal, an append-only file of
 * records, each a little-endian uint32 length, a uint32 CRC32C of the record bytes, then
 * the serialized JournalRecord, fsynced one by one. A crash can only leave a torn last
 * record: reading stops at the first record whose length or CRC does not check out, and
 * opening for append cuts such a tail off first, so the file is always a sequence of
 * whole records. A bad record with whole records after it is not what a crash leaves but
 * damage (a flipped bit, an edit); the length is outside the CRC, so the next record
 * cannot be found safely from it: the records before it are read, opening refuses, and
 * nothing is cut off. */
#ifndef BATON_JOURNAL_H
#define BATON_JOURNAL_H

#include <stddef.h>

#include "journal.pb-c.h"
#include "util/err.h"

#define JOURNAL_FILE "journal"

typedef struct journal {
    int fd;
    uint64_t next_seq;
    char path[4096]; /* where it was opened (the run directory's as given: absolute) */
} journal;

/* What follows the journal's whole records. */
typedef struct journal_tail {
    size_t valid; /* the bytes of the whole records from the start (where damage begins) */
    size_t size;  /* the file's bytes */
    int torn;     /* a torn last record (bytes with no whole record after them) follows */
    int damaged;  /* a bad record with a whole record after it follows */
} journal_tail;

/* Opens (creating, 0600) RUN_DIR/journal for appending; a torn tail is truncated. A
 * damaged journal is refused (BT_EINVAL, journal_diag_damaged's message), unchanged. */
int journal_open(journal *j, const char *run_dir, bt_diag *diag);
void journal_close(journal *j);
/* Whether the open journal is still where it was opened: JOURNAL_HERE (also when its
 * path cannot be looked up for another reason than ENOENT/ENOTDIR: a passing I/O fault is
 * no evidence); JOURNAL_REMOVED when its file has no name left (its run directory
 * removed); JOURNAL_MOVED when its name is in another directory (its run directory renamed
 * or moved), that directory then in moved_to (cap bytes); JOURNAL_AWAY when it is not at
 * its path but where it is cannot be told (no /proc, renamed itself as an NFS client does
 * with a removed open file, or another file took its place). */
enum { JOURNAL_HERE, JOURNAL_REMOVED, JOURNAL_MOVED, JOURNAL_AWAY };
int journal_where(const journal *j, char *moved_to, size_t cap);
/* Appends r (its seq and wall_time are set here) and fsyncs. */
int journal_append(journal *j, Baton__JournalRecord *r, bt_diag *diag);

/* The whole records of RUN_DIR/journal up to the first bad one, in order; free with
 * journal_records_free. A missing journal gives none. *tail says what follows them. */
int journal_read(const char *run_dir, Baton__JournalRecord ***out, size_t *n, journal_tail *tail,
                 bt_diag *diag);
/* The message for a damaged journal: where, and what the user can do. */
void journal_diag_damaged(const char *run_dir, const journal_tail *t, bt_diag *diag);
void journal_records_free(Baton__JournalRecord **v, size_t n);
/* The run's last RUN_STARTED record that keeps the overrides' CRC32C (and, when short,
 * their text): those it started with, or those a resume took edited (RUN_STARTED again,
 * run_dir.h); NULL for a journal from before that. */
const Baton__JournalRecord *journal_run_started(Baton__JournalRecord *const *v, size_t n);
/* The build the run's first RUN_STARTED names (the baton that started it) into out: 1; 0
 * when it names none (a baton older than that record); -1 when there is no RUN_STARTED or
 * the journal cannot be read. */
int journal_started_build(const char *run_dir, char *out, size_t cap);

const char *journal_kind_name(Baton__JournalRecord__Kind k);

#endif
