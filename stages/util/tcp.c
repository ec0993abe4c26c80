#define _GNU_SOURCE /* accept4 */
#include "util/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

int bt_tcp_listen(const char *host, const char *what, int *fd_out, char *address, size_t cap,
                  bt_diag *diag) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    int gai = getaddrinfo(host, "0", &hints, &ai);
    if (gai != 0) {
        bt_diag_set(diag, "%s: cannot resolve '%s': %s", what, host, gai_strerror(gai));
        return BT_EINVAL;
    }
    /* the backlog: as long as the kernel allows (net.core.somaxconn), for thousands of
     * ranks connecting at once (a connection beyond waits for a SYN resent, 1 s and more) */
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol),
        one = 1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
             bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0 &&
             getsockname(fd, (struct sockaddr *)&ss, &sl) == 0;
    int v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (!ok) {
        bt_diag_set(diag, "%s: cannot listen on %s: %s", what, host, strerror(errno));
        if (fd >= 0) close(fd);
        return BT_EIO;
    }
    unsigned port = v6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    snprintf(address, cap, v6 ? "[%s]:%u" : "%s:%u", host, port);
    *fd_out = fd;
    return 0;
}

size_t bt_tcp_unauth_cap(void) {
    struct rlimit rl;
    rlim_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (soft == RLIM_INFINITY || soft > 1024) soft = 1024;
    size_t cap = (size_t)soft / 16;
    return cap < 4 ? 4 : cap > 64 ? 64 : cap;
}

size_t bt_tcp_unauth_limit(size_t expected) {
    return expected + bt_tcp_unauth_cap();
}

int bt_tcp_accept(int listen_fd, int *out_of_fds) {
    *out_of_fds = 0;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        *out_of_fds = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

void bt_tcp_accept_capped(int listen_fd, size_t max_unauth, const bt_tcp_conns *t, double now,
                          double *resume) {
    /* One search of the table a round, and one more after each eviction: a connection
     * taken now is newer than `old` (opened at now, not before), so only an eviction
     * changes which is the oldest; n_unauth counts those taken. */
    size_t n_unauth;
    long old = t->oldest_unauth(t->ctx, now, &n_unauth);
    for (size_t k = 0; k < max_unauth; k++) {
        if (n_unauth >= max_unauth && old < 0) return; /* all accepted just now: read first */
        int out_of_fds, fd = bt_tcp_accept(listen_fd, &out_of_fds);
        if (fd < 0 && out_of_fds && (old = t->oldest_unauth(t->ctx, INFINITY, &n_unauth)) >= 0) {
            t->evict(t->ctx, old);
            old = t->oldest_unauth(t->ctx, now, &n_unauth);
            continue;
        }
        if (fd < 0) {
            if (out_of_fds) *resume = now + BT_TCP_ACCEPT_PAUSE_S;
            return; /* EAGAIN, or a connection that went away meanwhile */
        }
        if (n_unauth >= max_unauth) { /* only now that a new one is in hand */
            t->evict(t->ctx, old);
            old = t->oldest_unauth(t->ctx, now, &n_unauth);
        }
        n_unauth += t->adopt(t->ctx, fd, now) == 0;
    }
}

int bt_tcp_sendv(int fd, struct iovec *iov, int n, int wait_ms) {
    for (;;) {
        while (n > 0 && iov->iov_len == 0)
            iov++, n--;
        if (n == 0) return 0;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, wait_ms) <= 0) return -1;
            continue;
        }
        if (w <= 0) return -1;
        for (size_t done = (size_t)w; done > 0; iov++, n--) {
            size_t k = done < iov->iov_len ? done : iov->iov_len;
            iov->iov_base = (char *)iov->iov_base + k, iov->iov_len -= k, done -= k;
            if (iov->iov_len > 0) break;
        }
    }
}

/* A random number for the retry jitter: from the kernel (getrandom), else the clock's
 * nanoseconds and the pid. Not the pid alone: ranks in containers often share one. */
static unsigned tcp_jitter(void) {
    unsigned r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    r = (unsigned)ts.tv_nsec ^ (unsigned)ts.tv_sec * 2654435761u ^ (unsigned)getpid() << 16;
    return rand_r(&r);
}

double bt_tcp_retry_ms(int tries) {
    double pause = 20.0;
    for (int k = 1; k < tries && pause < 1000.0; k++)
        pause *= 2;
    pause = pause < 1000.0 ? pause : 1000.0;
    return pause + (double)(tcp_jitter() % (unsigned)pause);
}

int bt_token_equal(const void *given, size_t n, const char *secret) {
    const unsigned char *a = given;
    size_t ns = strlen(secret);
    unsigned char diff = (unsigned char)(n != ns);
    for (size_t i = 0; i < ns; i++)
        diff |= (unsigned char)((i < n ? a[i] : 0) ^ (unsigned char)secret[i]);
    return diff == 0;
}
