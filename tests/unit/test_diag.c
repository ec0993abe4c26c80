/* A bt_diag's message (stages/util/err.h) longer than its buffer keeps its start and its
 * end, the middle cut: the cause a message ends with ("File name too long" after a path
 * of 4000 bytes) stays, whichever setter made it. */
#include <string.h>

#include "check.h"
#include "util/err.h"
#include "util/utf8.h"

/* A path of n bytes: "/tmp/" and then 'd's. */
static char *long_path(size_t n) {
    static char p[40000];
    memset(p, 'd', n);
    memcpy(p, "/tmp/", 5);
    p[n] = '\0';
    return p;
}

static void check_cut(const bt_diag *d, const char *start, const char *end) {
    size_t n = strlen(d->msg), e = strlen(end);
    CHECK(n == sizeof d->msg - 1);
    CHECK(strncmp(d->msg, start, strlen(start)) == 0);
    CHECK(n >= e && strcmp(d->msg + n - e, end) == 0);
    CHECK(strstr(d->msg, " ... ") != NULL);
    CHECK(bt_utf8_valid(d->msg, n));
}

static void test_short(void) {
    bt_diag d;
    bt_diag_init(&d);
    bt_diag_set(&d, "%s: %s", "x", "File name too long");
    CHECK(strcmp(d.msg, "x: File name too long") == 0);
    bt_diag_set(&d, "second"); /* the first message wins */
    CHECK(strcmp(d.msg, "x: File name too long") == 0);
    bt_diag_init(&d);
    bt_diag_set_placed(&d, "r.yaml", 3, 7, "bad %s", "key");
    CHECK(strcmp(d.msg, "r.yaml:3:7: bad key") == 0);
    CHECK(d.placed == (int)strlen("r.yaml:3:7"));
}

static void test_long(void) {
    bt_diag d;
    /* 4060 bytes: longer than msg, shorter than the stack buffer */
    bt_diag_init(&d);
    bt_diag_set(&d, "checkpoint s00: %s: %s", long_path(4060), "File name too long");
    check_cut(&d, "checkpoint s00: /tmp/ddd", "ddd: File name too long");
    bt_diag_init(&d);
    bt_diag_set_errno(&d, 36, "%s: cannot write: %s", long_path(4090), "File name too long");
    check_cut(&d, "/tmp/ddd", "ddd: cannot write: File name too long");
    CHECK(d.err == 36);
    /* 30000 bytes: longer than the stack buffer too */
    bt_diag_init(&d);
    bt_diag_set(&d, "%s: %s", long_path(30000), "No such file or directory");
    check_cut(&d, "/tmp/ddd", "ddd: No such file or directory");
    /* a place stays placed where the cut leaves it whole */
    bt_diag_init(&d);
    bt_diag_set_placed(&d, "r.yaml", 3, 7, "data %s: %s", long_path(5000), "Permission denied");
    check_cut(&d, "r.yaml:3:7: data /tmp/ddd", "ddd: Permission denied");
    CHECK(d.placed == (int)strlen("r.yaml:3:7"));
}

static void test_forward(void) {
    bt_diag in, out;
    bt_diag_init(&in);
    bt_diag_set(&in, "%s: %s", long_path(3000), "File name too long");
    bt_diag_init(&out);
    bt_diag_forward(&out, &in, "stage \"%s\"", "a");
    check_cut(&out, "stage \"a\": /tmp/ddd", "ddd: File name too long");
    bt_diag_init(&out);
    bt_diag_forward(&out, &in, "%s", long_path(3000)); /* a prefix longer than msg itself */
    check_cut(&out, "/tmp/ddd", "ddd: File name too long");
}

int main(void) {
    test_short();
    test_long();
    test_forward();
    return check_status();
}
