/* The metrics sink on a full disk (rec_append.h, control_jsonl.h), the failing writes made
 * by the test hook BATON_FAULT_METRICS_ENOSPC=N-M (set here, one window per process: each
 * case is its own run of test_control), an append failing after half its bytes as a short
 * write on a full disk does:
 *
 *   test_control enospc RUN_DIR moment
 *     Writes 5-15 fail (the disk full for a moment), a validation among them: metrics.jsonl
 *     holds steps 1-40 once each, in order, every line whole; valid.jsonl its line; the
 *     event file only whole records (check-unit.sh reads it back, CRCs and values); each
 *     file said once as failing and once as written again.
 *   test_control enospc RUN_DIR rewind
 *     Attempt 0 writes steps 1-30, attempt 1 resumes from step 20 while the disk is full:
 *     the rewind's rewrite cannot be written (the temp file), yet steps 21-30 are attempt
 *     1's once each, never attempt 0's and attempt 1's both.
 *   test_control enospc RUN_DIR edited
 *     The same where a line of another stage follows the repeated ones (an edited file:
 *     no cut in place, a rewrite that fails): the rewind waits, the records are held back
 *     meanwhile, and each step is there once when the disk has room again.
 *   test_control enospc RUN_DIR reopen
 *     No full disk: a rewind rewrites (stage b's line after a's), and opening the new file
 *     fails (EMFILE, BATON_FAULT_METRICS_REOPEN=1-3) there and at the next two tries: the
 *     records meanwhile are held back, never appended to the old file (unlinked), and
 *     written to the new one once it opens: each step there once.
 *   test_control enospc RUN_DIR torn
 *     metrics.jsonl ends in a torn line (a writer killed mid-line) and cutting it off at
 *     open fails (EIO, BATON_FAULT_METRICS_CUT=1-2), and so does the cut before the first
 *     write: the open succeeds, that record is held back, said, and written once the cut
 *     is done; steps 1-10 once each, nothing held back or lost at close.
 *   test_control enospc RUN_DIR slow
 *     The disk full (RLIMIT_FSIZE at metrics.jsonl's size) for steps 6-25, then room for
 *     three and a half records more with each later step: the records held back are written as
 *     they fit, fewer held after each step, none held by step 40; steps 1-40 once each.
 *   test_control enospc RUN_DIR quiet
 *     The control server's sink: steps 9-10 held back (writes 18-21 fail) and no record
 *     after them: the server's next handle a second later writes them, and its drain at an
 *     attempt's end writes those held back since (RLIMIT_FSIZE), both before the close.
 *   test_control enospc RUN_DIR bound
 *     A disk full for long with a small limit on what is held back: records past it are
 *     dropped and said, and the file is still whole, no step twice. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "control_metrics.h"
#include "util/clock.h"
#include "test_control.h"

static char notes[16384];

static void note(void *arg, const char *msg) {
    (void)arg;
    size_t l = strlen(notes);
    snprintf(notes + l, sizeof notes - l, "%s\n", msg);
}

static void open_sink(control_metrics_sink *s, const char *run_dir) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_metrics_open(s, run_dir, &d) == 0, "open: %s", d.msg);
    control_metrics_set_note(s, note, NULL);
}

/* Steps from..to of stage `stage` (offset 100 * stage) in attempt `attempt`; a record
 * dropped is an error unless may_drop. */
static int may_drop;
static void write_steps(control_metrics_sink *s, uint32_t stage, uint32_t attempt, uint64_t from,
                        uint64_t to) {
    control_metrics_where w = {stage ? "b" : "a", stage, attempt, 100 * stage};
    for (uint64_t k = from; k <= to; k++) {
        bt_diag d;
        bt_diag_init(&d);
        control_metrics m = {.step = k,
                             .loss = 5.0 - 0.01 * (double)k,
                             .lr = 1e-3,
                             .grad_norm = 0.5,
                             .tokens_per_s = 1000.0 * (attempt + 1),
                             .time = 1.7e9 + (double)k};
        int rc = control_metrics_write(s, &w, &m, &d);
        CHECK(rc == 0 || (may_drop && strstr(d.msg, "a record dropped")), "step %llu: %s",
              (unsigned long long)k, d.msg);
    }
}

