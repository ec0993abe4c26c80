/* The Slurm launcher (launch_slurm.h): the allocation, srun's argv and output, probes. */
#define _GNU_SOURCE
#include "launch_slurm.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/fd_close.h"
#include "util/stop_signals.h"

extern char **environ;

/* argv[0] through PATH (before fork: the child may only make async-signal-safe calls). */
static void slurm_which(const char *cmd, char *out, size_t cap) {
    snprintf(out, cap, "%s", cmd);
    const char *path = getenv("PATH");
    if (strchr(cmd, '/') || path == NULL) return;
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char cand[4096];
        snprintf(cand, sizeof cand, "%.*s/%s", (int)n, p, cmd);
        if (n > 0 && access(cand, X_OK) == 0) {
            snprintf(out, cap, "%s", cand);
            return;
        }
        p += n + (p[n] == ':');
    }
}

/* Between fork and exec only async-signal-safe calls. fd_limit: bt_fd_close_limit's. */
static void slurm_child(const char *exe, char *const argv[], int out, int fd_limit) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    bt_stop_signals_child(); /* SIGINT, SIGTERM ignored as baton was started */
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(127);
    bt_fd_close_span(3, ~0U, fd_limit);
    execve(exe, argv, environ);
    _exit(127);
}

/* Where a command's output goes: buf (cap bytes, NUL-terminated); tail: keep the last cap - 1
 * bytes, not the first; max > cap: buf (malloc'd) grows as the output comes, up to max. */
typedef struct {
    char *buf;
    size_t cap, len, max;
    int tail;
} slurm_sink;

/* buf made room for need bytes where it may grow (doubling, at most max; as it was when
 * realloc fails: the output is then cut there). */
static void slurm_sink_grow(slurm_sink *o, size_t need) {
    size_t cap = o->cap;
    while (cap < need && cap < o->max)
        cap = cap > o->max / 2 ? o->max : cap * 2;
    char *b = cap > o->cap ? realloc(o->buf, cap) : NULL;
    if (b) o->buf = b, o->cap = cap;
}

/* Reads what is there, keeping what fits (tail: the last cap - 1 bytes); the read's result
 * (0 at the end). */
static ssize_t slurm_drain(int fd, slurm_sink *o) {
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n <= 0) return n < 0 && errno == EINTR ? 1 : n;
    size_t k = (size_t)n;
    if (o->max > o->cap && o->len + k + 1 > o->cap) slurm_sink_grow(o, o->len + k + 1);
    size_t room = o->cap - 1;
    const char *from = tmp;
    if (o->tail && k > room) from += k - room, k = room;
    if (o->tail && o->len + k > room) { /* drop the oldest */
        size_t drop = o->len + k - room;
        memmove(o->buf, o->buf + drop, o->len - drop);
        o->len -= drop;
    }
    if (k > room - o->len) k = room - o->len;
    memcpy(o->buf + o->len, from, k);
    o->len += k;
    o->buf[o->len] = '\0';
    return n;
}

static int slurm_exec(char *const argv[], slurm_sink *o, double timeout_s);

int launch_slurm_exec(char *const argv[], char *out, size_t cap, double timeout_s) {
    slurm_sink o = {.buf = out, .cap = cap};
    return slurm_exec(argv, &o, timeout_s);
}

int launch_slurm_exec_tail(char *const argv[], char *out, size_t cap, double timeout_s) {
    slurm_sink o = {.buf = out, .cap = cap, .tail = 1};
    return slurm_exec(argv, &o, timeout_s);
}

int launch_slurm_exec_grow(char *const argv[], char **out, size_t max, double timeout_s) {
    slurm_sink o = {.cap = max < 65536 ? max : 65536, .max = max};
    if ((o.buf = malloc(o.cap)) == NULL) {
        *out = NULL;
        return -1;
    }
    int rc = slurm_exec(argv, &o, timeout_s);
    *out = o.buf;
    return rc;
}

