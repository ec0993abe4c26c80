/* bt_read_private (stages/util/file.h), what it promises for a run's own files: a
 * regular file read whole; a symbolic link refused (ELOOP), never followed, whatever it
 * points to; anything but a regular file refused (EINVAL: a directory, a FIFO, which must
 * not block the reader); strict, a file its group or others may read or write, or one
 * another user owns, refused (EPERM), as for a secret; over max bytes EFBIG. bt_read_file
 * and bt_read_private at caps around the buffer's growth (64 KiB doubling): a file of
 * exactly max bytes read, one byte more EFBIG, never ENOMEM. The owner
 * check needs a file of another user's that this one can open: run as root (chown), it
 * is checked; else said to be skipped. bt_mkdir_p_made: which directories it made.
 * Written (bt_open_private, bt_fopen_private): a FIFO refused, never waited on; a link
 * refused; a regular file truncated or appended to. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "util/file.h"

#define SECRET "the run's secret\n"

/* bt_read_private(path, 64, strict): the errno of its failure, 0 when it read SECRET. */
static int read_err(const char *path, int strict) {
    char *text = NULL;
    size_t len = 0;
    errno = 0;
    if (bt_read_private(path, 64, strict, &text, &len) != 0) return errno ? errno : -1;
    int same = len == strlen(SECRET) && strcmp(text, SECRET) == 0;
    free(text);
    return same ? 0 : -2;
}

static void write_secret(const char *path, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, SECRET, strlen(SECRET)) == (ssize_t)strlen(SECRET));
    if (fd >= 0) close(fd);
    CHECK(chmod(path, mode) == 0);
}

/* A regular file of this user's, 0600 (and 0400), read in both modes; group or others
 * allowed to read or write it: strict refuses (EPERM), plain reads it. */
static void check_modes(const char *dir) {
    static const mode_t loose[] = {0640, 0604, 0620, 0602, 0644, 0666};
    char p[256];
    snprintf(p, sizeof p, "%s/secret", dir);
    write_secret(p, 0600);
    CHECK_EQ_U64(read_err(p, 0), 0);
    CHECK_EQ_U64(read_err(p, 1), 0);
    CHECK(chmod(p, 0400) == 0);
    CHECK_EQ_U64(read_err(p, 1), 0);
    for (size_t i = 0; i < sizeof loose / sizeof loose[0]; i++) {
        CHECK(chmod(p, loose[i]) == 0);
        int strict = read_err(p, 1), plain = read_err(p, 0);
        if (strict != EPERM || plain != 0)
            fprintf(stderr, "mode %04o: strict errno %d (want EPERM), plain %d (want 0)\n",
                    (unsigned)loose[i], strict, plain);
        CHECK_EQ_U64(strict, EPERM);
        CHECK_EQ_U64(plain, 0);
    }
    CHECK(chmod(p, 0600) == 0);
}

/* A link to a good file (and to one another user owns) is refused, not followed; a
 * directory and a FIFO are not regular files (the FIFO, with no writer, must not block). */
static void check_kinds(const char *dir) {
    char p[256], link[256], sub[256], fifo[256], missing[256];
    snprintf(p, sizeof p, "%s/secret", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK(symlink("secret", link) == 0);
    CHECK_EQ_U64(read_err(link, 0), ELOOP);
    CHECK_EQ_U64(read_err(link, 1), ELOOP);
    CHECK(mkdir(sub, 0700) == 0);
    CHECK_EQ_U64(read_err(sub, 0), EINVAL);
    CHECK_EQ_U64(read_err(sub, 1), EINVAL);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_U64(read_err(fifo, 0), EINVAL);
    CHECK_EQ_U64(read_err(fifo, 1), EINVAL);
    CHECK_EQ_U64(read_err(missing, 1), ENOENT);
    /* bt_fopen_private's read alike: a FIFO refused without waiting, a file read */
    errno = 0;
    CHECK(bt_fopen_private(fifo, "r") == NULL && errno == EINVAL);
    CHECK(strstr(bt_file_why(EINVAL), "not a regular file") != NULL);
    FILE *rf = bt_fopen_private(p, "r");
    CHECK(rf != NULL && fgetc(rf) != EOF);
    if (rf) fclose(rf);
    /* a file over max bytes: EFBIG, as bt_read_file */
    char *text = NULL;
    size_t len = 0;
    errno = 0;
    CHECK(bt_read_private(p, 4, 1, &text, &len) == -1 && errno == EFBIG);
    free(text);
}

/* A file of size bytes ('x'), 0600, at p. */
static void write_size(const char *p, size_t size) {
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f == NULL) return;
    for (size_t i = 0; i < size; i++)
        fputc('x', f);
    CHECK(fclose(f) == 0);
}

