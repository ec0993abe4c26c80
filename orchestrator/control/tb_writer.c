/* TensorBoard event files (tb_writer.h). */
#include "tb_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/crc32c.h"
#include "tensorboard.pb-c.h"
#include "util/file.h"

uint32_t tb_masked_crc(const void *data, size_t n) {
    uint32_t c = crc32c_update(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void tb_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* One TFRecord holding ev. */
static int tb_write_event(tb_writer *w, const Tensorboard__Event *ev, bt_diag *diag) {
    size_t n = tensorboard__event__get_packed_size(ev);
    uint8_t *rec = malloc(n + 16);
    if (rec == NULL) return BT_ENOMEM;
    for (int i = 0; i < 8; i++)
        rec[i] = (uint8_t)((uint64_t)n >> (8 * i));
    tb_le32(rec + 8, tb_masked_crc(rec, 8));
    tensorboard__event__pack(ev, rec + 12);
    tb_le32(rec + 12 + n, tb_masked_crc(rec + 12, n));
    /* whole or not at all: TensorBoard's reader takes a torn record for the file's end */
    int rc = rec_append_write(&w->a, rec, n + 16, NULL, diag);
    free(rec);
    return rc;
}

/* Opens a new file named after the time and host (and pid), refusing to reuse one. */
static int tb_create(tb_writer *w, const char *dir, bt_diag *diag) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (int i = 0; host[i]; i++)
        if (host[i] == '/') host[i] = '_';
    long long secs = (long long)time(NULL);
    int rc = BT_EIO;
    /* the pid, then a count, where the name is taken: a process that executed itself again
     * (run_afresh.h) keeps its pid, and may open its file in the same second */
    for (int attempt = 0; attempt < 16 && rc != 0; attempt++) {
        if (attempt == 0)
            snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s", dir, secs, host);
        else if (attempt == 1)
            snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld", dir, secs, host,
                     (long)getpid());
        else
            snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%ld.%d", dir, secs,
                     host, (long)getpid(), attempt);
        rc = rec_append_open(&w->a, w->path, O_EXCL, NULL);
        if (rc != 0 && errno != EEXIST) break;
    }
    if (rc != 0)
        bt_diag_set(diag, "%s: cannot create a TensorBoard event file: %s", w->path,
                    strerror(errno));
    return rc;
}

int tb_writer_open(tb_writer *w, const char *dir, bt_diag *diag) {
    memset(w, 0, sizeof *w);
    w->a.fd = -1;
    if (bt_mkdir_private(dir) != 0) {
        bt_diag_set(diag, "%s: cannot create the TensorBoard directory: %s", dir, strerror(errno));
        return BT_EIO;
    }
    int rc = tb_create(w, dir, diag);
    if (rc != 0) return rc;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.has_wall_time = 1;
    ev.wall_time = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    rc = tb_write_event(w, &ev, diag);
    if (rc != 0) tb_writer_close(w);
    return rc;
}

/* ev (its what filled in) stamped with step and wall_time and written. */
static int tb_write_at(tb_writer *w, Tensorboard__Event *ev, int64_t step, double wall_time,
                       bt_diag *diag) {
    ev->has_wall_time = 1, ev->wall_time = wall_time;
    ev->has_step = 1, ev->step = step;
    return tb_write_event(w, ev, diag);
}

int tb_writer_scalars(tb_writer *w, int64_t step, double wall_time, const char *const *tags,
                      const float *values, size_t n, bt_diag *diag) {
    if (w->a.fd < 0) return BT_EINVAL;
    Tensorboard__SummaryValue vals[16], *pv[16];
    if (n > 16) return BT_EINVAL;
    for (size_t i = 0; i < n; i++) {
        tensorboard__summary_value__init(&vals[i]);
        vals[i].tag = (char *)tags[i];
        vals[i].value_case = TENSORBOARD__SUMMARY_VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = values[i];
        pv[i] = &vals[i];
    }
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = n;
    sum.value = pv;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return tb_write_at(w, &ev, step, wall_time, diag);
}

int tb_writer_session_start(tb_writer *w, int64_t step, double wall_time, bt_diag *diag) {
    if (w->a.fd < 0) return BT_EINVAL;
    Tensorboard__SessionLog log = TENSORBOARD__SESSION_LOG__INIT;
    log.has_status = 1, log.status = TENSORBOARD__SESSION_LOG__SESSION_STATUS__START;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SESSION_LOG;
    ev.session_log = &log;
    return tb_write_at(w, &ev, step, wall_time, diag);
}

void tb_writer_close(tb_writer *w) {
    rec_append_close(&w->a);
}