/* metrics.jsonl's lines must be want's (stage, step, attempt), n of them, each whole. */
static void expect_lines(const char *run_dir, const uint32_t (*want)[3], size_t n) {
    char path[4200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    size_t i = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned st, at;
        unsigned long long k;
        const char *p = strstr(line, "\"stage_index\": ");
        int ok =
            strncmp(line, "{\"time\": ", 9) == 0 && strstr(line, "}\n") != NULL &&
            strchr(line + 1, '{') == NULL && p &&
            sscanf(p, "\"stage_index\": %u, \"attempt\": %u, \"step\": %llu", &st, &at, &k) == 3;
        CHECK(ok, "%s: line %zu is not one whole record: %s", path, i + 1, line);
        if (ok && i < n)
            CHECK(st == want[i][0] && k == want[i][1] && at == want[i][2],
                  "%s: line %zu is stage %u step %llu attempt %u, expected %u %u %u", path, i + 1,
                  st, k, at, want[i][0], want[i][1], want[i][2]);
        i++;
    }
    CHECK(i == n, "%s: %zu lines, expected %zu", path, i, n);
    if (f != NULL) fclose(f);
}

static size_t fill(uint32_t (*want)[3], size_t n, uint32_t stage, uint32_t from, uint32_t to,
                   uint32_t attempt) {
    for (uint32_t k = from; k <= to; k++)
        want[n][0] = stage, want[n][1] = k, want[n][2] = attempt, n++;
    return n;
}

static void expect_note(const char *what) {
    CHECK(strstr(notes, what) != NULL, "no note \"%s\" among:\n%s", what, notes);
}

static void moment(const char *run_dir) {
    control_metrics_sink s;
    open_sink(&s, run_dir);       /* write 1: the event file's first record */
    write_steps(&s, 0, 0, 1, 12); /* steps k: writes 2k (metrics.jsonl) and 2k + 1 (events) */
    bt_diag d;
    bt_diag_init(&d);
    control_metrics_where w = {"a", 0, 0, 0};
    CHECK(control_metrics_write_valid(&s, &w, 12, 4.5, 8, 1.7e9 + 12.5, &d) == 0, "valid: %s",
          d.msg);
    write_steps(&s, 0, 0, 13, 40);
    CHECK(s.jsonl.a.n_held == 0 && s.valid.a.n_held == 0 && s.tb.a.n_held == 0,
          "records still held back: %zu, %zu, %zu", s.jsonl.a.n_held, s.valid.a.n_held,
          s.tb.a.n_held);
    control_metrics_close(&s);
    uint32_t want[40][3];
    expect_lines(run_dir, want, fill(want, 0, 0, 1, 40, 0));
    expect_note("metrics.jsonl: cannot append: No space left on device");
    expect_note("metrics.jsonl: written again: the ");
    expect_note("valid.jsonl: written again: the 1 record(s)");
    expect_note("tfevents");
}

static void rewind_full(const char *run_dir) {
    control_metrics_sink s;
    open_sink(&s, run_dir);
    write_steps(&s, 0, 0, 1, 30);  /* writes 2-61 */
    write_steps(&s, 0, 1, 21, 30); /* the rewind's rewrite and writes 62-70 fail */
    control_metrics_close(&s);
    uint32_t want[30][3];
    size_t n = fill(want, 0, 0, 1, 20, 0);
    expect_lines(run_dir, want, fill(want, n, 0, 21, 30, 1));
    expect_note("metrics.jsonl: written again");
}

static void edited(const char *run_dir) {
    control_metrics_sink s;
    open_sink(&s, run_dir);
    write_steps(&s, 0, 0, 1, 30);  /* writes 2-61 */
    write_steps(&s, 1, 0, 1, 1);   /* 62, 63: stage b's line after a's (an edited file) */
    write_steps(&s, 0, 1, 21, 30); /* the rewrite (64) fails, retried with each record */
    control_metrics_close(&s);
    uint32_t want[31][3];
    size_t n = fill(want, 0, 0, 1, 20, 0);
    n = fill(want, n, 1, 1, 1, 0);
    expect_lines(run_dir, want, fill(want, n, 0, 21, 30, 1));
    expect_note("metrics.jsonl: cannot drop the records a restart repeats");
    expect_note("metrics.jsonl: the records a restart repeats are dropped from it now");
}

