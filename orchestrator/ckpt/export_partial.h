/* The directory `baton ckpt export` writes beside its --out before moving the export into
 * place, OUT.partial-HOST-PID-XXXXXX: named for the host and the process writing it, so
 * that a later export to the same --out can tell one left by an export that no longer
 * runs (killed, or stopped by a second Ctrl-C before it could clean up) from one still
 * being written, and remove it. */
#ifndef BATON_EXPORT_PARTIAL_H
#define BATON_EXPORT_PARTIAL_H

#include <stddef.h>

/* The mkdtemp template for out's first len bytes (out without its trailing slashes) into
 * tmp: OUT.partial-HOST-PID-XXXXXX; -1 when it does not fit in cap. */
int export_partial_template(const char *out, size_t len, char *tmp, size_t cap);

/* Removes each directory beside out (its first len bytes) named OUT.partial-HOST-PID-XXXXXX
 * with this host's name, owned by this user, whose process no longer runs, saying so on
 * stdout. Anything else is left alone: another host's (its process cannot be seen from
 * here), a running process's, an older OUT.partial-XXXXXX (no pid to ask), a link or a
 * file of such a name. */
void export_partial_sweep(const char *out, size_t len);

#endif
