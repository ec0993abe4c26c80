/* Shared by control_server.c and control_apply.c; not for callers. */
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
/* Closes connection i (the last one takes its slot). */
void control_conn_close(control_server *cs, size_t i);

#endif