/* bt_read_file (private: bt_read_private) of a file of size bytes under cap max: 0 when it
 * read them all, else its errno. */
static int read_size(const char *p, size_t size, size_t max, int private) {
    char *text = NULL;
    size_t len = 0;
    write_size(p, size);
    errno = 0;
    int rc = private ? bt_read_private(p, max, 0, &text, &len) : bt_read_file(p, max, &text, &len);
    if (rc != 0) return errno ? errno : -1;
    int whole = len == size && text[len] == '\0' && strspn(text, "x") == len;
    free(text);
    return whole ? 0 : -2;
}

/* Caps that are the buffer's own sizes (64 KiB, 128 KiB: every production cap is 64 KiB
 * times a power of two) and others: exactly max bytes read, max + 1 and twice max EFBIG. */
static void check_limits(const char *dir) {
    static const size_t maxes[] = {100, 65535, 65536, 100000, 131072};
    char p[256];
    snprintf(p, sizeof p, "%s/sized", dir);
    for (size_t i = 0; i < sizeof maxes / sizeof maxes[0]; i++)
        for (int private = 0; private < 2; private ++) {
            size_t max = maxes[i], sizes[] = {max - 1, max, max + 1, 2 * max + 1};
            for (int j = 0; j < 4; j++) {
                int got = read_size(p, sizes[j], max, private), want = j < 2 ? 0 : EFBIG;
                if (got != want)
                    fprintf(stderr, "%s: %zu bytes under max %zu: %d (%s), not %d\n",
                            private ? "bt_read_private" : "bt_read_file", sizes[j], max, got,
                            got > 0 ? strerror(got) : "misread", want);
                CHECK_EQ_U64(got, want);
            }
        }
    CHECK(unlink(p) == 0);
}

/* Another user's file, 0600 (readable here only by root): strict refuses it (EPERM). */
static void check_owner(const char *dir) {
    if (geteuid() != 0) {
        printf("SKIPPED: the owner check (needs root, to give a file to another user)\n");
        return;
    }
    char p[256];
    snprintf(p, sizeof p, "%s/theirs", dir);
    write_secret(p, 0600);
    CHECK(chown(p, 65534, 65534) == 0); /* nobody */
    CHECK_EQ_U64(read_err(p, 0), 0);
    CHECK_EQ_U64(read_err(p, 1), EPERM);
    /* owned by this user but of another group: the group is not the check, the mode is */
    CHECK(chown(p, geteuid(), 65534) == 0);
    CHECK_EQ_U64(read_err(p, 1), 0);
}

/* bt_mkdir_p_made: the directories this call made, as prefixes of the path (trailing and
 * doubled slashes aside), never one that was there already. */
