/* Who holds a run directory: the baton run, resume or submit that took its lock (run_dir.h)
 * records itself in the lock file, one line, after taking the lock:
 *   pid=1234 host=node0 since=1714567890 command=run recipe_crc32c=0a1b2c3d crc32c=...
 * the process id, the host it runs on, when it took the run (kept across a continuation
 * in a fresh process, run_afresh.h: the same pid), which command it is, and the CRC32C of
 * the recipe bytes it read (what it trains: an edit of RUN_DIR/recipe.yaml after that is
 * taken by the next baton resume only). The line ends with the CRC32C of what precedes
 * " crc32c=", so that a reader never takes a torn or foreign line for a record. The lock
 * file stays the lock: the record is written into the open, locked file (pwrite, then
 * ftruncate to its length), never by replacing the file.
 * A record is only believed while the lock is held (run_dir_busy): a holder killed with
 * SIGKILL leaves its line behind, a stale one that the next holder empties as it takes the
 * lock, and that no reader shows, the lock being free. */
#ifndef BATON_RUN_HOLDER_H
#define BATON_RUN_HOLDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct run_holder {
    pid_t pid;
    char host[256];   /* gethostname, characters other than [A-Za-z0-9._-] as '?' */
    long long since;  /* unix seconds */
    char command[16]; /* run, resume or submit */
    uint32_t recipe_crc32c;
} run_holder;

/* This process as the holder of the locked lock file fd (command: "run", "resume",
 * "submit"; recipe, n: the recipe bytes it read): since is kept from the record there when
 * it is this process's own (a continuation in a fresh process), else now. Failures (a
 * full disk) are not said: the run goes on, shown without its holder. */
void run_holder_note(int fd, const char *command, const char *recipe, size_t n);

/* The record in the run directory's lock file: 1 read into *h, 0 none (no lock file, an
 * empty one, no valid line after a few tries). Says nothing about the lock: see
 * run_holder_find. */
int run_holder_read(const char *run_dir_path, run_holder *h);

/* Whether h runs on this host (its host name is this one's). */
int run_holder_here(const run_holder *h);

/* The holder of a run directory whose lock is held (run_dir_busy): 1 when its record is
 * there and believable (on this host: its process is alive), 0 when not known (a stale
 * record left by a process since gone, one not written yet, a lock file deleted, an older
 * baton's). */
int run_holder_find(const char *run_dir_path, run_holder *h);

/* Whether process h->pid has run_dir_path's lock file open (its /proc/PID/fd): 1 yes, 0
 * no, -1 cannot tell (no /proc, another user's process). */
int run_holder_has_lock(const run_holder *h, const char *run_dir_path);

/* "baton run pid 1234 on node0, since 2024-05-01 14:02:11" (local time) into out. */
void run_holder_words(const run_holder *h, char *out, size_t cap);

/* Why a run directory is busy, for a refusal: " (baton run pid 1234 on node0, since ...;
 * stop it with 'baton stop DIR' or kill -TERM 1234)", the command on another host said to
 * be run there; "" when the holder is not known. */
void run_holder_refusal(const char *run_dir_path, char *out, size_t cap);

#endif
