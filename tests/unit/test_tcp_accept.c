/* bt_tcp_accept_capped (stages/util/tcp.c), the accepting of the control channel and the
 * rendezvous store, against a table of its own: a round of many connections searches the
 * table for the oldest connection without the token once, and once more per eviction, not
 * once per accept (which made a start-up of N ranks cost N^2: 131072 ranks, 10^10 entries
 * looked at); the cap and the order of evictions stay what they were. */
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "util/tcp.h"

enum { CONNS = 300, CAP = 1024 };

typedef struct table {
    int fd[CAP];
    double opened[CAP];
    int n;
    int searches, refuse;
    int evicted[CAP]; /* the fds evicted, in order */
    int n_evicted;
} table;

static long t_oldest(void *ctx, double before, size_t *n) {
    table *t = ctx;
    long at = -1;
    t->searches++;
    *n = (size_t)t->n; /* none here shows the token */
    for (int i = 0; i < t->n; i++)
        if (t->opened[i] < before && (at < 0 || t->opened[i] < t->opened[at])) at = i;
    return at;
}

static void t_evict(void *ctx, long i) {
    table *t = ctx;
    t->evicted[t->n_evicted++] = t->fd[i];
    close(t->fd[i]);
    t->fd[i] = t->fd[t->n - 1], t->opened[i] = t->opened[t->n - 1];
    t->n--;
}

static int t_adopt(void *ctx, int fd, double now) {
    table *t = ctx;
    if (t->refuse || t->n == CAP) return close(fd), -1;
    t->fd[t->n] = fd, t->opened[t->n++] = now;
    return 0;
}

static int t_connect(const char *address) {
    const char *colon = strrchr(address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) close(fd), fd = -1;
    return fd;
}

/* n clients connected to a fresh listener: their fds in out. */
static int t_listen(int n, int *out) {
    char address[300];
    int lfd = -1;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(bt_tcp_listen("127.0.0.1", "test", &lfd, address, sizeof address, &d) == 0);
    for (int i = 0; i < n; i++)
        out[i] = t_connect(address);
    return lfd;
}

static void t_close(table *t, int lfd, int *clients, int n) {
    for (int i = 0; i < t->n; i++)
        close(t->fd[i]);
    for (int i = 0; i < n; i++)
        if (clients[i] >= 0) close(clients[i]);
    close(lfd);
}

/* CONNS queued, room for all: every one taken in one round, the table searched once. */
static void check_round(void) {
    static table t;
    static int clients[CONNS];
    memset(&t, 0, sizeof t);
    int lfd = t_listen(CONNS, clients);
    double resume = 0;
    bt_tcp_conns c = {&t, t_oldest, t_evict, t_adopt};
    bt_tcp_accept_capped(lfd, CAP, &c, 100.0, &resume);
    CHECK(t.n == CONNS && t.n_evicted == 0 && resume == 0);
    if (t.searches > 1) fprintf(stderr, "round: %d searches for %d accepts\n", t.searches, t.n);
    CHECK(t.searches == 1);
    t_close(&t, lfd, clients, CONNS);
}

/* 50 older connections without the token, the cap 50, 80 queued: each of the first 50
 * accepts evicts the oldest older one (in the order they were opened), none of those
 * accepted now; the round stops at the cap's number of accepts. */
static void check_evictions(void) {
    static table t;
    static int clients[80], old[50];
    memset(&t, 0, sizeof t);
    int lfd = t_listen(80, clients);
    for (int i = 0; i < 50; i++) { /* opened 50.0, 49.0, ... 1.0: the last is the oldest */
        old[i] = dup(clients[0]);
        t.fd[t.n] = old[i], t.opened[t.n++] = 50.0 - i;
    }
    double resume = 0;
    bt_tcp_conns c = {&t, t_oldest, t_evict, t_adopt};
    bt_tcp_accept_capped(lfd, 50, &c, 100.0, &resume);
    CHECK(t.n == 50 && t.n_evicted == 50);
    for (int i = 0; i < 50 && i < t.n_evicted; i++)
        CHECK(t.evicted[i] == old[49 - i]);
    for (int i = 0; i < t.n; i++)
        CHECK(t.opened[i] == 100.0);
    CHECK(t.searches == 1 + 50);
    /* a second round at once: the 50 accepted then are not evicted for the 30 left */
    bt_tcp_accept_capped(lfd, 50, &c, 100.0, &resume);
    CHECK(t.n == 50 && t.n_evicted == 50);
    t_close(&t, lfd, clients, 80);
}

/* Refused by the table (full): not counted as kept, so the cap is not reached by them. */
static void check_refused(void) {
    static table t;
    static int clients[20];
    memset(&t, 0, sizeof t);
    int lfd = t_listen(20, clients);
    t.refuse = 1;
    double resume = 0;
    bt_tcp_conns c = {&t, t_oldest, t_evict, t_adopt};
    bt_tcp_accept_capped(lfd, 10, &c, 100.0, &resume);
    CHECK(t.n == 0 && t.n_evicted == 0 && t.searches == 1);
    t.refuse = 0; /* the 10 left are taken in the next round */
    bt_tcp_accept_capped(lfd, 10, &c, 101.0, &resume);
    CHECK(t.n == 10 && t.n_evicted == 0);
    t_close(&t, lfd, clients, 20);
}

int main(void) {
    check_round();
    check_evictions();
    check_refused();
    return check_status();
}