static int slurm_exec(char *const argv[], slurm_sink *o, double timeout_s) {
    int p[2];
    char exe[4096];
    o->buf[0] = '\0';
    slurm_which(argv[0], exe, sizeof exe);
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    int fd_limit = bt_fd_close_limit();
    pid_t pid = fork();
    if (pid == 0) slurm_child(exe, argv, p[1], fd_limit);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    double deadline = bt_clock_now() + timeout_s;
    int status = 0, timed_out = 0;
    for (;;) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        double left = deadline - bt_clock_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        int r = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (r > 0 && slurm_drain(p[0], o) <= 0) break; /* the end */
    }
    if (timed_out) kill(pid, SIGKILL);
    close(p[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) return 124;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Splits scontrol's output (kept in s->host_names) into s->hosts: every name whole, or
 * BT_EINVAL with a message (never a list cut short: the run would count hosts it lacks
 * as lost). */
static int slurm_split_hosts(launch_slurm *s, const char *list, size_t len, bt_diag *diag) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += s->host_names[i] == '\n' || i + 1 == len;
    if (n > SLURM_MAX_HOSTS) {
        bt_diag_set(diag, "--launcher slurm: SLURM_JOB_NODELIST '%.200s' names more than %d hosts",
                    list, SLURM_MAX_HOSTS);
        return BT_EINVAL;
    }
    s->hosts = calloc(n ? n : 1, sizeof *s->hosts);
    if (s->hosts == NULL) return BT_ENOMEM;
    for (char *save = NULL, *h = strtok_r(s->host_names, "\n", &save); h;
         h = strtok_r(NULL, "\n", &save)) {
        if (strlen(h) >= SLURM_HOST_MAX) {
            bt_diag_set(diag, "--launcher slurm: host name '%.80s...' is longer than %d bytes", h,
                        SLURM_HOST_MAX - 1);
            return BT_EINVAL;
        }
        s->hosts[s->n_hosts++] = h;
    }
    return 0;
}

/* The allocation's hosts, one per line from `scontrol show hostnames LIST`. */
static int slurm_read_hosts(launch_slurm *s, const char *list, bt_diag *diag) {
    size_t cap = (size_t)SLURM_MAX_HOSTS * SLURM_HOST_MAX; /* pages touched as written */
    if ((s->host_names = malloc(cap)) == NULL) return BT_ENOMEM;
    char *argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
    int rc = launch_slurm_exec(argv, s->host_names, cap, 30);
    if (rc != 0) {
        bt_diag_set(diag,
                    "--launcher slurm: 'scontrol show hostnames %s' failed (status %d): %.300s",
                    list, rc, s->host_names);
        return BT_EINVAL;
    }
    size_t len = strlen(s->host_names);
    if (len + 1 >= cap) {
        bt_diag_set(
            diag, "--launcher slurm: 'scontrol show hostnames %.200s' printed more than %zu bytes",
            list, cap - 2);
        return BT_EINVAL;
    }
    rc = slurm_split_hosts(s, list, len, diag);
    if (rc == 0 && s->n_hosts == 0) {
        bt_diag_set(diag, "--launcher slurm: SLURM_JOB_NODELIST '%s' names no host", list);
        return BT_EINVAL;
    }
    return rc;
}

/* This host's first IPv4 address that is up and not loopback. */
static int slurm_own_address(char *out, size_t cap) {
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa) != 0) return -1;
    int found = -1;
    for (struct ifaddrs *i = ifa; i && found < 0; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
            !(i->ifa_flags & IFF_UP))
            continue;
        const struct sockaddr_in *sa = (const struct sockaddr_in *)i->ifa_addr;
        if (inet_ntop(AF_INET, &sa->sin_addr, out, (socklen_t)cap)) found = 0;
    }
    freeifaddrs(ifa);
    return found;
}

int launch_slurm_check_env(bt_diag *diag) {
    const char *job = getenv("SLURM_JOB_ID"), *list = getenv("SLURM_JOB_NODELIST");
    if (job != NULL && list != NULL && job[0] != '\0' && list[0] != '\0') return 0;
    bt_diag_set(diag, "--launcher slurm: SLURM_JOB_ID and SLURM_JOB_NODELIST are not set: "
                      "run inside an allocation (salloc, sbatch, or 'baton submit')");
    return BT_EINVAL;
}

int launch_slurm_open(launch_slurm *s, const char *listen, const char *token, size_t ranks,
                      bt_diag *diag) {
    memset(s, 0, sizeof *s);
    s->failed_task = -1;
    if (launch_slurm_check_env(diag) != 0) return BT_EINVAL;
    const char *job = getenv("SLURM_JOB_ID"), *list = getenv("SLURM_JOB_NODELIST");
    snprintf(s->job_id, sizeof s->job_id, "%s", job);
    if ((s->nodelist = strdup(list)) == NULL) return BT_ENOMEM;
    int rc = slurm_read_hosts(s, list, diag);
    if (rc != 0) return rc;
    if (listen && listen[0])
        snprintf(s->listen, sizeof s->listen, "%s", listen);
    else if (slurm_own_address(s->listen, sizeof s->listen) != 0) {
        bt_diag_set(diag, "--launcher slurm: this host has no non-loopback IPv4 address to "
                          "listen on; give one with --listen ADDRESS");
        return BT_EINVAL;
    }
    rc = kv_store_open(&s->kv, s->listen, token, ranks, diag);
    s->kv_open = rc == 0;
    return rc;
}

