/* The paths baton-worker's own options name, checked before the ranks join and train, so
 * that a typo is said at once (exit 2, bad usage) and not after the stage has trained. */
#ifndef BATON_WORKER_PATHS_H
#define BATON_WORKER_PATHS_H

#include <stdint.h>

/* --valid PREFIX: PREFIX.idx and PREFIX.bin open as a token dataset (when eval_windows
 * asks for a validation); --init PATH: something is there (whether it holds a complete
 * checkpoint is the load's to say); --dump-params FILE: not a directory, and its
 * directory is there and writable (checked by the rank that writes it, rank 0: PMIX_RANK
 * unset or 0). NULL: not given. 0 when all hold, else -1 after saying why on stderr. */
int worker_check_paths(const char *valid, uint32_t eval_windows, const char *init,
                       const char *dump_params);

#endif
