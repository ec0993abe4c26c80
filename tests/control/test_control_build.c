/* test_control build RUN_DIR: the build a rank's Hello names (Hello.build), as baton run
 * checks it (control_server.other_build): the same build, however long, is no other one
 * (compared whole, not as the rank's 128-byte copy kept for messages); one that differs
 * only past that copy's end, and a Hello without the field (a worker older than the check),
 * are. Hellos sent raw, as such a worker would. Builds of the form cmake/baton_version.cmake
 * writes are compared by their sources' hash alone (the same sources built with git or
 * without, clean or with a doc's edit, are one build), and the commit two builds of other
 * sources both name, for run_build_advice's "both are of git X" (control_build.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control_build.h"
#include "control_server.h"
#include "control_internal.h"
#include "test_control.h"
#include "util/err.h"

/* A connection that sends rank's Hello of attempt 0 in a world of 3, naming build (NULL:
 * the field absent); its fd, kept open. */
static int hello_raw(const control_server *cs, uint32_t rank, const char *build) {
    const char *colon = strrchr(cs->address, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    sa.sin_addr.s_addr = htonl(0x7f000001);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return -1;
    Baton__Hello h = BATON__HELLO__INIT;
    h.token = "s3cret", h.host = "here", h.build = (char *)build;
    h.has_rank = h.has_world = h.has_attempt = h.has_pid = 1;
    h.rank = rank, h.world = 3, h.attempt = 0, h.pid = (int32_t)getpid();
    Baton__Envelope env = BATON__ENVELOPE__INIT;
    env.body_case = BATON__ENVELOPE__BODY_HELLO, env.hello = &h;
    uint8_t buf[1024];
    uint32_t n = (uint32_t)baton__envelope__pack(&env, buf + 4);
    memcpy(buf, &n, 4); /* little-endian hosts only, as the test's wire elsewhere */
    CHECK(send(fd, buf, n + 4, MSG_NOSIGNAL) == (ssize_t)(n + 4), "send rank %u's Hello", rank);
    return fd;
}

static uint32_t want_connected;
static int connected(const control_server *cs) {
    return control_server_connected(cs) >= want_connected;
}

/* control_build_same and control_build_commit on the forms of BATON_VERSION. */
static void build_strings(void) {
    const char *git = "0.1.0 (git af6b78f, src 0123456789ab)";
    const char *same[] = {"0.1.0 (src 0123456789ab)", "0.1.0 (git af6b78f-dirty, src 0123456789ab)",
                          "0.1.0 (git v0.1-3-gaf6b78f, src 0123456789ab)", git};
    const char *other[] = {"0.1.0 (git af6b78f, src 0123456789ac)",
                           "0.2.0 (src 0123456789ab)",
                           "0.1.0 (git af6b78f)",
                           "0.1.0 (gix af6b78f, src 0123456789ab)",
                           "0.1.0 (git af6b78f, src 0123456789abc)",
                           "",
                           "0.1.0 (src 0123456789AB)"};
    for (size_t i = 0; i < sizeof same / sizeof *same; i++)
        CHECK(control_build_same(git, same[i]) && control_build_same(same[i], git),
              "'%s' not the same build as '%s'", same[i], git);
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        CHECK(!control_build_same(git, other[i]) && !control_build_same(other[i], git),
              "'%s' taken for the build '%s'", other[i], git);
    CHECK(control_build_same("0.1.0 (git af6b78f)", "0.1.0 (git af6b78f)"), "an old form whole");
    /* the commit named by both (run_build_advice: "both are of git X, with other edits") */
    char c[16] = "";
    CHECK(control_build_commit("0.1.0 (git af6b78f-dirty, src 0123456789ab)", other[0], c,
                               sizeof c) &&
              strcmp(c, "af6b78f") == 0,
          "the commit of a dirty and a clean build: '%s'", c);
    CHECK(control_build_commit(git, other[0], c, sizeof c) && strcmp(c, "af6b78f") == 0,
          "the commit of two builds: '%s'", c);
    CHECK(!control_build_commit(git, "0.1.0 (git bf6b78f, src 0123456789ac)", c, sizeof c),
          "other commits taken for one");
    CHECK(!control_build_commit(git, same[0], c, sizeof c), "a build without git names a commit");
    CHECK(!control_build_commit(git, "0.2.0 (git af6b78f, src 0123456789ac)", c, sizeof c),
          "another version's build of the commit");
    CHECK(!control_build_commit(git, other[3], c, sizeof c), "a build not of the form");
    CHECK(!control_build_commit(git, git, c, 7), "a commit past out's end");
}

int build(const char *run_dir) {
    build_strings();
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    char same[201], other[201];
    memset(same, 'a', 200), same[200] = '\0'; /* a 200-byte build: past the rank's copy */
    memcpy(other, same, sizeof other), other[180] = 'b';
    cs.build = same;
    CHECK(control_server_begin_attempt(&cs, 0, "s", 0, 3, 0) == 0, "begin");
    int fd[3] = {hello_raw(&cs, 0, same), -1, -1};
    want_connected = 1;
    CHECK(pump_until(&cs, connected) && cs.other_build == -1,
          "the same 200-byte build taken for another (rank %d)", cs.other_build);
    CHECK(strlen(cs.ranks[0].build) == sizeof cs.ranks[0].build - 1, "copy of %zu bytes",
          strlen(cs.ranks[0].build));
    fd[1] = hello_raw(&cs, 1, other);
    want_connected = 2;
    CHECK(pump_until(&cs, connected) && cs.other_build == 1,
          "a build differing past 127 bytes not seen (rank %d)", cs.other_build);
    fd[2] = hello_raw(&cs, 2, NULL);
    want_connected = 3;
    CHECK(pump_until(&cs, connected) && cs.other_build == 1 && cs.ranks[2].build[0] == '\0',
          "the first other build not kept (rank %d)", cs.other_build);
    for (int i = 0; i < 3; i++)
        if (fd[i] >= 0) close(fd[i]);
    /* an attempt of its own: a Hello without the field is another build */
    CHECK(control_server_begin_attempt(&cs, 0, "s", 0, 3, 0) == 0, "begin again");
    CHECK(cs.other_build == -1, "other_build kept over attempts");
    fd[0] = hello_raw(&cs, 0, NULL);
    want_connected = 1;
    CHECK(pump_until(&cs, connected) && cs.other_build == 0,
          "a Hello naming no build not seen (rank %d)", cs.other_build);
    if (fd[0] >= 0) close(fd[0]);
    /* the same sources' hash under another git description: the same build */
    cs.build = "0.1.0 (git af6b78f-dirty, src 0123456789ab)";
    CHECK(control_server_begin_attempt(&cs, 0, "s", 0, 3, 0) == 0, "begin a third");
    fd[0] = hello_raw(&cs, 0, "0.1.0 (src 0123456789ab)");
    want_connected = 1;
    CHECK(pump_until(&cs, connected) && cs.other_build == -1,
          "a build of the same sources without git refused (rank %d)", cs.other_build);
    if (fd[0] >= 0) close(fd[0]);
    control_server_close(&cs);
    printf("control build: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
