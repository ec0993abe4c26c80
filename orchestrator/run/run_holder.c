#define _GNU_SOURCE /* pwrite */
#include "run_holder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "util/buf.h"
#include "util/shquote.h"

#define RUN_HOLDER_LINE 512

/* This host's name, each character a shell or a record could misread as '?'. */
static void run_holder_host(char *out, size_t cap) {
    if (gethostname(out, cap) != 0) snprintf(out, cap, "?");
    out[cap - 1] = '\0';
    for (char *p = out; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_'))
            *p = '?';
    if (out[0] == '\0') snprintf(out, cap, "?");
}

/* This process's PID namespace's inode (readlink /proc/self/ns/pid: "pid:[4026531836]"),
 * 0 when it cannot be read. */
static unsigned long long run_holder_pidns(void) {
    char link[64];
    ssize_t n = readlink("/proc/self/ns/pid", link, sizeof link - 1);
    unsigned long long ino = 0;
    if (n <= 0) return 0;
    link[n] = '\0';
    return sscanf(link, "pid:[%llu]", &ino) == 1 ? ino : 0;
}

/* h as its record's line (run_holder.h), its length; 0 when it does not fit. */
static size_t run_holder_format(const run_holder *h, char *out, size_t cap) {
    int n = snprintf(out, cap, "pid=%ld host=%s since=%lld command=%s recipe_crc32c=%08" PRIx32,
                     (long)h->pid, h->host, h->since, h->command, h->recipe_crc32c);
    if (n > 0 && (size_t)n < cap && h->pidns)
        n += snprintf(out + n, cap - (size_t)n, " pidns=%llu", h->pidns);
    if (n > 0 && (size_t)n < cap && h->stopping)
        n += snprintf(out + n, cap - (size_t)n, " stopping=%lld", h->stopping);
    if (n <= 0 || (size_t)n >= cap) return 0;
    uint32_t crc = crc32c_update(0, out, (size_t)n);
    int m = snprintf(out + n, cap - (size_t)n, " crc32c=%08" PRIx32 "\n", crc);
    return m > 0 && (size_t)m < cap - (size_t)n ? (size_t)n + (size_t)m : 0;
}

/* value, a whole decimal (base 10, signed) or hex (16) number, into *out: 1, or 0. */
static int run_holder_num(const char *value, int base, long long *out) {
    char *end;
    errno = 0;
    if (base == 16 && (value[0] == '-' || value[0] == '+')) return 0;
    *out = base == 16 ? (long long)strtoull(value, &end, 16) : strtoll(value, &end, 10);
    return value[0] != '\0' && *end == '\0' && errno == 0;
}

/* One key=value field of a record into *h (unknown keys ignored): 0 when a known one is
 * malformed; *seen gets a bit per required field. */
static int run_holder_field(char *field, run_holder *h, int *seen) {
    char *value = strchr(field, '=');
    long long x = 0;
    if (value == NULL) return 0;
    *value++ = '\0';
    if (strcmp(field, "host") == 0 || strcmp(field, "command") == 0) {
        int host = field[0] == 'h';
        size_t cap = host ? sizeof h->host : sizeof h->command;
        if (value[0] == '\0' || strlen(value) >= cap) return 0;
        memcpy(host ? h->host : h->command, value, strlen(value) + 1);
        *seen |= host ? 2 : 8;
        return 1;
    }
    int hex = strcmp(field, "recipe_crc32c") == 0;
    if (!hex && strcmp(field, "pid") != 0 && strcmp(field, "since") != 0 &&
        strcmp(field, "pidns") != 0 && strcmp(field, "stopping") != 0)
        return 1; /* a field of a later baton's */
    if (!run_holder_num(value, hex ? 16 : 10, &x)) return 0;
    if (strcmp(field, "pid") == 0 && x > 0 && x <= INT32_MAX)
        h->pid = (pid_t)x, *seen |= 1;
    else if (strcmp(field, "since") == 0)
        h->since = x, *seen |= 4;
    else if (hex && x >= 0 && x <= (long long)UINT32_MAX)
        h->recipe_crc32c = (uint32_t)x, *seen |= 16;
    else if (strcmp(field, "pidns") == 0)
        h->pidns = (unsigned long long)x;
    else if (strcmp(field, "stopping") == 0 && x > 0)
        h->stopping = x;
    else if (strcmp(field, "pid") == 0 || hex || strcmp(field, "stopping") == 0)
        return 0;
    return 1;
}

/* The record of line (text, n bytes): 1 parsed into *h, 0 not a whole, valid record. */
static int run_holder_parse(const char *text, size_t n, run_holder *h) {
    char line[RUN_HOLDER_LINE];
    const char *end = memchr(text, '\n', n);
    if (end == NULL || (size_t)(end - text) >= sizeof line) return 0;
    memcpy(line, text, (size_t)(end - text));
    line[end - text] = '\0';
    char *tail = strstr(line, " crc32c=");
    unsigned crc;
    char extra;
    if (tail == NULL || sscanf(tail, " crc32c=%8x%c", &crc, &extra) != 1) return 0;
    if (crc32c_update(0, line, (size_t)(tail - line)) != crc) return 0;
    *tail = '\0';
    memset(h, 0, sizeof *h);
    int seen = 0;
    char *save = NULL;
    for (char *f = strtok_r(line, " ", &save); f != NULL; f = strtok_r(NULL, " ", &save))
        if (!run_holder_field(f, h, &seen)) return 0;
    return seen == 31;
}

/* The record in the lock file open as fd: 1, or 0 (none, or not a valid line). */
static int run_holder_read_fd(int fd, run_holder *h) {
    char text[RUN_HOLDER_LINE];
    ssize_t n = pread(fd, text, sizeof text, 0);
    return n > 0 && run_holder_parse(text, (size_t)n, h);
}

/* h written over the record in fd: the new line first, then what an older, longer one
 * left after it cut: a reader sees the old record, the new one, or a torn line that fails
 * its CRC (and reads again). */
static void run_holder_write(int fd, const run_holder *h) {
    char line[RUN_HOLDER_LINE];
    size_t len = run_holder_format(h, line, sizeof line);
    if (len > 0 && pwrite(fd, line, len, 0) == (ssize_t)len) (void)!ftruncate(fd, (off_t)len);
}

void run_holder_note(int fd, const char *command, const char *recipe, size_t n) {
    run_holder h = {.pid = getpid(), .since = (long long)time(NULL)}, had;
    run_holder_host(h.host, sizeof h.host);
    snprintf(h.command, sizeof h.command, "%s", command);
    h.recipe_crc32c = crc32c_update(0, recipe, n);
    h.pidns = run_holder_pidns();
    /* the same process (a continuation in a fresh process keeps its pid): its start kept */
    if (run_holder_read_fd(fd, &had) && had.pid == h.pid && strcmp(had.host, h.host) == 0)
        h.since = had.since;
    run_holder_write(fd, &h);
}

void run_holder_stopping(int fd) {
    run_holder h;
    if (fd < 0 || !run_holder_read_fd(fd, &h) || h.pid != getpid() || h.stopping) return;
    h.stopping = (long long)time(NULL);
    run_holder_write(fd, &h);
}

int run_holder_read(const char *run_dir_path, run_holder *h) {
    char path[4200];
    snprintf(path, sizeof path, "%s/lock", run_dir_path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW); /* a FIFO: no wait */
    if (fd < 0) return 0;
    struct stat st;
    int got = 0;
    struct timespec nap = {0, 2 * 1000 * 1000};
    /* a line read while it is written may be torn: its CRC fails, and it is read again */
    for (int tries = 0;
         !got && tries < 5 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
         tries++) {
        got = run_holder_read_fd(fd, h);
        if (!got) nanosleep(&nap, NULL);
    }
    close(fd);
    return got;
}

int run_holder_here(const run_holder *h) {
    char host[256];
    run_holder_host(host, sizeof host);
    return strcmp(host, h->host) == 0;
}

run_holder_state run_holder_find(const char *run_dir_path, run_holder *h) {
    if (!run_holder_read(run_dir_path, h)) return RUN_HOLDER_NONE;
    if (!run_holder_here(h)) return RUN_HOLDER_OTHER_HOST;
    unsigned long long ns = run_holder_pidns();
    if (h->pidns && ns && h->pidns != ns) return RUN_HOLDER_OTHER_NS;
    /* a record whose process is gone, or does not hold the lock file, is stale: the
     * holder now has not written its own yet, or is a baton that writes none (and that
     * left a killed one's record in place) */
    int alive = kill(h->pid, 0) == 0 ? 1 : errno == ESRCH ? 0 : -1; /* -1: EPERM */
    if (alive == 0) return RUN_HOLDER_GONE;
    switch (run_holder_has_lock(h, run_dir_path)) {
    case 1:
        return RUN_HOLDER_HELD;
    case 0: /* another user's process, alive, has no /proc/PID where /proc is hidepid=2 */
        return alive < 0 ? RUN_HOLDER_UNVERIFIED : RUN_HOLDER_NOT_HOLDER;
    default:
        return RUN_HOLDER_UNVERIFIED;
    }
}

int run_holder_has_lock(const run_holder *h, const char *run_dir_path) {
    char path[4200], fds[64];
    struct stat lock, st;
    snprintf(path, sizeof path, "%s/lock", run_dir_path);
    if (stat(path, &lock) != 0) return -1;
    snprintf(fds, sizeof fds, "/proc/%ld/fd", (long)h->pid);
    DIR *dh = opendir(fds);
    if (dh == NULL) return errno == ENOENT && access("/proc/self/fd", F_OK) == 0 ? 0 : -1;
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(dh)) != NULL) {
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", fds, de->d_name);
        found = stat(path, &st) == 0 && st.st_dev == lock.st_dev && st.st_ino == lock.st_ino;
    }
    closedir(dh);
    return found;
}

