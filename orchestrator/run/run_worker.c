#include "run_worker.h"

#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "journal.h"
#include "launch.h"

int run_worker_check(const char *worker, bt_diag *diag) {
    char *exe = NULL;
    bt_diag d;
    bt_diag_init(&d);
    int rc = launch_resolve_program(worker, &exe, &d);
    free(exe);
    if (rc != 0) bt_diag_set(diag, "%s: %s", RUN_LAUNCH_FAILED, d.msg[0] ? d.msg : bt_strerror(rc));
    return rc;
}

/* Whether detail (a failure's) starts with words. */
static int run_worker_starts(const char *detail, const char *words) {
    return detail && strncmp(detail, words, strlen(words)) == 0;
}

/* Whether the journal's last failure is a launch failure, or a worker of another build,
 * not retried. */
static int run_worker_last_failure_launch(const char *run_dir_path) {
    Baton__JournalRecord **v = NULL;
    size_t n = 0;
    journal_tail tail;
    bt_diag ignore;
    bt_diag_init(&ignore);
    if (journal_read(run_dir_path, &v, &n, &tail, &ignore) != 0) return 0;
    int launch = 0;
    for (size_t i = n; i-- > 0;) {
        if (v[i]->kind != BATON__JOURNAL_RECORD__KIND__FAILURE) continue;
        launch = v[i]->has_retryable && !v[i]->retryable &&
                 (run_worker_starts(v[i]->detail, RUN_LAUNCH_FAILED) ||
                  run_worker_starts(v[i]->detail, RUN_WORKER_OTHER_BUILD));
        break;
    }
    journal_records_free(v, n);
    return launch;
}

int run_worker_unusable(const char *run_dir_path, const char *kept) {
    bt_diag ignore;
    bt_diag_init(&ignore);
    return run_worker_check(kept, &ignore) != 0 || run_worker_last_failure_launch(run_dir_path);
}

int run_worker_keep(const run_dir *d, const char *worker, bt_diag *diag) {
    char path[4200];
    run_dir_file(d, "worker", path, sizeof path);
    return ckpt_write_file_atomic(path, worker, strlen(worker), diag);
}
