/* stages/metrics_log.c: rank 0's metrics log.
 *   - a record written in part (the file size limit reached, as a full disk stops a write
 *     midway) is cut off again, so that the records appended once there is room again
 *     are read back, every one whole and in order;
 *   - a reader's callback that fails is not reported as a read error of the log. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "check.h"
#include "metrics_log.h"

static int collect(void *arg, const Baton__Metrics *m) {
    uint64_t *steps = arg;
    if (steps[0] < 63) steps[++steps[0]] = m->step;
    return 0;
}

static int refuse(void *arg, const Baton__Metrics *m) {
    (void)arg, (void)m;
    return BT_EIO; /* as a write of the record fails, having said why elsewhere */
}

static int append_step(metrics_log *l, uint64_t step, bt_diag *d) {
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = m.has_loss = 1, m.step = step, m.loss = 1.0 / (double)step;
    return metrics_log_append(l, &m, d);
}

/* Records 1..; the size limit reached within one (a short write), then lifted: records
 * after it are readable, and the torn one is gone. */
static void torn_then_room(const char *path) {
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN); /* a write over the limit fails with EFBIG instead */
    metrics_log l;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(metrics_log_open(&l, path, &d) == 0);
    CHECK(append_step(&l, 1, &d) == 0);
    CHECK(append_step(&l, 2, &d) == 0);
    /* room for a third of the next record: it is written in part */
    lim = old;
    lim.rlim_cur = (rlim_t)l.size + 6;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK(append_step(&l, 3, &d) == BT_EIO);
    CHECK_STR_CONTAINS(d.msg, "cannot append: short write (the torn record cut off)");
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == l.size);
    CHECK(append_step(&l, 4, &d) == 0);
    CHECK(append_step(&l, 5, &d) == 0);
    metrics_log_close(&l);
    uint64_t steps[64] = {0};
    int busy = 0;
    bt_diag_init(&d);
    CHECK(metrics_log_read(path, 0, &busy, collect, steps, &d) == 0);
    CHECK_EQ_U64(steps[0], 4);
    CHECK(steps[1] == 1 && steps[2] == 2 && steps[3] == 4 && steps[4] == 5);
}

/* A callback's failure comes back as it is, with no "cannot read" of the log. */
static void callback_fails(const char *path) {
    bt_diag d;
    bt_diag_init(&d);
    int busy = 0;
    errno = ENOENT; /* a stale errno the old message would have shown */
    CHECK(metrics_log_read(path, 0, &busy, refuse, NULL, &d) == BT_EIO);
    CHECK(strstr(d.msg, "cannot read") == NULL);
}

int main(void) {
    char dir[] = "/tmp/baton-test-mlog.XXXXXX", path[128];
    if (mkdtemp(dir) == NULL) return 1;
    snprintf(path, sizeof path, "%s/s00-a00.metrics", dir);
    torn_then_room(path);
    callback_fails(path);
    unlink(path);
    rmdir(dir);
    return check_status();
}