void launch_slurm_close(launch_slurm *s) {
    if (s->kv_open) kv_store_close(&s->kv);
    s->kv_open = 0;
    free(s->hosts);
    free(s->host_names);
    free(s->nodelist);
    s->hosts = NULL, s->host_names = NULL, s->nodelist = NULL, s->n_hosts = 0;
}

const char *launch_slurm_listen(const launch_slurm *s) {
    return s->listen;
}

int launch_slurm_check_nodes(const launch_slurm *s, uint32_t wanted, bt_diag *diag) {
    if (wanted <= (uint32_t)s->n_hosts) return 0;
    bt_diag_set(diag,
                "--launcher slurm: the recipe's cluster wants %u node%s (nodes + spare_nodes) "
                "but allocation %s has %d host%s (SLURM_JOB_NODELIST); ask sbatch/salloc for "
                "--nodes=%u or lower cluster.nodes",
                wanted, wanted == 1 ? "" : "s", s->job_id, s->n_hosts, s->n_hosts == 1 ? "" : "s",
                wanted);
    return BT_EINVAL;
}

/* Appends "prefix value" as one argument; -1 when argv is full or it does not fit. */
static int slurm_arg(launch_slurm *s, int *n, const char *prefix, const char *value) {
    if (*n >= SLURM_MAX_ARGS - 1) return -1;
    int k = snprintf(s->args[*n], sizeof s->args[0], "%s%s", prefix, value);
    if (k < 0 || (size_t)k >= sizeof s->args[0]) return -1;
    s->argv[*n] = s->args[*n];
    (*n)++;
    return 0;
}

static int slurm_arg_num(launch_slurm *s, int *n, const char *prefix, long value) {
    char num[32];
    snprintf(num, sizeof num, "%ld", value);
    return slurm_arg(s, n, prefix, num);
}

/* Writes the hosts of logical nodes idx[0..n) (idx NULL: of every k < n whose flag is
 * set, skipping those beyond the allocation, which have no host to name), one a line, to
 * path (atomically, as the run's own files). The number written, or -1 with a message: a
 * node of idx without a host (never left out: srun would take another), or a write that
 * failed (s->files_err, s->files_at_tmp set). */
static long slurm_hosts_file(launch_slurm *s, const char *path, const uint32_t *idx,
                             const unsigned char *flag, uint32_t n, bt_diag *diag) {
    bt_buf b;
    bt_buf_init(&b);
    long written = 0;
    for (uint32_t k = 0; k < n; k++) {
        uint32_t node = idx ? idx[k] : k;
        if (!idx && (!flag[k] || node >= (uint32_t)s->n_hosts)) continue;
        if (node >= (uint32_t)s->n_hosts) {
            bt_buf_free(&b);
            bt_diag_set(diag, "--launcher slurm: node%u has no host: allocation %s has %d", node,
                        s->job_id, s->n_hosts);
            return -1;
        }
        bt_buf_printf(&b, "%s\n", s->hosts[node]);
        written++;
    }
    int rc = BT_ENOMEM, at_tmp = 0;
    if (!b.oom) rc = ckpt_write_file_atomic_at(path, b.len ? b.data : "", b.len, &at_tmp, diag);
    if (rc != 0) {
        s->files_err = b.oom ? ENOMEM : errno, s->files_at_tmp = at_tmp;
        if (b.oom) bt_diag_set(diag, "--launcher slurm: cannot write %s: out of memory", path);
    }
    bt_buf_free(&b);
    return rc == 0 ? written : -1;
}

long launch_slurm_hosts_file(launch_slurm *s, const char *path, const uint32_t *idx, uint32_t n,
                             bt_diag *diag) {
    return slurm_hosts_file(s, path, idx, NULL, n, diag);
}

/* FILES.hosts (the active nodes' hosts) and FILES.exclude (the excluded ones', removed
 * when none) into hosts and ex ("" when none): 0, or -1 with a message. */
