/* The worker's end of the control channel (schema/control.proto; the orchestrator's end
 * is orchestrator/control/control_server.h): one TCP connection per rank, each message a
 * little-endian uint32 length and a serialized baton.Envelope, the first one a Hello with
 * the run's secret token.
 *
 * Training never depends on the channel, nor waits on it: messages the socket cannot take
 * at once (the orchestrator stopped by SIGSTOP or Ctrl-Z, or slow) wait in an outbox, in
 * order, and go out with the next message or poll, and at close (which waits for them at
 * most CONTROL_CLIENT_CLOSE_WAIT_S). An outbox over CONTROL_CLIENT_MAX_QUEUE drops new
 * messages (said once); the last CONTROL_CLIENT_RESERVE bytes of it take only a Fatal, a Stop, a
 * Checkpoint or the DONE heartbeat, so that those are not dropped behind a backlog of
 * heartbeats.
 *
 * The orchestrator answers a Hello it takes with a HelloAck. Until that comes, everything
 * sent stays in the outbox, and a connection that closes (the orchestrator dropped it
 * before reading the Hello: one of too many connections without one, a reset) is made again
 * after a short backoff (bt_tcp_retry_ms), CONTROL_CLIENT_HELLO_TRIES connections at most,
 * and sent the Hello and the rest again (said once on stderr); a connect refused (nothing
 * listens there any more: baton run is gone) ends the tries at once. The checks happen
 * whenever a message is sent and at each poll, and control_client_due says when the next one
 * is due (worker_pacer.h makes them then). Connecting again never waits: the connect goes
 * on in the background (at most CONTROL_CLIENT_CONNECT_TIMEOUT_S), training with it, and what
 * is sent meanwhile waits in the outbox. A HelloAck late on a connection still open is waited
 * for: baton run may be stopped (SIGSTOP), and a second connection would then deliver what the
 * first one holds twice. But not for ever: a baton run older than this worker reads without
 * acknowledging, so after
 * CONTROL_CLIENT_ACK_WAIT_S on one open connection, or once what is kept for it would fill
 * the outbox, the Hello is taken as acknowledged (said once on stderr) and what was sent is
 * no longer kept. Every other failure (cannot connect at first, a send that fails or the
 * orchestrator going away after the HelloAck, the tries spent) closes the channel, is
 * reported once on stderr, and the worker goes on without it. */
#ifndef BATON_CONTROL_CLIENT_H
#define BATON_CONTROL_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "control.pb-c.h"
#include "util/err.h"

#define CONTROL_CLIENT_CONNECT_TIMEOUT_S 5
#define CONTROL_CLIENT_CLOSE_WAIT_S      10
#define CONTROL_CLIENT_MAX_QUEUE         (4u << 20)  /* bytes waiting in the outbox */
#define CONTROL_CLIENT_RESERVE           (64u << 10) /* of it, kept for Fatal and DONE */
#define CONTROL_CLIENT_MAX_FRAME         (1u << 16)  /* the orchestrator sends Stop, HelloAck */
#define CONTROL_CLIENT_HELLO_TRIES       8           /* connections made for one Hello */
/* No HelloAck on an open connection: an old baton. Tests only: BATON_TEST_ACK_WAIT_S=SECONDS
 * (read at control_client_open) sets another limit (control.ack's ack_expiry). */
#define CONTROL_CLIENT_ACK_WAIT_S 60
/* Connecting, or the HelloAck awaited: seconds between polls (control_client_due). */
#define CONTROL_CLIENT_CHECK_S 0.01
/* At close, everything sent on a connection still open: the HelloAck waited for no later than
 * this long after its connect (a baton run that reads acknowledges at once; an older one never
 * does), the last heartbeat repeated every CONTROL_CLIENT_CLOSE_BEAT_S meanwhile. */
#define CONTROL_CLIENT_CLOSE_ACK_S  3.0
#define CONTROL_CLIENT_CLOSE_BEAT_S 0.5

