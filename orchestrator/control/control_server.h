/* The orchestrator's end of the control channel (schema/control.proto): a TCP server
 * that the supervisor owns and drives from its own poll loop.
 *
 * Wire format: each message is a little-endian uint32 length followed by that many bytes
 * of a serialized baton.Envelope. A connection's first message must be a Hello carrying
 * the run's secret token (compared in constant time); until then nothing it sends is
 * trusted. A Hello taken is answered with a HelloAck (until it comes, a worker whose
 * connection closes connects again and repeats its Hello: control_client.h). A wrong or
 * missing token, a frame longer than CONTROL_MAX_FRAME, bytes that do not decode, a Hello
 * that names a rank outside the attempt's world or one already connected from another
 * worker (pid, host; said on stderr once per rank) closes the connection and counts it in
 * `rejected` (the rank's own worker connecting again, its end of the old connection broken
 * unseen here, takes the rank over: the old one is closed). So does a connection without a
 * Hello after BT_TCP_UNAUTH_TIMEOUT_S, or when bt_tcp_unauth_limit(world) such connections are open
 * and a new one comes (the oldest goes: never one of the attempt's own ranks crowded out
 * by fewer than bt_tcp_unauth_cap() others); out of descriptors, accepting closes one of those or
 * pauses (util/tcp.h): anyone who can reach the port can connect, and must never take the
 * descriptors the run needs (its checkpoints, its ranks' connections).
 *
 * Single-threaded and never blocking: sockets are nonblocking, reads take what is there,
 * and writes (Stop) that would block are dropped for that peer (counted in `send_failed`)
 * rather than waited for.
 *
 * Lifetime: control_server_open -> (control_server_begin_attempt -> loop {
 * control_server_pollfds, poll (e.g. launch_job_step), control_server_handle, read state
 * } )* -> control_server_close.
 *
 * Metrics of rank 0 are appended to RUN_DIR/metrics.jsonl (one JSON object per line,
 * flushed per line) and to a TensorBoard event file under RUN_DIR/tb/ (see tb_writer.h
 * for the global step). */
#ifndef BATON_CONTROL_SERVER_H
#define BATON_CONTROL_SERVER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "control_metrics.h"
#include "util/err.h"

#define CONTROL_MAX_FRAME (1u << 20) /* longest Envelope accepted, bytes */
/* Connections held at once beyond 2 x world + the cap on those without a Hello (each
 * rank's, one more each while it connects again); more are refused, said once an attempt. */
#define CONTROL_CONNS_SLACK 64

/* What the server knows of one rank of the current attempt. */
typedef struct control_rank {
    int connected;          /* a Hello with the right token arrived, connection still open */
    int ever_connected;     /* ... at some point during this attempt */
    double last_heard;      /* `now` of its latest message (monotonic seconds) */
    uint64_t step;          /* latest heartbeat's or metrics' step */
    int phase;              /* BATON__HEARTBEAT__PHASE__*; -1 before the first heartbeat */
    char host[256];         /* from the Hello */
    pid_t pid;              /* from the Hello */
    uint32_t hello_attempt; /* the attempt the worker says it belongs to */
    unsigned dup_said;      /* Hellos of a second worker as this rank (the first is said) */
    int stop_signal;        /* it sent a Stop: a signal of its own (control_stop_signal) */
    char build[128];        /* from the Hello: the worker's version, "" when it says none
                               (cut short: compared whole as it came, control_hello) */
} control_rank;

/* The Fatal that names the attempt's failure: a configuration error (code 2) over any
 * other; then a rank's own failure over one that followed a peer's loss (peer_lost: a
 * reaction to it); then the one sent first (time, where both carry one; else the first
 * read). And, by the same order, the one of any rank that says the disk is full (its disk_full
 * field, or from an older worker strerror's words for ENOSPC or EDQUOT: a checkpoint save that
 * every restart would repeat). */
typedef struct control_fatal_key { /* what the order reads of a Fatal kept */
    int seen;
    int32_t code;
    int peer_lost;
    int has_time;
    double time;
} control_fatal_key;

typedef struct control_fatal {
    control_fatal_key key; /* key.seen: one came; key.code: its exit code class */
    uint32_t rank;
    char message[1024]; /* a longer one with its middle cut, its end kept */
    /* it failed on a loss that was not finite at nonfinite_step, in an attempt that started
     * from start_step (Fatal.nonfinite_step): training is deterministic */
    int nonfinite;
    uint64_t nonfinite_step, start_step;
    /* what kind of failure it is: Fatal.reason (BATON__FATAL__REASON__*), set by a worker
     * of this build, never read from the message's words; 0 (unspecified) when absent */
    int reason;
    int disk_full;
    uint32_t full_rank;
    char full_message[1024];
    control_fatal_key full_key;
} control_fatal;

