/* Shared by the control_*.c files; not for callers. */
#ifndef BATON_CONTROL_INTERNAL_H
#define BATON_CONTROL_INTERNAL_H

#include "control.pb-c.h"
#include "control_server.h"

struct control_conn {
    int fd;
    int rank; /* -1 until a good Hello; then the rank it speaks for */
    double opened;
    uint8_t *buf; /* bytes received and not yet decoded */
    size_t len, cap;
};

/* Applies one decoded message from connection i. Returns 0, or -1 when the connection
 * must be closed (bad Hello, anything before a good Hello). */
int control_apply(control_server *cs, size_t i, const Baton__Envelope *env, double now);
/* A Metrics message as the sink writes it, stamped with time (unix seconds). */
void control_metrics_from(const Baton__Metrics *m, uint32_t rank, double time, control_metrics *c);
/* The number after key (e.g. ", \"global_step\": ") in one line of metrics.jsonl or
 * valid.jsonl (as control_metrics.c writes them; with the comma, a stage name's escaped
 * quotes never match): 0, or -1 when there is none. */
int control_metrics_line_field(const char *line, const char *key, uint64_t *out);
/* qsort's and bsearch's order of uint64_t values. */
int control_u64_cmp(const void *a, const void *b);
/* Sends env to connection i whole, without waiting: 0; -1 when nothing went (the socket
 * full, the peer gone); -2 when part of it went (the stream is corrupt: close it). Counts
 * a failure in cs->send_failed. */
int control_conn_send(control_server *cs, size_t i, const Baton__Envelope *env);
/* Closes connection i (the last one takes its slot). */
void control_conn_close(control_server *cs, size_t i);

#endif
