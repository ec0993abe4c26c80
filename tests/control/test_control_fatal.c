/* test_control fatal RUN_DIR: how baton run tells a full disk from a rank's Fatal. A
 * worker that knows the errno says so in the Fatal's disk_full field, whatever the
 * message's words; one of an older build has no such field, and its message's strerror
 * words for ENOSPC or EDQUOT still say it. */
#include <errno.h>
#include <string.h>

#include "control_client.h"
#include "control_server.h"
#include "test_control.h"
#include "util/err.h"

static int got_fatal(const control_server *cs) {
    return cs->fatal.key.seen;
}

/* One attempt whose only rank sends a Fatal (err: the errno the client is told, 0 as a
 * worker of an older build that never sets disk_full); returns the server's disk_full. */
static int fatal_case(control_server *cs, uint32_t attempt, int err, const char *message) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_begin_attempt(cs, 0, "pretrain", attempt, 1, 0) == 0, "begin");
    control_client c;
    CHECK(control_client_open(&c, cs->address, "s3cret", 0, 1, attempt, NULL, &d) == 0, "%s",
          d.msg);
    control_client_fatal(&c, 1, err, 0, message);
    int whole = strlen(message) < sizeof cs->fatal.message; /* else cut: checked by the caller */
    CHECK(pump_until(cs, got_fatal) && (!whole || strcmp(cs->fatal.message, message) == 0),
          "attempt %u: the Fatal did not arrive", attempt);
    control_client_close(&c);
    int full = cs->fatal.disk_full;
    CHECK(!full || (cs->fatal.full_rank == 0 &&
                    strcmp(cs->fatal.full_message, whole ? message : cs->fatal.message) == 0),
          "attempt %u: the full disk's message is '%s'", attempt, cs->fatal.full_message);
    return full;
}

/* Two ranks of one attempt each send a Fatal before the server reads either (rank 0's
 * connection first, so that it is read first): first (0 or 1) sends first, lost0/lost1
 * say whether each followed a peer's loss, err is the errno both say (ENOSPC: both a full
 * disk, whose rank must then be the one named); returns the rank the server names. */
static int order_case(control_server *cs, uint32_t attempt, int first, int lost0, int lost1,
                      int err) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_begin_attempt(cs, 0, "pretrain", attempt, 2, 0) == 0, "begin");
    control_client c[2];
    for (uint32_t r = 0; r < 2; r++) {
        CHECK(control_client_open(&c[r], cs->address, "s3cret", r, 2, attempt, NULL, &d) == 0, "%s",
              d.msg);
        pump(cs, 50); /* accepted in rank order */
    }
    int lost[2] = {lost0, lost1};
    for (int k = 0; k < 2; k++) {
        int r = k == 0 ? first : 1 - first;
        control_client_fatal(&c[r], 1, err, lost[r], r ? "rank 1 failed" : "rank 0 failed");
        sleep_s(0.01); /* the two times differ */
    }
    sleep_s(0.05);               /* both on the server's sockets before a pump reads them */
    for (int i = 0; i < 20; i++) /* a second: both read */
        pump(cs, 50);
    int named = cs->fatal.key.seen ? (int)cs->fatal.rank : -1;
    CHECK(err != ENOSPC || (cs->fatal.disk_full && (int)cs->fatal.full_rank == named),
          "attempt %u: the full disk is rank %u's, the failure rank %d's", attempt,
          cs->fatal.full_rank, named);
    for (int r = 0; r < 2; r++)
        control_client_close(&c[r]);
    return named;
}

int fatal(const char *run_dir) {
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    char old_words[256];
    snprintf(old_words, sizeof old_words, "x.bin: cannot write tensor w: %s", strerror(EDQUOT));
    /* the code alone: a message in words baton run does not know (another locale) */
    CHECK(fatal_case(&cs, 1, ENOSPC, "x.bin: cannot write tensor w: plus de place") == 1,
          "a Fatal with disk_full set was not taken for a full disk");
    CHECK(fatal_case(&cs, 2, EDQUOT, "x.bin: quota") == 1, "EDQUOT was not a full disk");
    /* an older worker: no field, the words */
    CHECK(fatal_case(&cs, 3, 0, old_words) == 1,
          "an older worker's Fatal saying '%s' was not taken for a full disk", strerror(EDQUOT));
    /* the field, when there, is believed over the words */
    CHECK(fatal_case(&cs, 4, EIO, old_words) == 0,
          "a Fatal whose errno is EIO was taken for a full disk by its words");
    CHECK(fatal_case(&cs, 5, 0, "out of memory") == 0, "out of memory taken for a full disk");
    /* which rank names the failure, whatever the order they are read in */
    CHECK(order_case(&cs, 6, 1, 0, 0, 0) == 1, "rank 1 sent first and was not named");
    CHECK(order_case(&cs, 7, 0, 0, 0, 0) == 0, "rank 0 sent first and was not named");
    CHECK(order_case(&cs, 8, 0, 1, 0, 0) == 1,
          "rank 0's reaction to a peer's loss, sent first, was named over rank 1's own failure");
    CHECK(order_case(&cs, 9, 1, 1, 1, 0) == 1, "of two reactions, the first sent was not named");
    CHECK(order_case(&cs, 10, 1, 0, 0, ENOSPC) == 1, "of two full disks, the first sent not named");
    /* a message longer than kept: its end, the errno's words, stays */
    char longer[1500];
    memset(longer, 'x', sizeof longer);
    snprintf(longer + sizeof longer - 40, 40, ": %s", strerror(ENOSPC));
    CHECK(fatal_case(&cs, 11, ENOSPC, longer) == 1, "the long Fatal was not a full disk");
    size_t n = strlen(cs.fatal.message), e = strlen(strerror(ENOSPC));
    CHECK(n < sizeof longer - 1 && n >= e &&
              strcmp(cs.fatal.message + n - e, strerror(ENOSPC)) == 0 &&
              strstr(cs.fatal.message, " ... ") != NULL,
          "a long Fatal kept as '...%s'", cs.fatal.message + (n > 60 ? n - 60 : 0));
    control_server_close(&cs);
    printf("control fatal: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