/* A rank's own stop (a Stop it sent: a signal came to it, not baton run's Stop): the first
 * one read in the attempt, and how many ranks sent one. */
typedef struct control_stop_signal {
    int seen;
    uint32_t rank;
    int signal;     /* SIGTERM, SIGINT */
    int sender;     /* the pid that sent it, 0 where the rank could not tell */
    uint64_t step;  /* where every rank stops and saves a checkpoint */
    uint32_t ranks; /* ranks that sent one */
} control_stop_signal;

typedef struct control_conn control_conn; /* private */

/* A stage's closing validation, as rank 0 sent it. */
typedef struct control_valid {
    uint64_t step;
    double loss;
    uint32_t windows;
} control_valid;

/* Called with each of rank 0's Metrics of the current attempt as it is applied: a step's
 * (v NULL) or the closing validation (m NULL). */
typedef void (*control_metrics_cb)(void *arg, const control_metrics *m, const control_valid *v);
/* Called with each checkpoint rank 0 of the current attempt says it committed: its name
 * (the attempt's stage's, sNN-stepNNNNNNNN) and step. */
typedef void (*control_ckpt_cb)(void *arg, const char *name, uint64_t step);

typedef struct control_server {
    /* Read-only for the caller. */
    char address[300];    /* "host:port" the workers connect to */
    uint32_t stage_index; /* the current attempt (control_server_begin_attempt) */
    char stage_name[128];
    uint32_t attempt;
    uint32_t world;
    uint64_t step_offset;
    control_rank *ranks;  /* world entries */
    int have_metrics;     /* rank 0 sent Metrics during this attempt */
    control_metrics last; /* rank 0's latest */
    control_fatal fatal;
    control_stop_signal stop_signal;
    unsigned rejected;    /* connections closed for a bad token, garbage or oversize */
    unsigned send_failed; /* Stop messages that could not be sent whole */
    /* The first rank of the attempt whose Hello names another build than `build` (or none;
     * compared by the sources' hash, control_build_same),
     * else -1; only while the caller sets build (NULL: no check). */
    int other_build;
    /* Set by the caller (NULL: none): rank 0's metrics of the current attempt, live and
     * replayed (control_server_replay) alike, as they are applied. */
    control_metrics_cb on_metrics;
    void *metrics_arg;
    /* Set by the caller (NULL: none): rank 0's checkpoint commits, as they arrive; a name
     * that is not the attempt's stage's checkpoint at that step is dropped. */
    control_ckpt_cb on_checkpoint;
    void *ckpt_arg;
    /* Set by the caller (NULL: none): the build a rank's Hello must name (other_build). */
    const char *build;
    /* Private. */
    int listen_fd;
    size_t max_unauth;    /* connections without a Hello kept at once (bt_tcp_unauth_cap) */
    double accept_resume; /* accepting paused until then (out of descriptors) */
    control_conn *conns;
    size_t n_conns, cap_conns;
    size_t max_conns;   /* n_conns at most (control_server_begin_attempt sets it) */
    unsigned full_said; /* connections refused for max_conns this attempt (the first said) */
    long *slot_of;      /* conns' index of each descriptor, -1 for none */
    size_t n_slot_of;
    char *token;
    control_metrics_sink sink;
    double flushed;               /* when control_server_handle last wrote the records held back */
    unsigned metrics_failed_said; /* metrics writes of this attempt that failed (the first said) */
    bt_diag *diag;
} control_server;

/* Listens on bind_host (e.g. "127.0.0.1"; NULL: 127.0.0.1) at a port the kernel picks and
 * fills cs->address. token is the run's secret (copied; non-empty). run_dir receives
 * metrics.jsonl and tb/ (created if missing); NULL: metrics are kept in memory only.
 * diag (may be NULL) receives the error when it fails. A metrics write that fails later
 * is said on stderr (a full disk by the sink, control_metrics.h; anything else once per
 * attempt). */
int control_server_open(control_server *cs, const char *token, const char *run_dir,
                        const char *bind_host, bt_diag *diag);

