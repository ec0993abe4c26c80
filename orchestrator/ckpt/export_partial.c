#include "export_partial.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt_store_fs.h"

/* This host's name as a partial's name holds it: [A-Za-z0-9._-], anything else '_'. */
static void partial_host(char *host, size_t cap) {
    if (gethostname(host, cap) != 0) snprintf(host, cap, "localhost");
    host[cap - 1] = '\0';
    for (char *p = host; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-') *p = '_';
}

int export_partial_template(const char *out, size_t len, char *tmp, size_t cap) {
    char host[65];
    partial_host(host, sizeof host);
    int n = snprintf(tmp, cap, "%.*s.partial-%s-%ld-XXXXXX", (int)len, out, host, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* The pid in name when it is BASE.partial-HOST-PID-XXXXXX (base and host: ours), else 0. */
static long partial_pid(const char *name, const char *base, size_t blen, const char *host) {
    static const char tag[] = ".partial-";
    size_t hlen = strlen(host);
    if (strncmp(name, base, blen) != 0 || strncmp(name + blen, tag, sizeof tag - 1) != 0) return 0;
    const char *p = name + blen + sizeof tag - 1;
    if (strncmp(p, host, hlen) != 0 || p[hlen] != '-') return 0;
    p += hlen + 1;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 9 || p[digits] != '-' || strlen(p + digits + 1) != 6) return 0;
    for (const char *x = p + digits + 1; *x; x++)
        if (!isalnum((unsigned char)*x)) return 0;
    return strtol(p, NULL, 10);
}

void export_partial_sweep(const char *out, size_t len) {
    char path[CKPT_PATH_MAX], parent[CKPT_PATH_MAX], host[65];
    if (len >= sizeof path) return;
    snprintf(path, sizeof path, "%.*s", (int)len, out);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    ckpt_path_parent(path, parent, sizeof parent);
    partial_host(host, sizeof host);
    DIR *d = opendir(parent);
    if (d == NULL) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long pid = partial_pid(de->d_name, base, strlen(base), host);
        struct stat st;
        char p[CKPT_PATH_MAX];
        if (pid <= 0 || snprintf(p, sizeof p, "%s/%s", parent, de->d_name) >= (int)sizeof p ||
            lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* running, or not ours */
        if (ckpt_remove_dir(p) == 0)
            printf("baton ckpt export: removed %s, left by an export that no longer runs "
                   "(pid %ld)\n",
                   slash ? p : de->d_name, pid);
    }
    closedir(d);
}
