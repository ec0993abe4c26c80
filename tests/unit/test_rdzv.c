/* The rendezvous directory of ranks started without BATON_JOB_DIR or a KV address
 * (worker/main/worker_rdzv.h), at its predictable name $TMPDIR/baton-rdzv-<nspace>: made
 * 0700 and removed with its files; found already made by another rank, used; a name
 * someone else took first refused with a message that names it, and nothing it leads to
 * removed: a symbolic link to a directory of files (they all survive rank 0's removal),
 * a directory group or others may write, a plain file. Removal unlinks links inside,
 * never what they lead to. Another user's directory is checked only as root (chown). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "worker_rdzv.h"

static void put_file(const char *dir, const char *name) {
    char p[1100];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, "x", 1) == 1);
    if (fd >= 0) close(fd);
}

static int exists(const char *dir, const char *name) {
    char p[1100];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* claim on name: its return code; the message must name it when refused */
static int claim(const char *name, const char *why) {
    bt_diag d;
    bt_diag_init(&d);
    int rc = worker_rdzv_claim(name, &d);
    if (rc != 0) {
        CHECK_STR_CONTAINS(d.msg, name);
        if (why != NULL) CHECK_STR_CONTAINS(d.msg, why);
    }
    return rc;
}

/* made, used again by another rank, removed with its files */
static void check_fresh(const char *root) {
    char name[512];
    struct stat st;
    snprintf(name, sizeof name, "%s/baton-rdzv-fresh", root);
    CHECK_EQ_U64(claim(name, NULL), 0);
    CHECK(lstat(name, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 077) == 0);
    CHECK_EQ_U64(claim(name, NULL), 0); /* another rank */
    put_file(name, "world-0");
    put_file(name, "world-1");
    worker_rdzv_remove(name);
    CHECK(lstat(name, &st) != 0 && errno == ENOENT);
}

/* a squatter's link to a directory of files: refused, every file survives the removal */
static void check_link(const char *root) {
    char name[512], victim[512];
    snprintf(victim, sizeof victim, "%s/victim", root);
    snprintf(name, sizeof name, "%s/baton-rdzv-linked", root);
    CHECK(mkdir(victim, 0700) == 0);
    put_file(victim, "precious-a");
    put_file(victim, "precious-b");
    CHECK(symlink(victim, name) == 0);
    CHECK(claim(name, "symbolic link") != 0);
    worker_rdzv_remove(name);
    CHECK(exists(victim, "precious-a") && exists(victim, "precious-b"));
    CHECK(exists(root, "baton-rdzv-linked"));
}

/* a directory others may write, a plain file: refused, left as they are */
static void check_loose(const char *root) {
    char name[512];
    snprintf(name, sizeof name, "%s/baton-rdzv-open", root);
    CHECK(mkdir(name, 0700) == 0 && chmod(name, 0777) == 0);
    put_file(name, "theirs");
    CHECK(claim(name, "writable by group or others") != 0);
    worker_rdzv_remove(name);
    CHECK(exists(name, "theirs"));
    put_file(root, "baton-rdzv-file");
    snprintf(name, sizeof name, "%s/baton-rdzv-file", root);
    CHECK(claim(name, "not a directory") != 0);
    worker_rdzv_remove(name);
    CHECK(exists(root, "baton-rdzv-file"));
}

/* links inside the store are removed, not followed; a directory inside is left (and so
 * the store, which rmdir cannot remove then) */
static void check_inside(const char *root) {
    char name[512], link[600], victim[512];
    snprintf(name, sizeof name, "%s/baton-rdzv-inside", root);
    snprintf(victim, sizeof victim, "%s/victim", root);
    CHECK_EQ_U64(claim(name, NULL), 0);
    snprintf(link, sizeof link, "%s/to-victim", name);
    CHECK(symlink(victim, link) == 0);
    put_file(name, "world-0");
    snprintf(link, sizeof link, "%s/sub", name);
    CHECK(mkdir(link, 0700) == 0);
    put_file(link, "kept");
    worker_rdzv_remove(name);
    CHECK(!exists(name, "to-victim") && !exists(name, "world-0"));
    CHECK(exists(link, "kept"));
    CHECK(exists(victim, "precious-a") && exists(victim, "precious-b"));
}

/* another user's directory (0700): refused; needs root to make one */
static void check_other_user(const char *root) {
    char name[512];
    if (geteuid() != 0) {
        fprintf(stderr, "test_rdzv: another user's directory not checked (not root)\n");
        return;
    }
    snprintf(name, sizeof name, "%s/baton-rdzv-theirs", root);
    CHECK(mkdir(name, 0700) == 0 && chown(name, 65534, 65534) == 0);
    CHECK(claim(name, "owned by another user") != 0);
}

int main(void) {
    char root[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/test_rdzv.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(root) == NULL) return 1;
    check_fresh(root);
    check_link(root);
    check_loose(root);
    check_inside(root);
    check_other_user(root);
    check_rmdir(root);
    return check_status();
}