/* Starts a new attempt: closes every connection of the previous one, forgets the ranks'
 * state, metrics, any Fatal and any rank's own stop, and expects `world` ranks (Hello.rank < world)
 * whose Hello.attempt is `attempt` (the StageSpec's attempt; a straggler of an older attempt is
 * refused). step_offset: the sum of the steps of the recipe's stages before this one,
 * added to the stage's step for TensorBoard's global step (control_metrics.h). */
int control_server_begin_attempt(control_server *cs, uint32_t stage_index, const char *stage_name,
                                 uint32_t attempt, uint32_t world, uint64_t step_offset);

/* Fills out with POLLIN entries: the listening socket first, then every connection.
 * Returns how many were written (at most cap; 1 + cs->n_conns are needed, never more
 * than 1 + cs->max_conns). */
size_t control_server_pollfds(const control_server *cs, struct pollfd *out, size_t cap);

/* After poll: accepts new connections and reads and applies whatever arrived on the fds
 * of fds[0..n) that poll marked (entries that are not the server's are ignored). now is
 * monotonic seconds (bt_clock_now). Never blocks. Once a second it also tries to write the
 * metrics records held back (a full disk, control_metrics_flush), so that they reach the
 * files while no new record comes (a closing validation, a backoff, a stop). */
void control_server_handle(control_server *cs, const struct pollfd *fds, size_t n, double now);

/* Once the attempt's processes are gone: reads every connection to its end (what a rank
 * sent before it exited may still wait unread, e.g. when the supervisor was paused while
 * the ranks finished: its last metrics, its closing validation) and closes it, accepting
 * connections still queued. Waits at most timeout_s for ranks' connections that stay
 * open (a lost host's); unauthenticated connections are read, not waited for. Then tries
 * to write the metrics records held back (the attempt's last ones, a full disk). */
void control_server_drain(control_server *cs, double timeout_s);

/* Seconds since the connected rank heard from longest ago (its rank in *rank when rank is
 * not NULL), or -1 when no rank is connected. */
double control_server_silence(const control_server *cs, double now, int *rank);

/* The supervisor was not running for gap_s seconds (stopped: SIGSTOP, Ctrl-Z; or
 * starved) and read nothing meanwhile: moves every rank's last_heard (and the Hello
 * deadline of connections not yet authenticated) gap_s later, never past now, so that
 * silence counts only while the supervisor runs. */
void control_server_forgive(control_server *cs, double gap_s, double now);

/* When the attempt last heard from any rank (connected now or not; monotonic seconds as
 * passed to control_server_handle), 0 if never. */
double control_server_last_heard(const control_server *cs);

/* How many ranks of the attempt are connected now. */
uint32_t control_server_connected(const control_server *cs);

/* Sends Stop{checkpoint, reason} to every connected rank. Returns how many got it whole. */
int control_server_stop_all(control_server *cs, int checkpoint, const char *reason);

/* Writes what a stage attempt's metrics log (stages/metrics_log.h, its rank 0's own copy
 * of every Metrics it sent) holds and metrics.jsonl lacks, as if those records had
 * arrived (in order, with the time rank 0 sent them), by whose metrics.jsonl's last
 * record is: that attempt's (w: its stage and attempt), the records from the first step
 * of it the file lacks on (a gap in the middle, which a worker's full outbox leaves as it
 * drops newer messages, is filled by the rewind below: the steps after it are written
 * again, TensorBoard's restart marker at its first step; those the log lacks, holes its
 * failed appends left while the records went out live, and validations it lacks, are
 * read back from metrics.jsonl and valid.jsonl first and written again in their places,
 * so that no record either source holds is lost or written twice); an
 * earlier stage's or attempt's (or none), all of them (one for a step metrics.jsonl holds
 * of an earlier attempt replaces it and the steps after it, the rewind above); a later
 * stage's or attempt's (the journal is older than the file), only those past its largest
 * global step. The closing validation goes to valid.jsonl unless there. Waits up to wait_s for a
 * rank 0 still writing the log (*busy set when it outlasted that). *n: the step records written
 * that metrics.jsonl lacked.
 * For the time no attempt runs. The records of the current attempt (cs->stage_index and
 * cs->attempt) go to cs->on_metrics too. */
int control_server_replay(control_server *cs, const control_metrics_where *w, const char *path,
                          double wait_s, unsigned *n, int *busy, bt_diag *diag);

/* Closes every connection, the listening socket and the metrics files. */
void control_server_close(control_server *cs);

#endif
