/* Who holds a run directory: the baton run, resume or submit that took its lock (run_dir.h)
 * records itself in the lock file, one line, after taking the lock:
 *   pid=1234 host=node0 since=1714567890 command=run recipe_crc32c=0a1b2c3d
 *   pidns=4026531836 stopping=1714568000 crc32c=...
 * the process id, the host it runs on, when it took the run (kept across a continuation
 * in a fresh process, run_afresh.h: the same pid), which command it is, the CRC32C of the
 * recipe bytes it read (what it trains: an edit of RUN_DIR/recipe.yaml after that is
 * taken by the next baton resume only), the inode of its PID namespace (readlink
 * /proc/self/ns/pid: a pid means something only in its own namespace; absent when it
 * cannot be read) and, once it got its first stop (baton stop, SIGTERM, Ctrl-C), when
 * (absent before). Fields are key=value, unknown ones ignored. The line ends with the
 * CRC32C of what precedes " crc32c=", so that a reader never takes a torn or foreign line
 * for a record. The lock file stays the lock: the record is written into the open, locked
 * file (pwrite, then ftruncate to its length), never by replacing the file.
 * A record is only believed while the lock is held (run_dir_busy) and, on this host, once
 * its process is checked to hold the lock file open (its /proc/PID/fd): a holder killed
 * with SIGKILL leaves its line behind, a stale one that the next holder empties as it
 * takes the lock (a baton older than the record leaves it: its pid may be reused). */
#ifndef BATON_RUN_HOLDER_H
#define BATON_RUN_HOLDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The si_value (sigqueue) of baton stop's SIGTERM: a second one, to a run already
 * stopping, is no "second signal" that kills the workers at once (run_on_signal). */
#define RUN_HOLDER_STOP_VALUE 0x62737470 /* "bstp" */

typedef struct run_holder {
    pid_t pid;
    char host[256];   /* gethostname, characters other than [A-Za-z0-9._-] as '?' */
    long long since;  /* unix seconds */
    char command[16]; /* run, resume or submit */
    uint32_t recipe_crc32c;
    unsigned long long pidns; /* its PID namespace's inode, 0 not known */
    long long stopping;       /* unix seconds of its first stop, 0 none yet */
} run_holder;

/* What a run directory's record is worth (run_holder_find). */
typedef enum run_holder_state {
    RUN_HOLDER_NONE = 0,   /* no valid record (none written yet, an older baton's lock) */
    RUN_HOLDER_GONE,       /* this host's, its process gone: stale */
    RUN_HOLDER_NOT_HOLDER, /* this host's, its process alive but without the lock file open:
                            * stale, its pid reused */
    RUN_HOLDER_UNVERIFIED, /* this host's, alive, its /proc/PID/fd not readable (another
                            * user's, or a process that is not dumpable) */
    RUN_HOLDER_HELD,       /* this host's, its process checked to hold the lock file */
    RUN_HOLDER_OTHER_NS,   /* this host's, from another PID namespace (a container): its
                            * pid means nothing here */
    RUN_HOLDER_OTHER_HOST, /* another host's: not checked */
} run_holder_state;

/* This process as the holder of the locked lock file fd (command: "run", "resume",
 * "submit"; recipe, n: the recipe bytes it read): since is kept from the record there when
 * it is this process's own (a continuation in a fresh process), else now. Failures (a
 * full disk) are not said: the run goes on, shown without its holder. */
void run_holder_note(int fd, const char *command, const char *recipe, size_t n);

/* This process's record in the locked lock file fd marked stopping (now), once: on its
 * first stop. Nothing when it wrote none. */
void run_holder_stopping(int fd);

/* The record in the run directory's lock file: 1 read into *h, 0 none (no lock file, an
 * empty one, no valid line after a few tries). Says nothing about the lock: see
 * run_holder_find. */
int run_holder_read(const char *run_dir_path, run_holder *h);

/* Whether h runs on this host (its host name is this one's). */
int run_holder_here(const run_holder *h);

/* The holder of a run directory whose lock is held (run_dir_busy), its record read into
 * *h (when not RUN_HOLDER_NONE): believed as the process holding the run only when
 * RUN_HOLDER_HELD (or RUN_HOLDER_OTHER_HOST, which cannot be checked from here). */
run_holder_state run_holder_find(const char *run_dir_path, run_holder *h);

/* Whether process h->pid has run_dir_path's lock file open (its /proc/PID/fd): 1 yes, 0
 * no, -1 cannot tell (no /proc, another user's process, one not dumpable). */
int run_holder_has_lock(const run_holder *h, const char *run_dir_path);

/* What s says of h, for status and refusals: "baton run pid 1234 on node0, since
 * 2024-05-01 14:02:11" (local time), ", stopping since 14:05:00" added once it is; "baton
 * run in another PID namespace (a container) on node0, since ..." (no pid); "baton run pid
 * 1234 on node0, since ... (recorded; not verified: /proc/1234/fd cannot be read)". */
void run_holder_words(const run_holder *h, run_holder_state s, char *out, size_t cap);

/* "14:05:00", when h got its first stop (local time), into out. */
void run_holder_stop_time(const run_holder *h, char *out, size_t cap);

/* How to stop h, of state s (RUN_HOLDER_OTHER_HOST or RUN_HOLDER_OTHER_NS), from where it
 * runs, run_dir_path made absolute: "stop it on node7 with 'baton stop /runs/r1' or kill
 * -TERM 1234" (and scancel's form where RUN_DIR/job_id names a Slurm job), or "stop it from
 * inside that namespace with 'baton stop /runs/r1'". */
void run_holder_elsewhere(const run_holder *h, run_holder_state s, const char *run_dir_path,
                          char *out, size_t cap);

/* Why a run directory is busy, for a refusal: " (baton run pid 1234 on node0, since ...;
 * stop it with 'baton stop DIR' or kill -TERM 1234)", the command on another host said to
 * be run there, one in another PID namespace to be stopped from inside it, one stopping
 * to be waited for, one not verified named without a command; a lock file deleted said
 * so, with how to find its holder; "" when the holder is not known. */
void run_holder_refusal(const char *run_dir_path, char *out, size_t cap);

#endif