static void reopen(const char *run_dir) {
    control_metrics_sink s;
    open_sink(&s, run_dir);
    write_steps(&s, 0, 0, 1, 5);
    write_steps(&s, 1, 0, 1, 1);  /* stage b's line after a's: a rewind rewrites */
    write_steps(&s, 0, 1, 3, 10); /* opens 1-3 fail: the rewrite's, its flush's, step 3's */
    control_metrics_close(&s);
    uint32_t want[11][3];
    size_t n = fill(want, 0, 0, 1, 2, 0);
    n = fill(want, n, 1, 1, 1, 0);
    expect_lines(run_dir, want, fill(want, n, 0, 3, 10, 1));
    expect_note("metrics.jsonl: cannot open for appending: Too many open files; the records "
                "held back");
    expect_note("metrics.jsonl: written again: the 1 record(s) held back are in it now");
}

static void torn(const char *run_dir) {
    control_metrics_sink s;
    unsetenv("BATON_FAULT_METRICS_CUT"); /* read once, at the first cut (none here) */
    open_sink(&s, run_dir);
    write_steps(&s, 0, 0, 1, 3);
    control_metrics_close(&s);
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "a");
    CHECK(f != NULL && fputs("{\"time\": 1700000004.0, \"stage\": \"a\", \"sta", f) >= 0,
          "%s: cannot append a torn line", path);
    if (f != NULL) fclose(f);
    setenv("BATON_FAULT_METRICS_CUT", "1-2", 1);
    open_sink(&s, run_dir); /* the cut fails: done before the next write */
    write_steps(&s, 0, 0, 4, 10);
    CHECK(s.jsonl.a.n_held == 0 && !s.jsonl.a.hold, "records still held back: %zu (hold %d)",
          s.jsonl.a.n_held, s.jsonl.a.hold);
    control_metrics_close(&s);
    uint32_t want[10][3];
    expect_lines(run_dir, want, fill(want, 0, 0, 1, 10, 0));
    expect_note("metrics.jsonl: cannot append: Input/output error");
    expect_note("metrics.jsonl: written again: the 1 record(s) held back are in it now");
    CHECK(strstr(notes, "lost") == NULL, "records lost:\n%s", notes);
}

/* RLIMIT_FSIZE's soft limit set to `at` bytes (within the hard limit). */
static void fsize_limit(rlim_t at) {
    struct rlimit r;
    CHECK(getrlimit(RLIMIT_FSIZE, &r) == 0, "getrlimit: %s", strerror(errno));
    r.rlim_cur = r.rlim_max == RLIM_INFINITY || at < r.rlim_max ? at : r.rlim_max;
    CHECK(setrlimit(RLIMIT_FSIZE, &r) == 0, "setrlimit: %s", strerror(errno));
}

static void slow(const char *run_dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    signal(SIGXFSZ, SIG_IGN); /* as baton run does: EFBIG, as a full disk's ENOSPC */
    control_metrics_sink s;
    open_sink(&s, run_dir);
    write_steps(&s, 0, 0, 1, 5);
    struct stat st;
    CHECK(stat(path, &st) == 0, "%s: %s", path, strerror(errno));
    rlim_t cap = (rlim_t)st.st_size, rec = (rlim_t)st.st_size / 5;
    fsize_limit(cap); /* no room for one more record */
    write_steps(&s, 0, 0, 6, 25);
    size_t held = s.jsonl.a.n_held;
    CHECK(held == 20, "%zu records held back, expected 20", held);
    for (uint64_t k = 26; k <= 40; k++) {
        cap += 3 * rec + rec / 2; /* room for three records and a half */
        fsize_limit(cap);
        write_steps(&s, 0, 0, k, k);
        CHECK(held == 0 || s.jsonl.a.n_held < held, "step %llu: %zu records held back, %zu before",
              (unsigned long long)k, s.jsonl.a.n_held, held);
        held = s.jsonl.a.n_held;
    }
    CHECK(held == 0, "%zu records still held back at step 40", held);
    fsize_limit(RLIM_INFINITY);
    control_metrics_close(&s);
    uint32_t want[40][3];
    expect_lines(run_dir, want, fill(want, 0, 0, 1, 40, 0));
    expect_note("metrics.jsonl: cannot append: File too large");
    expect_note("metrics.jsonl: written again: the ");
}