static void check_mkdir_made(const char *dir) {
    char p[256], q[256];
    size_t made[8], n = 99;
    snprintf(p, sizeof p, "%s/m1", dir);
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/m1//a/b/", dir); /* m1 there: a and a/b made */
    CHECK(bt_mkdir_p_made(p, 0700, made, 8, &n) == 0);
    CHECK_EQ_U64(n, 2);
    snprintf(q, sizeof q, "%s/m1//a", dir);
    CHECK_EQ_U64(made[0], strlen(q));
    CHECK_EQ_U64(made[1], strlen(q) + 2);
    CHECK(bt_mkdir_p_made(p, 0700, made, 8, &n) == 0); /* all there: none made */
    CHECK_EQ_U64(n, 0);
    snprintf(p, sizeof p, "%s/m1/a/c/d", dir); /* cap 1: the outermost only */
    CHECK(bt_mkdir_p_made(p, 0700, made, 1, &n) == 0);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(made[0], strlen(p) - 2);
    rmdir(p), p[strlen(p) - 2] = '\0', rmdir(p);
    snprintf(p, sizeof p, "%s/m1/a/b", dir), rmdir(p);
    snprintf(p, sizeof p, "%s/m1/a", dir), rmdir(p);
    snprintf(p, sizeof p, "%s/m1", dir), rmdir(p);
}

/* Written (bt_open_private, bt_fopen_private "w" and "a"): a FIFO is refused at once
 * (EINVAL), with no reader (where a plain open would wait for one; the alarm ends a test
 * that waits) and with one; a link refused (ELOOP), never followed; a regular file
 * truncated ("w") or appended to ("a"), its descriptor blocking again, O_APPEND kept. */
static void check_writes(const char *dir) {
    static const int flags[] = {O_WRONLY | O_CREAT | O_TRUNC, O_WRONLY | O_CREAT | O_APPEND,
                                O_RDWR | O_CREAT};
    char fifo[256], p[256], link[256];
    snprintf(fifo, sizeof fifo, "%s/wfifo", dir);
    snprintf(p, sizeof p, "%s/wfile", dir);
    snprintf(link, sizeof link, "%s/wlink", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK(symlink("wfile", link) == 0);
    alarm(30);
    for (int reader = 0; reader < 2; reader++) {
        int r = reader ? open(fifo, O_RDONLY | O_NONBLOCK) : -1;
        for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
            errno = 0;
            CHECK(bt_open_private(fifo, flags[i]) == -1 && errno == EINVAL);
            errno = 0;
            CHECK(bt_open_private(link, flags[i]) == -1 && errno == ELOOP);
        }
        errno = 0;
        CHECK(bt_fopen_private(fifo, "w") == NULL && errno == EINVAL);
        errno = 0;
        CHECK(bt_fopen_private(fifo, "a") == NULL && errno == EINVAL);
        if (r >= 0) close(r);
    }
    alarm(0);
    CHECK(access(p, F_OK) != 0); /* the link made nothing where it points */
    write_secret(p, 0644);
    FILE *w = bt_fopen_private(p, "w");
    CHECK(w != NULL && (fcntl(fileno(w), F_GETFL) & O_NONBLOCK) == 0 && fputs("ab", w) >= 0);
    if (w) fclose(w);
    FILE *a = bt_fopen_private(p, "a");
    int fl = a ? fcntl(fileno(a), F_GETFL) : 0;
    CHECK(a != NULL && (fl & O_NONBLOCK) == 0 && (fl & O_APPEND) != 0 && fputs("c", a) >= 0);
    if (a) fclose(a);
    char *text = NULL;
    size_t len = 0;
    CHECK(bt_read_private(p, 64, 0, &text, &len) == 0 && len == 3 && strcmp(text, "abc") == 0);
    free(text);
    int fd = bt_open_private(p, O_WRONLY | O_NONBLOCK); /* asked for: kept */
    CHECK(fd >= 0 && (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    if (fd >= 0) close(fd);
    unlink(fifo), unlink(link), unlink(p);
}

int main(void) {
    char dir[] = "/tmp/baton-test-file.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    check_modes(dir);
    check_kinds(dir);
    check_writes(dir);
    check_limits(dir);
    check_owner(dir);
    check_mkdir_made(dir);
    check_rmdir(dir);
    if (check_failures == 0) printf("bt_read_private: all checks passed\n");
    return check_status();
}
