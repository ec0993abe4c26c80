/* bt_tcp_accept_capped (stages/util/tcp.c), the accepting of the control channel and the
 * rendezvous store, against a table of its own: a round of many connections searches the
 * table for the oldest connection without the token once, and once more per eviction, not
 * once per accept (which made a start-up of N ranks cost N^2: 131072 ranks, 10^10 entries
 * looked at); the cap and the order of evictions stay what they were, out of descriptors
 * too. At most 100 connections wait to be accepted at once: a listen backlog is 128 where
 * net.core.somaxconn is (kernels before 5.4), and a connect beyond it blocks for minutes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "util/tcp.h"

enum { CONNS = 100, CAP = 1024 };

typedef struct table {
    int fd[CAP];
    double opened[CAP];
    int n;
    int searches, refuse, adopted;
    int evicted[CAP];       /* the fds evicted, in order */
    double evicted_at[CAP]; /* and when each was opened */
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
    t->evicted_at[t->n_evicted] = t->opened[i];
    t->evicted[t->n_evicted++] = t->fd[i];
    close(t->fd[i]);
    t->fd[i] = t->fd[t->n - 1], t->opened[i] = t->opened[t->n - 1];
    t->n--;
}

static int t_adopt(void *ctx, int fd, double now) {
    table *t = ctx;
    if (t->refuse || t->n == CAP) return close(fd), -1;
    t->fd[t->n] = fd, t->opened[t->n++] = now;
    t->adopted++;
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

/* The soft open-files limit lowered to what is open, every descriptor below it taken:
 * the next accept fails with EMFILE until one is closed. */
static void t_use_every_fd(int some_fd) {
    int top = 0;
    for (int f = 0; f < 4096; f++)
        if (fcntl(f, F_GETFD) != -1) top = f;
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = (rlim_t)top + 1;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    while (dup(some_fd) >= 0) {
    }
    CHECK(errno == EMFILE);
}

/* Out of descriptors: with no connection to close, accepting pauses; with some, each
 * accept that fails evicts the oldest without the token (any age: those opened before in
 * their order, then those accepted in this round, there being nothing else to free), the
 * table searched once before each eviction and once after, and every queued connection
 * is taken. In this process's own descriptor table: a child's. */
static void check_out_of_fds_child(void) {
    static table t, none;
    static int clients[40], one[1], old[10];
    int lfd = t_listen(40, clients), lfd1 = t_listen(1, one);
    for (int i = 0; i < 10; i++) { /* opened 10.0, 9.0, ... 1.0: the last is the oldest */
        old[i] = dup(clients[0]);
        t.fd[t.n] = old[i], t.opened[t.n++] = 10.0 - i;
    }
    t_use_every_fd(lfd);
    double resume = 0;
    bt_tcp_conns c = {&none, t_oldest, t_evict, t_adopt};
    bt_tcp_accept_capped(lfd1, 100, &c, 100.0, &resume);
    CHECK(none.n == 0 && none.n_evicted == 0 && none.searches == 2);
    CHECK(resume == 100.0 + BT_TCP_ACCEPT_PAUSE_S);
    resume = 0, c.ctx = &t;
    bt_tcp_accept_capped(lfd, 100, &c, 100.0, &resume);
    CHECK(resume == 0 && t.adopted == 40 && t.n + t.n_evicted == 50 && t.n_evicted >= 10);
    for (int i = 0; i < t.n_evicted; i++)
        CHECK(t.evicted_at[i] == (i < 10 ? 1.0 + i : 100.0));
    if (t.searches != 2 * t.n_evicted + 1)
        fprintf(stderr, "out of fds: %d searches for %d evictions\n", t.searches, t.n_evicted);
    CHECK(t.searches == 2 * t.n_evicted + 1);
}

static void check_out_of_fds(void) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        check_out_of_fds_child();
        _exit(check_status()); /* no exit handlers: they may want a descriptor */
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
    check_round();
    check_evictions();
    check_refused();
    check_out_of_fds();
    return check_status();
}