/* t (unix seconds, local time) as fmt into out; "?" when it is none. */
static void run_holder_time(long long t, const char *fmt, char *out, size_t cap) {
    time_t tt = (time_t)t;
    struct tm tm;
    snprintf(out, cap, "?");
    if (localtime_r(&tt, &tm) != NULL) strftime(out, cap, fmt, &tm);
}

void run_holder_stop_time(const run_holder *h, char *out, size_t cap) {
    run_holder_time(h->stopping, "%H:%M:%S", out, cap);
}

void run_holder_words(const run_holder *h, run_holder_state s, char *out, size_t cap) {
    char when[64], stop[64] = "";
    run_holder_time(h->since, "%Y-%m-%d %H:%M:%S", when, sizeof when);
    if (h->stopping) {
        char at[32];
        run_holder_stop_time(h, at, sizeof at);
        snprintf(stop, sizeof stop, ", stopping since %s", at);
    }
    if (s == RUN_HOLDER_OTHER_NS)
        snprintf(out, cap, "baton %s in another PID namespace (a container) on %s, since %s%s",
                 h->command, h->host, when, stop);
    else if (s == RUN_HOLDER_UNVERIFIED)
        snprintf(out, cap,
                 "baton %s pid %ld on %s, since %s%s (recorded; not verified: /proc/%ld/fd "
                 "cannot be read)",
                 h->command, (long)h->pid, h->host, when, stop, (long)h->pid);
    else
        snprintf(out, cap, "baton %s pid %ld on %s, since %s%s", h->command, (long)h->pid, h->host,
                 when, stop);
}

