#include "file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int bt_read_file(const char *path, size_t max, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    size_t cap = 1 << 16, n = 0, k;
    char *buf = malloc(cap + 1);
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) {
            char *b = cap < max ? realloc(buf, cap * 2 + 1) : NULL;
            if (b == NULL) free(buf);
            buf = b, cap *= 2;
        }
    int err = ferror(f) ? EIO : cap >= max && n == cap ? EFBIG : ENOMEM;
    fclose(f);
    if (buf == NULL || n > max) {
        free(buf);
        errno = err;
        return -1;
    }
    buf[n] = '\0';
    *out = buf, *len = n;
    return 0;
}

int bt_mkdir_p(const char *path, mode_t mode) {
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (p == NULL) return -1;
    memcpy(p, path, n + 1);
    int rc = 0;
    for (char *s = p + 1; rc == 0 && *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(p, mode) != 0 && errno != EEXIST) rc = -1;
            *s = '/';
        }
    if (rc == 0 && mkdir(p, mode) != 0 && errno != EEXIST) rc = -1;
    int err = errno;
    free(p);
    errno = err;
    return rc;
}

int bt_file_open_read(const char *path, FILE **in, bt_diag *diag) {
    *in = fopen(path, "re");
    if (*in != NULL || errno == ENOENT) return 0;
    bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno));
    return BT_EIO;
}

int bt_file_lines(FILE *in, const char *path, bt_line_fn fn, void *arg, int *torn, bt_diag *diag) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    off_t at = ftello(in);
    int rc = 0;
    *torn = 0;
    at = at < 0 ? 0 : at;
    while (rc == 0 && (errno = 0, n = getline(&line, &cap, in)) > 0) {
        if (line[n - 1] != '\n') {
            *torn = 1;
            break;
        }
        rc = fn(arg, line, (size_t)n, at);
        at += n;
    }
    int err = errno;
    if (rc == 0 && n < 0 && err == ENOMEM) rc = BT_ENOMEM;
    if (rc == BT_ENOMEM) bt_diag_set(diag, "%s: out of memory reading it", path);
    if (rc == 0 && ferror(in)) {
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(err));
        rc = BT_EIO;
    }
    free(line);
    return rc;
}

int bt_json_line_num(const char *line, const char *key, double *out) {
    const char *k = strstr(line, key);
    if (k == NULL) return -1;
    const char *at = k + strlen(key);
    if (strncmp(at, "null", 4) == 0) {
        *out = NAN;
        return 0;
    }
    char *end;
    *out = strtod(at, &end);
    return end == at ? -1 : 0;
}
