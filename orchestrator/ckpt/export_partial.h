/* The directory `baton ckpt export` writes beside its --out before moving the export into
 * place, OUT.partial-HOST-PID-XXXXXX: named for the host and the process writing it, and
 * holding a lock file (EXPORT_PARTIAL_LOCK) the export keeps an OFD lock on while it
 * runs, so that a later export to the same --out can tell one left by an export that no
 * longer runs (killed, or stopped by a second Ctrl-C before it could clean up) from one
 * still being written, and remove it. The lock, not the pid, says which: it holds across
 * PID namespaces (containers sharing a hostname), where a pid names another process or
 * none. */
#ifndef BATON_EXPORT_PARTIAL_H
#define BATON_EXPORT_PARTIAL_H

#include <stddef.h>

/* The mkdtemp template for out's first len bytes (out without its trailing slashes) into
 * tmp: OUT.partial-HOST-PID-XXXXXX; -1 when it does not fit in cap. */
int export_partial_template(const char *out, size_t len, char *tmp, size_t cap);

#define EXPORT_PARTIAL_LOCK ".lock"

/* Makes tmp/EXPORT_PARTIAL_LOCK and takes an OFD write lock on it, made under another name
 * and renamed once locked (a sweep never sees it unlocked): the open descriptor, to keep
 * open while the export runs, or -1 (errno says why). */
int export_partial_lock(const char *tmp);

/* Removes tmp's lock file before tmp is moved into place (the lock stays held on the open
 * descriptor until closed): a sweep leaves a partial without one alone. */
void export_partial_unlink_lock(const char *tmp);

/* Removes each directory beside out (its first len bytes) named OUT.partial-HOST-PID-XXXXXX
 * with this host's name, owned by this user, whose lock file nobody holds a lock on (its
 * export no longer runs), saying so on stdout. Anything else is left alone: another
 * host's, a running export's (its lock held, whatever its pid says here), one without a
 * lock file (an older baton's, or one cut short before it took its lock, or being moved
 * into place), an older OUT.partial-XXXXXX, a link or a file of such a name. */
void export_partial_sweep(const char *out, size_t len);

#endif