static int slurm_host_files(launch_slurm *s, const char *files, const uint32_t *active,
                            uint32_t n_active, const unsigned char *excluded, uint32_t total,
                            char *hosts, char *ex, size_t cap, bt_diag *diag) {
    const char *dot = strchr(files, '/') ? "" : "./"; /* a '/': srun reads a file */
    int a = snprintf(hosts, cap, "%s%s.hosts", dot, files);
    int b = snprintf(ex, cap, "%s%s.exclude", dot, files);
    if (a < 0 || b < 0 || (size_t)a >= cap || (size_t)b >= cap) {
        bt_diag_set(diag, "--launcher slurm: the path %s.exclude is too long", files);
        return -1;
    }
    uint32_t n_ex = 0;
    for (uint32_t k = 0; k < total; k++)
        n_ex += excluded[k] && k < (uint32_t)s->n_hosts;
    if (slurm_hosts_file(s, hosts, active, NULL, n_active, diag) < 0) return -1;
    if (n_ex == 0) {
        unlink(ex), ex[0] = '\0';
        return 0;
    }
    return slurm_hosts_file(s, ex, NULL, excluded, total, diag) < 0 ? -1 : 0;
}

char **launch_slurm_step_argv(launch_slurm *s, const uint32_t *active, uint32_t n_active,
                              const unsigned char *excluded, uint32_t total, int ntasks,
                              int tasks_per_node, const char *step_name, const char *files,
                              char *const *worker_argv, bt_diag *diag) {
    char hosts[4200], ex[4200];
    s->files_err = s->files_at_tmp = 0;
    if (slurm_host_files(s, files, active, n_active, excluded, total, hosts, ex, sizeof hosts,
                         diag) != 0)
        return NULL;
    snprintf(s->step_name, sizeof s->step_name, "%s", step_name);
    s->failed_task = -1, s->failed_host[0] = s->failure[0] = s->lost_hosts[0] = '\0';
    s->step_refused = 0, s->exit_other = 0, s->killed = 0;
    s->step_id[0] = s->cancel_why[0] = '\0';
    int n = 0, err = 0;
    /* --export=ALL: the workers get baton's environment (BATON_STORE_ADDRESS, PATH),
     * whatever the job's sbatch --export left in SLURM_EXPORT_ENV for its steps */
    static const char *fixed[] = {
        "srun",      "--mpi=pmix",   "--label",     "--kill-on-bad-exit=1", "--distribution=block",
        "--overlap", "--unbuffered", "--export=ALL"};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        err |= slurm_arg(s, &n, "", fixed[i]);
    err |= slurm_arg(s, &n, "--job-name=", step_name);
    err |= slurm_arg_num(s, &n, "--nodes=", (long)n_active);
    err |= slurm_arg_num(s, &n, "--ntasks=", ntasks);
    err |= slurm_arg_num(s, &n, "--ntasks-per-node=", tasks_per_node);
    err |= slurm_arg(s, &n, "--nodelist=", hosts);
    if (ex[0]) err |= slurm_arg(s, &n, "--exclude=", ex);
    for (int i = 0; worker_argv[i] && !err; i++)
        err |= slurm_arg(s, &n, "", worker_argv[i]);
    if (err) {
        bt_diag_set(diag,
                    "--launcher slurm: the srun command line has more than %d arguments or "
                    "one longer than %zu bytes",
                    SLURM_MAX_ARGS - 1, sizeof s->args[0] - 1);
        return NULL;
    }
    s->argv[n] = NULL;
    return s->argv;
}

/* "R: rest" (srun --label, R right-aligned): R, and *rest; -1 when not labelled. */
static int slurm_label(const char *line, size_t len, size_t *rest) {
    size_t i = 0;
    while (i < len && line[i] == ' ')
        i++;
    size_t d = i;
    long r = 0;
    while (i < len && isdigit((unsigned char)line[i]) && r < 1000000)
        r = r * 10 + (line[i++] - '0');
    if (i == d || i >= len || line[i] != ':') return -1;
    i++;
    if (i < len && line[i] == ' ') i++;
    *rest = i;
    return (int)r;
}

