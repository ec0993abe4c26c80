/* The CPU engine's collectives and point to point (a ring rotation: each rank sends its
 * buffer right and receives the left one's): Gloo over TCP against shared memory
 * (worker/comm/comm_shm.h), side by side on this host (bench/README.md, "Collectives").
 *
 *   bench_comm [--ranks N] [--reps R] [--rounds K] [--sizes "16 1024 65536 1048576"]
 *
 * Each round runs N processes per backend, the backends alternating, rounds times; each
 * rank 0 times R back-to-back operations of every kind and size (fewer above 4096 floats;
 * after a warm-up and a barrier). The table gives the median over rounds of the time per operation
 * and the ratio Gloo / shared memory. Not a test: it asserts nothing but that the results are
 * right. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_shm.h"

enum { OPS = 6, MAX_SIZES = 8, MAX_ROUNDS = 15 };
static const char *const op_names[OPS] = {"allreduce", "allgather", "reduce-scatter",
                                          "alltoall",  "broadcast", "sendrecv"};

typedef struct bench_cfg {
    int ranks, reps, rounds, nsizes;
    size_t sizes[MAX_SIZES];
} bench_cfg;

/* [backend][round][op][size] microseconds per operation, written by each job's rank 0. */
typedef double results[2][MAX_ROUNDS][OPS][MAX_SIZES];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run_op(comm *c, int op, float *x, float *y, size_t n) {
    switch (op) {
    case 0:
        return comm_allreduce(c, x, y, n, COMM_F32, COMM_SUM, NULL);
    case 1:
        return comm_allgather(c, x, y, n, COMM_F32, NULL);
    case 2:
        return comm_reduce_scatter(c, x, y, n, COMM_F32, COMM_SUM, NULL);
    case 3:
        return comm_alltoall(c, x, y, n, COMM_F32, NULL);
    case 4:
        return comm_broadcast(c, x, n, COMM_F32, 0, NULL);
    default: {
        int r = comm_rank(c), w = comm_size(c);
        return comm_sendrecv(c, x, (r + 1) % w, y, (r + w - 1) % w, n, COMM_F32, 9, NULL);
    }
    }
}

/* The sums must be right: every rank holds x = rank + 1, so an all-reduce gives
 * size (size + 1) / 2 everywhere. */
static int check_allreduce(const float *y, size_t n, int w) {
    for (size_t i = 0; i < n; i++)
        if (y[i] != (float)(w * (w + 1) / 2)) return 1;
    return 0;
}

/* R operations up to 4096 floats, fewer for larger ones (at least 5), so that a default
 * run takes about a minute. */
static int reps_for(const bench_cfg *cfg, size_t n) {
    size_t r = n <= 4096 ? (size_t)cfg->reps : (size_t)cfg->reps * 4096 / n;
    return r < 5 ? 5 : (int)r;
}

static int child(const bench_cfg *cfg, int rank, const char *dir, const char *want, double *out) {
    comm_bootstrap bs = {.rank = rank,
                         .size = cfg->ranks,
                         .store_dir = dir,
                         .prefix = "bench",
                         .timeout_ms = 60000,
                         .name = "bench"};
    bt_diag d;
    bt_diag_init(&d);
    comm *c;
    if (comm_cpu_init(&c, &bs, &d) != 0) {
        fprintf(stderr, "rank %d: %s\n", rank, d.msg);
        return 1;
    }
    if (strcmp(comm_backend(c), want) != 0) {
        fprintf(stderr, "rank %d: backend %s, expected %s\n", rank, comm_backend(c), want);
        return 1;
    }
    size_t most = cfg->sizes[cfg->nsizes - 1] * (size_t)cfg->ranks;
    float *x = malloc(most * sizeof *x), *y = malloc(most * sizeof *y);
    if (x == NULL || y == NULL) return 1;
    int rc = 0;
    for (int op = 0; rc == 0 && op < OPS; op++)
        for (int k = 0; rc == 0 && k < cfg->nsizes; k++) {
            size_t n = cfg->sizes[k];
            for (size_t i = 0; i < most; i++)
                x[i] = (float)(rank + 1);
            for (int i = 0; rc == 0 && i < 3; i++)
                rc = run_op(c, op, x, y, n);
            if (rc == 0 && op == 0 && check_allreduce(y, n, cfg->ranks)) rc = -1;
            rc = rc ? rc : comm_barrier(c, NULL);
            double t0 = now_s();
            int reps = reps_for(cfg, n);
            for (int i = 0; rc == 0 && i < reps; i++)
                rc = run_op(c, op, x, y, n);
            if (rank == 0) out[op * MAX_SIZES + k] = (now_s() - t0) / reps * 1e6;
        }
    if (rc != 0) fprintf(stderr, "rank %d: %s\n", rank, rc == -1 ? "wrong sum" : comm_error(c));
    comm_destroy(c);
    free(x);
    free(y);
    return rc != 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(path);
}

