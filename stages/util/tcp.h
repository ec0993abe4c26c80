/* A listening TCP socket on an ephemeral port, shared by the control channel and the
 * rendezvous store. */
#ifndef BATON_TCP_H
#define BATON_TCP_H

#include <stddef.h>

#include "util/err.h"

/* Listens on host (a numeric address or name) at a port the kernel picks; *fd is the
 * socket (close-on-exec), address gets "host:port" ("[host]:port" for IPv6). what names
 * the listener in errors ("control channel"). 0, BT_EINVAL (host not resolved) or BT_EIO. */
int bt_tcp_listen(const char *host, const char *what, int *fd, char *address, size_t cap,
                  bt_diag *diag);

#endif
