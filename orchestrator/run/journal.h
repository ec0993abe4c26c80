/* The run journal (schema/journal.proto): RUN_DIR/journal, an append-only file of
 * records, each a little-endian uint32 length, a uint32 CRC32C of the record bytes, then
 * the serialized JournalRecord, fsynced one by one. A crash can only leave a torn last
 * record: reading stops at the first record whose length or CRC does not check out, and
 * opening for append cuts such a tail off first, so the file is always a sequence of
 * whole records. */
#ifndef BATON_JOURNAL_H
#define BATON_JOURNAL_H

#include <stddef.h>

#include "journal.pb-c.h"
#include "util/err.h"

#define JOURNAL_FILE "journal"

typedef struct journal {
    int fd;
    uint64_t next_seq;
} journal;

/* Opens (creating, 0600) RUN_DIR/journal for appending; a torn tail is truncated. */
int journal_open(journal *j, const char *run_dir, bt_diag *diag);
void journal_close(journal *j);
/* Appends r (its seq and wall_time are set here) and fsyncs. */
int journal_append(journal *j, Baton__JournalRecord *r, bt_diag *diag);

/* Every whole record of RUN_DIR/journal, in order; free with journal_records_free.
 * A missing journal gives none. *torn is set when a damaged tail was ignored. */
int journal_read(const char *run_dir, Baton__JournalRecord ***out, size_t *n, int *torn,
                 bt_diag *diag);
void journal_records_free(Baton__JournalRecord **v, size_t n);

const char *journal_kind_name(Baton__JournalRecord__Kind k);

#endif