/* RUN_DIR/job_id (baton submit's Slurm job id: digits, '_') into out; "" when none. */
static void run_holder_job(const char *run_dir_path, char *out, size_t cap) {
    char path[4200];
    snprintf(path, sizeof path, "%s/job_id", run_dir_path);
    FILE *f = fopen(path, "re");
    out[0] = '\0';
    if (f == NULL) return;
    if (fgets(out, (int)cap, f) == NULL) out[0] = '\0';
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
    if (out[strspn(out, "0123456789_")] != '\0') out[0] = '\0';
}

void run_holder_elsewhere(const run_holder *h, run_holder_state s, const char *run_dir_path,
                          char *out, size_t cap) {
    char *abs = realpath(run_dir_path, NULL), job[32];
    bt_buf cmd;
    bt_buf_init(&cmd);
    bt_shell_cmd(&cmd, "baton stop", abs != NULL ? abs : run_dir_path);
    run_holder_job(run_dir_path, job, sizeof job);
    if (s == RUN_HOLDER_OTHER_NS)
        snprintf(out, cap, "stop it from inside that namespace with %s", bt_buf_str(&cmd));
    else if (job[0] != '\0')
        snprintf(out, cap,
                 "stop it on %s with %s or kill -TERM %ld (or, where it runs as Slurm job %s, "
                 "the one in RUN_DIR/job_id, with scancel --signal=TERM --batch %s)",
                 h->host, bt_buf_str(&cmd), (long)h->pid, job, job);
    else
        snprintf(out, cap, "stop it on %s with %s or kill -TERM %ld", h->host, bt_buf_str(&cmd),
                 (long)h->pid);
    bt_buf_free(&cmd);
    free(abs);
}