/* Whether host is one of s->lost_hosts, whole (node1 is not in "node12,node3"). */
int launch_slurm_lost_has(const launch_slurm *s, const char *host) {
    size_t n = strlen(host);
    for (const char *p = s->lost_hosts; *p;) {
        size_t k = strcspn(p, ",");
        if (k == n && strncmp(p, host, n) == 0) return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

static void slurm_add_lost(launch_slurm *s, const char *host) {
    size_t l = strlen(s->lost_hosts);
    if (!launch_slurm_lost_has(s, host) && l + strlen(host) + 2 < sizeof s->lost_hosts)
        snprintf(s->lost_hosts + l, sizeof s->lost_hosts - l, "%s%s", l ? "," : "", host);
}

/* srun's own report lines: "srun: error: HOST: task(s) N[-M]: WHAT", "srun: error: Node
 * failure on HOST", "srun: error: Task launch for StepId=J.S failed on node HOST: WHY". */
static void slurm_note(launch_slurm *s, const char *line) {
    const char *p = strstr(line, "srun: error: ");
    if (p == NULL) return;
    p += strlen("srun: error: ");
    char host[SLURM_HOST_MAX] = "", what[400] = "";
    int task = -1;
    if (strncmp(p, "Unable to create step", 21) == 0) {
        s->step_refused = 1;
        snprintf(s->failure, sizeof s->failure,
                 "%.400s (does the allocation have --ntasks-per-node=gpus_per_node?)", p);
        return;
    }
    if (sscanf(p, "Node failure on %255s", host) == 1 ||
        sscanf(p, "Task launch for StepId=%*s failed on node %255[^:]", host) == 1) {
        slurm_add_lost(s, host);
        if (s->failure[0] == '\0') snprintf(s->failure, sizeof s->failure, "%s", p);
        return;
    }
    if (sscanf(p, "%255[^:]: task%*[s] %d%*[^:]: %399[^\n]", host, &task, what) == 3 ||
        sscanf(p, "%255[^:]: task %d: %399[^\n]", host, &task, what) == 3) {
        int code = -1;
        if (sscanf(what, "Exited with exit code %d", &code) == 1 && code != 75) s->exit_other = 1;
        if (s->failed_task >= 0) return; /* the first report names the cause */
        s->failed_task = task;
        snprintf(s->failed_host, sizeof s->failed_host, "%s", host);
        snprintf(s->failure, sizeof s->failure, "task %d on %s: %s", task, host, what);
    }
}

void launch_slurm_output(void *arg, int rank, int stream, const char *line, size_t len) {
    launch_slurm *s = arg;
    (void)rank;
    size_t rest = 0;
    int r = slurm_label(line, len, &rest);
    if (r >= 0) {
        s->inner(s->inner_arg, r, stream, line + rest, len - rest);
        return;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    slurm_note(s, buf);
    s->inner(s->inner_arg, -1, stream, line, len);
}

void launch_slurm_wrap(launch_slurm *s, launch_opts *lo, char **argv) {
    s->inner = lo->on_output;
    s->inner_arg = lo->output_arg;
    lo->argv = argv;
    lo->fds_ranks = lo->nprocs;
    lo->fds_per_rank += lo->nprocs > 1; /* its rendezvous-store connection (kv_store.h) */
    lo->nprocs = 1, lo->nnodes = 1, lo->plain = 1;
    lo->on_output = launch_slurm_output;
    lo->output_arg = s;
    lo->on_signal = launch_slurm_signal;
    lo->signal_arg = s;
}

void launch_slurm_describe(const launch_slurm *s, const launch_job *job, char *buf, size_t cap) {
    const launch_rank *rk = job->failed_rank >= 0 ? &job->ranks[job->failed_rank] : NULL;
    char end[128] = "ended";
    if (rk && rk->exited)
        snprintf(end, sizeof end, "exited with status %d", rk->exit_status);
    else if (rk && rk->term_signal)
        snprintf(end, sizeof end, "was killed by signal %d%s", rk->term_signal,
                 rk->signal_from_launcher ? " (sent by baton run)" : "");
    snprintf(buf, cap, "srun step %s (job %s) %s%s%s%s%s", s->step_name, s->job_id, end,
             s->failure[0] ? ": " : "", s->failure, s->lost_hosts[0] ? "; failed nodes: " : "",
             s->lost_hosts);
}

/* srun's words when a step cannot run because the job itself is ending. */
int launch_slurm_job_gone(const char *out) {
    static const char *words[] = {"has expired",    "already completing", "completing or completed",
                                  "Invalid job id", "cancelled",          "CANCELLED",
                                  "revoked"};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (strstr(out, words[i])) return 1;
    return 0;
}

int launch_slurm_job_ending(const launch_slurm *s, char *state, size_t cap) {
    char out[1024], job[64];
    snprintf(job, sizeof job, "--jobs=%s", s->job_id);
    char *argv[] = {"squeue", "--noheader", job, "--format=%T", NULL};
    int rc = launch_slurm_exec(argv, out, sizeof out, 10);
    out[strcspn(out, "\n")] = '\0';
    snprintf(state, cap, "%s", out[0] ? out : "gone");
    if (rc == 0) return out[0] == '\0' || strcmp(out, "RUNNING") != 0;
    return rc != 124 && rc >= 0 && strstr(out, "Invalid job id") != NULL;
}

int launch_slurm_stopped(const launch_slurm *s, const launch_job *job) {
    const launch_rank *rk = job->failed_rank >= 0 ? &job->ranks[job->failed_rank] : NULL;
    return job->cause == LAUNCH_EXITED && rk && rk->exited && rk->exit_status == 75 &&
           !s->exit_other && !s->lost_hosts[0] && !s->step_refused;
}

/* Every step of the job named s->step_name, from `squeue --steps` (tried twice: a busy
 * slurmctld), sent `scancel [--signal=SIG] ID` (sig NULL: cancelled). 0 when each one
 * listed took it; BT_ENOENT when none is listed (not started yet, or ended); BT_EIO when
 * squeue or a scancel failed. Why in s->cancel_why, the step's id in s->step_id where
 * squeue gave it. */
static int slurm_signal_step(launch_slurm *s, const char *sig) {
    char out[16384], job[64], flag[32];
    snprintf(job, sizeof job, "--jobs=%s", s->job_id);
    char *argv[] = {"squeue", "--steps", "--noheader", job, "--format=%i %j", NULL};
    int rc = -1, found = 0, failed = 0;
    for (int t = 0; t < 2 && rc != 0; t++)
        rc = launch_slurm_exec(argv, out, sizeof out, 10);
    if (rc != 0) {
        out[strcspn(out, "\n")] = '\0';
        if (rc == 124)
            snprintf(s->cancel_why, sizeof s->cancel_why,
                     "'squeue --steps %s' timed out (10 s, tried twice)", job);
        else
            snprintf(s->cancel_why, sizeof s->cancel_why,
                     "'squeue --steps %s' failed (status %d, tried twice)%s%.200s", job, rc,
                     out[0] ? ": " : "", out);
        return BT_EIO;
    }
    snprintf(flag, sizeof flag, "--signal=%s", sig ? sig : "");
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char id[64], name[128], buf[512];
        if (sscanf(l, "%63s %127s", id, name) != 2 || strcmp(name, s->step_name) != 0) continue;
        found = 1;
        snprintf(s->step_id, sizeof s->step_id, "%s", id);
        char *cancel[] = {"scancel", "--quiet", sig ? flag : id, sig ? id : NULL, NULL};
        int sc = launch_slurm_exec(cancel, buf, sizeof buf, 10);
        if (sc == 0) continue;
        buf[strcspn(buf, "\n")] = '\0';
        snprintf(s->cancel_why, sizeof s->cancel_why, "'scancel %s%s%s' failed (status %d)%s%.200s",
                 sig ? flag : "", sig ? " " : "", id, sc, buf[0] ? ": " : "", buf);
        failed = 1;
    }
    if (!found)
        snprintf(s->cancel_why, sizeof s->cancel_why, "squeue lists no step named %s in job %s",
                 s->step_name, s->job_id);
    return failed ? BT_EIO : found ? 0 : BT_ENOENT;
}

int launch_slurm_cancel_step(launch_slurm *s, int hard) {
    if (hard && s->killed) return 0;
    int rc = slurm_signal_step(s, hard ? "KILL" : NULL);
    if (rc == BT_ENOENT) rc = 0; /* nothing of it is left */
    if (rc == 0 && hard) s->killed = 1;
    return rc;
}

void launch_slurm_cancel_advice(const launch_slurm *s, char *buf, size_t cap) {
    if (s->step_id[0])
        snprintf(buf, cap, "could not cancel step %s (%s): run 'scancel --signal=KILL %s'",
                 s->step_id, s->cancel_why, s->step_id);
    else
        snprintf(buf, cap,
                 "could not cancel step %s of job %s (%s): find its id with 'squeue --steps "
                 "--jobs=%s' and run 'scancel --signal=KILL ID'",
                 s->step_name, s->job_id, s->cancel_why, s->job_id);
}

int launch_slurm_signal(void *arg, int sig) {
    launch_slurm *s = arg;
    if (sig == SIGTERM) return slurm_signal_step(s, "TERM") == 0;
    if (sig == SIGKILL) launch_slurm_cancel_step(s, 1);
    return 0;
}