/* One job: cfg->ranks processes on backend b (0 Gloo, 1 shared memory). */
static int job(const bench_cfg *cfg, int b, double *out) {
    char dir[] = "/tmp/baton-bench-comm-XXXXXX";
    if (mkdtemp(dir) == NULL) return 1;
    setenv("BATON_COMM_SHM", b ? "1" : "0", 1);
    pid_t pids[64];
    for (int r = 0; r < cfg->ranks; r++)
        if ((pids[r] = fork()) == 0) _exit(child(cfg, r, dir, b ? "shm" : "gloo", out));
    int bad = 0;
    for (int r = 0; r < cfg->ranks; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) bad = 1;
    return bad;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(results *res, int b, int rounds, int op, int k) {
    double v[MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        v[r] = (*res)[b][r][op][k];
    qsort(v, (size_t)rounds, sizeof v[0], cmp_double);
    return v[rounds / 2];
}

static void print_table(const bench_cfg *cfg, results *res) {
    printf("%d ranks, %d operations each (fewer above 4096 floats), median of %d rounds "
           "(microseconds per operation)\n",
           cfg->ranks, cfg->reps, cfg->rounds);
    printf("%-15s %10s %12s %12s %10s\n", "operation", "floats", "gloo (TCP)", "shm", "gloo/shm");
    for (int op = 0; op < OPS; op++)
        for (int k = 0; k < cfg->nsizes; k++) {
            double g = median(res, 0, cfg->rounds, op, k), s = median(res, 1, cfg->rounds, op, k);
            printf("%-15s %10zu %12.1f %12.1f %9.1fx\n", op_names[op], cfg->sizes[k], g, s, g / s);
        }
}

static int parse_args(int argc, char **argv, bench_cfg *cfg) {
    *cfg = (bench_cfg){
        .ranks = 4, .reps = 200, .rounds = 3, .nsizes = 4, .sizes = {16, 1024, 65536, 1048576}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || v == NULL) return 1;
        if (strcmp(a, "--ranks") == 0)
            cfg->ranks = atoi(v);
        else if (strcmp(a, "--reps") == 0)
            cfg->reps = atoi(v);
        else if (strcmp(a, "--rounds") == 0)
            cfg->rounds = atoi(v);
        else if (strcmp(a, "--sizes") == 0) {
            char *end, *p = (char *)v;
            for (cfg->nsizes = 0; cfg->nsizes < MAX_SIZES; cfg->nsizes++, p = end) {
                unsigned long long n = strtoull(p, &end, 10);
                if (end == p) break;
                cfg->sizes[cfg->nsizes] = (size_t)n;
            }
        } else
            return 1;
        i++;
    }
    int sorted = cfg->nsizes > 0 && cfg->sizes[0] > 0;
    for (int k = 1; k < cfg->nsizes; k++)
        sorted &= cfg->sizes[k] >= cfg->sizes[k - 1];
    return !(cfg->ranks >= 2 && cfg->ranks <= 64 && cfg->reps > 0 && cfg->rounds > 0 &&
             cfg->rounds <= MAX_ROUNDS && sorted);
}

int main(int argc, char **argv) {
    bench_cfg cfg;
    if (parse_args(argc, argv, &cfg) != 0) {
        int help = argc == 2 && strcmp(argv[1], "--help") == 0;
        fprintf(help ? stdout : stderr,
                "usage: %s [--ranks N (2-64, 4)] [--reps R (200)] [--rounds K (1-15, 3)] "
                "[--sizes \"16 1024 65536 1048576\" (floats, ascending)]\n",
                argv[0]);
        return help ? 0 : 2;
    }
    results *res =
        mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (res == MAP_FAILED) return 1;
    for (int r = 0; r < cfg.rounds; r++)
        for (int b = 0; b < 2; b++) {
            fprintf(stderr, "round %d/%d: %s\n", r + 1, cfg.rounds, b ? "shared memory" : "gloo");
            if (job(&cfg, b, &(*res)[b][r][0][0]) != 0) return 1;
        }
    print_table(&cfg, res);
    return 0;
}