/* Whether run_dir_path, held, has no lock file: deleted (by hand, as "stale"), as one
 * that a run starting makes a moment after taking the directory's lock is given 100 ms. */
static int run_holder_lock_deleted(const char *run_dir_path) {
    char lock[4200];
    struct stat st;
    struct timespec nap = {0, 20 * 1000 * 1000};
    snprintf(lock, sizeof lock, "%s/lock", run_dir_path);
    for (int tries = 0; tries < 5; tries++) {
        if (lstat(lock, &st) == 0 || errno != ENOENT) return 0;
        nanosleep(&nap, NULL);
    }
    return 1;
}

/* The refusal's words on a run directory held with its lock file deleted: the holder's
 * record went with it, so where to find that process, into out. */
static void run_holder_no_lock(const char *run_dir_path, char *out, size_t cap) {
    bt_buf cmd;
    bt_buf_init(&cmd);
    snprintf(out, cap,
             " (its lock file was deleted, and with it the record of the process that holds "
             "the run, which still holds the directory: find it with %s or pgrep -af 'baton "
             "(run|resume)' and stop it with kill -TERM PID, or wait until it ends; a run "
             "makes the lock file again as it takes the directory)",
             bt_shell_cmd(&cmd, "fuser -v", run_dir_path));
    bt_buf_free(&cmd);
}

void run_holder_refusal(const char *run_dir_path, char *out, size_t cap) {
    run_holder h;
    out[0] = '\0';
    if (run_holder_lock_deleted(run_dir_path)) {
        run_holder_no_lock(run_dir_path, out, cap);
        return;
    }
    run_holder_state s = run_holder_find(run_dir_path, &h);
    if (s != RUN_HOLDER_HELD && s != RUN_HOLDER_OTHER_HOST && s != RUN_HOLDER_OTHER_NS &&
        s != RUN_HOLDER_UNVERIFIED)
        return;
    char words[600];
    run_holder_words(&h, s, words, sizeof words);
    bt_buf cmd;
    bt_buf_init(&cmd);
    bt_shell_cmd(&cmd, "baton stop", run_dir_path);
    if (h.stopping && s != RUN_HOLDER_UNVERIFIED)
        snprintf(out, cap, " (%s: it exits once its workers wrote their stop checkpoint)", words);
    else if (s == RUN_HOLDER_HELD)
        snprintf(out, cap, " (%s; stop it with %s or kill -TERM %ld)", words, bt_buf_str(&cmd),
                 (long)h.pid);
    else if (s == RUN_HOLDER_OTHER_HOST || s == RUN_HOLDER_OTHER_NS) {
        char how[1200];
        run_holder_elsewhere(&h, s, run_dir_path, how, sizeof how);
        snprintf(out, cap, " (%s; %s)", words, how);
    } else
        snprintf(out, cap, " (%s)", words);
    bt_buf_free(&cmd);
}
