/* The worker's end of the control channel (schema/control.proto; the orchestrator's end
 * is orchestrator/control/control_server.h): one TCP connection per rank, each message a
 * little-endian uint32 length and a serialized baton.Envelope, the first one a Hello with
 * the run's secret token.
 *
 * Training never depends on the channel, nor waits on it: messages the socket cannot take
 * at once (the orchestrator stopped by SIGSTOP or Ctrl-Z, or slow) wait in an outbox, in
 * order, and go out with the next message or poll, and at close (which waits for them at
 * most CONTROL_CLIENT_CLOSE_WAIT_S). An outbox over CONTROL_CLIENT_MAX_QUEUE drops new
 * messages (said once); the last CONTROL_CLIENT_RESERVE bytes of it take only a Fatal, a
 * Checkpoint or the DONE heartbeat, so that those are not dropped behind a backlog of
 * heartbeats.
 *
 * The orchestrator answers a Hello it takes with a HelloAck. Until that comes, everything
 * sent stays in the outbox, and a connection that closes (the orchestrator dropped it
 * before reading the Hello: one of too many connections without one, a reset) is made again
 * after a short backoff (bt_tcp_retry_ms), CONTROL_CLIENT_HELLO_TRIES connections at most,
 * and sent the Hello and the rest again; the checks happen whenever a message is sent and at
 * each poll. A HelloAck late on a connection still open is waited for as long as it takes:
 * baton run may be stopped (SIGSTOP), and a second connection would then deliver what the
 * first one holds twice. Every other failure (cannot connect at first, a send that fails or the
 * orchestrator going away after the HelloAck, the tries spent) closes the channel, is
 * reported once on stderr, and the worker goes on without it. */
#ifndef BATON_CONTROL_CLIENT_H
#define BATON_CONTROL_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "control.pb-c.h"
#include "util/err.h"

#define CONTROL_CLIENT_CONNECT_TIMEOUT_S 5
#define CONTROL_CLIENT_CLOSE_WAIT_S      10
#define CONTROL_CLIENT_MAX_QUEUE         (4u << 20)  /* bytes waiting in the outbox */
#define CONTROL_CLIENT_RESERVE           (64u << 10) /* of it, kept for Fatal and DONE */
#define CONTROL_CLIENT_MAX_FRAME         (1u << 16)  /* the orchestrator sends Stop, HelloAck */
#define CONTROL_CLIENT_HELLO_TRIES       8           /* connections made for one Hello */

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
    double retry_at;
    char address[300]; /* "host:port", for connecting again */
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
void control_client_fatal(control_client *c, int32_t code, const char *message);
/* Rank 0: checkpoint name (step) is committed. */
void control_client_checkpoint(control_client *c, const char *name, uint64_t step);

/* Reads what arrived without waiting (connecting again if due, above); returns c->stop. */
int control_client_poll(control_client *c);

/* Sends what waits in the outbox, waiting for the orchestrator to take it at most
 * CONTROL_CLIENT_CLOSE_WAIT_S, then closes the channel. */
void control_client_close(control_client *c);

#endif