typedef struct control_client {
    int fd;        /* -1: no channel */
    uint32_t rank; /* stamped on every message */
    int stop;      /* a Stop arrived */
    int stop_checkpoint;
    char stop_reason[256];
    uint8_t in[CONTROL_CLIENT_MAX_FRAME + 4]; /* bytes received, not yet decoded */
    size_t in_len;
    uint8_t *out; /* frames not yet sent whole, in order, from out_head (malloc'd) */
    size_t out_head, out_len, out_cap;
    unsigned dropped; /* messages dropped because the outbox was full */
    /* Until the HelloAck: the outbox keeps what was sent (from its start, the Hello). */
    int acked;
    int tries;  /* connections made for the Hello so far */
    int redial; /* fd -1 and a try left: connect again at retry_at (bt_clock_now) */
    int gone;   /* a connect made again was refused (baton run gone): no tries left */
    double retry_at;
    int connecting; /* fd's connect (again) goes on, until connect_by at most */
    double connect_by;
    double connected_at; /* when fd's connection was made */
    int ack_assumed;     /* acked: by an old baton's silence (control_client.h above) */
    double ack_wait_s;   /* CONTROL_CLIENT_ACK_WAIT_S, or the test's */
    int beat_phase;      /* the last heartbeat's (-1: none yet), repeated at close */
    uint64_t beat_step;
    /* the next Fatal's nonfinite_step, start_step and reason (schema/control.proto); 0: none */
    uint64_t nonfinite_step, start_step;
    Baton__Fatal__Reason reason;
    char address[300];            /* "host:port", as given */
    struct sockaddr_storage peer; /* what it resolved to at open, for connecting again */
    socklen_t peer_len;
    int peer_family, peer_socktype, peer_protocol;
} control_client;

/* Connects to address ("host:port", "[v6]:port") within CONTROL_CLIENT_CONNECT_TIMEOUT_S
 * and sends Hello{token, rank, world, host, pid, attempt}; host is the node the launcher
 * placed this rank on (its PMIx host name), or NULL/"" for the machine's name. On failure
 * c->fd is -1 and diag says why. */
int control_client_open(control_client *c, const char *address, const char *token, uint32_t rank,
                        uint32_t world, uint32_t attempt, const char *host, bt_diag *diag);

/* Messages; each does nothing without a channel. */
void control_client_heartbeat(control_client *c, Baton__Heartbeat__Phase phase, uint64_t step);
void control_client_metrics(control_client *c, const Baton__Metrics *m); /* rank: c->rank */
/* A Fatal: err is the errno behind the failure where one is known, else 0 (then the Fatal
 * leaves disk_full out and baton run reads the message's words); peer_lost: the failure
 * followed a peer's loss (comm_first_fault); stamped with the time it is sent; with
 * c->nonfinite_step and start_step where the first is set, c->reason where it is not 0. */
void control_client_fatal(control_client *c, int32_t code, int err, int peer_lost,
                          const char *message);
/* This rank's own stop request, for a signal (SIGTERM, SIGINT) sent by process sender (0:
 * not known): Stop{signal, sender_pid, step, reason}, step being where the ranks stop. */
void control_client_stop_signal(control_client *c, int signal, int sender, uint64_t step,
                                const char *reason);
/* Rank 0: checkpoint name (step) is committed. */
void control_client_checkpoint(control_client *c, const char *name, uint64_t step);

/* Whether there is a channel, or one is being made again (a redial pending or going on). */
int control_client_live(const control_client *c);

/* When (bt_clock_now's seconds, now given) the client next needs control_client_poll for
 * what goes on without a message sent: a backoff's end; now while a connect is under way
 * or the HelloAck awaited (to be polled every CONTROL_CLIENT_CHECK_S then); HUGE_VAL when
 * nothing is (acknowledged, or no channel). */
double control_client_due(const control_client *c, double now);

/* Reads what arrived without waiting (connecting again if due, above); returns c->stop. */
int control_client_poll(control_client *c);

/* Sends what waits in the outbox and, before the HelloAck, waits for it (connecting again
 * if the connection is dropped meanwhile; on one open connection with everything sent, no
 * later than CONTROL_CLIENT_CLOSE_ACK_S after its connect, repeating the last heartbeat
 * meanwhile, so that a baton run older than this worker, which never acknowledges, does not
 * take the wait for a hang), at most CONTROL_CLIENT_CLOSE_WAIT_S in all, then closes the
 * channel: a worker that ends right after its Fatal, Checkpoint or DONE does not lose them to
 * a connection dropped unread. Says on stderr what was not sent, if anything. */
void control_client_close(control_client *c);

#endif
