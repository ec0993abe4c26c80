#define _GNU_SOURCE /* pwrite */
#include "run_holder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
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

/* h as its record's line (run_holder.h), its length; 0 when it does not fit. */
static size_t run_holder_format(const run_holder *h, char *out, size_t cap) {
    int n = snprintf(out, cap, "pid=%ld host=%s since=%lld command=%s recipe_crc32c=%08" PRIx32,
                     (long)h->pid, h->host, h->since, h->command, h->recipe_crc32c);
    if (n <= 0 || (size_t)n >= cap) return 0;
    uint32_t crc = crc32c_update(0, out, (size_t)n);
    int m = snprintf(out + n, cap - (size_t)n, " crc32c=%08" PRIx32 "\n", crc);
    return m > 0 && (size_t)m < cap - (size_t)n ? (size_t)n + (size_t)m : 0;
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
    long pid;
    unsigned rcrc;
    memset(h, 0, sizeof *h);
    if (sscanf(line, "pid=%ld host=%255s since=%lld command=%15s recipe_crc32c=%8x%c", &pid,
               h->host, &h->since, h->command, &rcrc, &extra) != 5 ||
        pid <= 0)
        return 0;
    h->pid = (pid_t)pid, h->recipe_crc32c = rcrc;
    return 1;
}

/* The record in the lock file open as fd: 1, or 0 (none, or not a valid line). */
static int run_holder_read_fd(int fd, run_holder *h) {
    char text[RUN_HOLDER_LINE];
    ssize_t n = pread(fd, text, sizeof text, 0);
    return n > 0 && run_holder_parse(text, (size_t)n, h);
}

void run_holder_note(int fd, const char *command, const char *recipe, size_t n) {
    run_holder h = {.pid = getpid(), .since = (long long)time(NULL)}, had;
    run_holder_host(h.host, sizeof h.host);
    snprintf(h.command, sizeof h.command, "%s", command);
    h.recipe_crc32c = crc32c_update(0, recipe, n);
    /* the same process (a continuation in a fresh process keeps its pid): its start kept */
    if (run_holder_read_fd(fd, &had) && had.pid == h.pid && strcmp(had.host, h.host) == 0)
        h.since = had.since;
    char line[RUN_HOLDER_LINE];
    size_t len = run_holder_format(&h, line, sizeof line);
    /* the new line first, then what an older, longer one left after it cut: a reader sees
     * the old record, the new one, or a torn line that fails its CRC (and reads again) */
    if (len > 0 && pwrite(fd, line, len, 0) == (ssize_t)len) (void)!ftruncate(fd, (off_t)len);
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

int run_holder_find(const char *run_dir_path, run_holder *h) {
    if (!run_holder_read(run_dir_path, h)) return 0;
    /* on this host, a record whose process is gone is stale: the holder now has not
     * written its own yet, or is a baton that writes none */
    if (run_holder_here(h) && kill(h->pid, 0) != 0 && errno == ESRCH) return 0;
    return 1;
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

void run_holder_words(const run_holder *h, char *out, size_t cap) {
    char when[64] = "?";
    time_t t = (time_t)h->since;
    struct tm tm;
    if (localtime_r(&t, &tm) != NULL) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, cap, "baton %s pid %ld on %s, since %s", h->command, (long)h->pid, h->host, when);
}

void run_holder_refusal(const char *run_dir_path, char *out, size_t cap) {
    run_holder h;
    out[0] = '\0';
    if (!run_holder_find(run_dir_path, &h)) return;
    char words[400];
    run_holder_words(&h, words, sizeof words);
    bt_buf cmd;
    bt_buf_init(&cmd);
    bt_shell_cmd(&cmd, "baton stop", run_dir_path);
    if (run_holder_here(&h))
        snprintf(out, cap, " (%s; stop it with %s or kill -TERM %ld)", words, bt_buf_str(&cmd),
                 (long)h.pid);
    else
        snprintf(out, cap, " (%s; stop it on %s with %s or kill -TERM %ld)", words, h.host,
                 bt_buf_str(&cmd), (long)h.pid);
    bt_buf_free(&cmd);
}