static void quiet(const char *run_dir) {
    signal(SIGXFSZ, SIG_IGN);
    control_server cs;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(&cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    control_metrics_set_note(&cs.sink, note, NULL);
    write_steps(&cs.sink, 0, 0, 1, 10); /* write 1: the event file's first; step k: 2k, 2k+1 */
    CHECK(cs.sink.jsonl.a.n_held == 2, "%zu records held back, expected 2", cs.sink.jsonl.a.n_held);
    double now = bt_clock_now();
    control_server_handle(&cs, NULL, 0, now + 2);
    CHECK(cs.sink.jsonl.a.n_held == 0 && cs.sink.tb.a.n_held == 0,
          "after a handle: %zu and %zu records held back", cs.sink.jsonl.a.n_held,
          cs.sink.tb.a.n_held);
    uint32_t want[12][3];
    expect_lines(run_dir, want, fill(want, 0, 0, 1, 10, 0));
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    CHECK(stat(path, &st) == 0, "%s: %s", path, strerror(errno));
    fsize_limit((rlim_t)st.st_size);
    write_steps(&cs.sink, 0, 0, 11, 12);
    fsize_limit(RLIM_INFINITY);
    CHECK(cs.sink.jsonl.a.n_held == 2, "%zu records held back, expected 2", cs.sink.jsonl.a.n_held);
    control_server_drain(&cs, 0); /* the handle's second not over: the drain's own flush */
    CHECK(cs.sink.jsonl.a.n_held == 0, "after a drain: %zu records held back",
          cs.sink.jsonl.a.n_held);
    expect_lines(run_dir, want, fill(want, 0, 0, 1, 12, 0));
    control_server_close(&cs);
}

static void bound(const char *run_dir) {
    control_metrics_sink s;
    open_sink(&s, run_dir);
    s.jsonl.a.max_held = 2000; /* some 8 records */
    may_drop = 1;
    write_steps(&s, 0, 0, 1, 40); /* writes 10-50 fail: steps 5-25 */
    control_metrics_close(&s);
    expect_note("of records held back: dropping the new ones until it can be written");
    expect_note("dropped meanwhile (over the limit on those held back) are not");
    /* steps 1-4, those held back (from 5 on), then those after the disk had room */
    char path[4200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    unsigned long long last = 0, k;
    size_t n = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "\"step\": ");
        int ok = p && sscanf(p, "\"step\": %llu", &k) == 1 && strstr(line, "}\n") != NULL;
        CHECK(ok && k > last, "%s: line %zu: not whole or not past step %llu: %s", path, n + 1,
              last, line);
        last = ok ? k : last, n++;
    }
    CHECK(n > 10 && n < 40 && last == 40, "%s: %zu lines up to step %llu", path, n, last);
    if (f != NULL) fclose(f);
}

int enospc(const char *run_dir, const char *which) {
    static const struct {
        const char *name, *window, *reopen;
        void (*fn)(const char *);
    } cases[] = {{"moment", "10-30", "0", moment}, {"rewind", "62-70", "0", rewind_full},
                 {"edited", "64-72", "0", edited}, {"reopen", "0", "1-3", reopen},
                 {"torn", "0", "0", torn},         {"bound", "10-50", "0", bound},
                 {"slow", "0", "0", slow},         {"quiet", "18-21", "0", quiet}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(which, cases[i].name) != 0) continue;
        setenv("BATON_FAULT_METRICS_ENOSPC", cases[i].window, 1);
        setenv("BATON_FAULT_METRICS_REOPEN", cases[i].reopen, 1);
        cases[i].fn(run_dir);
        printf("control enospc %s: %s (%d failure(s))\n", which, failures ? "FAILED" : "ok",
               failures);
        if (failures) fprintf(stderr, "notes:\n%s", notes);
        return failures ? 1 : 0;
    }
    fprintf(stderr, "enospc: no case %s\n", which);
    return 2;
}
