/* The metrics sink (orchestrator/control) and the replay of a rank's metrics log into
 * metrics.jsonl, inside one process: test_control's subcommands of that concern (main and
 * the connection tests are in test_control.c, what both share in test_control.h).
 *
 *   test_control replay RUN_DIR
 *     The metrics sink across a restart: attempt 0 writes steps 1-6 of stage 1 (offset
 *     100) and is killed mid-line; a new sink (baton resume) drops the torn line, and
 *     attempt 1, resumed from a checkpoint at step 3, writes steps 4-8: metrics.jsonl
 *     must end with each step once (1-3 of attempt 0, 4-8 of attempt 1) and the second
 *     event file holds TensorBoard's restart marker at step 104 (check-unit.sh reads it).
 *   test_control stages RUN_DIR
 *     Records told apart by stage and step: stage a's 10 steps, b's first 6; b's steps 7-8
 *     under an offset as a recipe whose a has 4 steps counts it are no restart; b
 *     restarted from its step 4 drops only b's steps from 5 on, never a's.
 *   test_control gap RUN_DIR
 *     rank 0's metrics log replayed over a gap in the middle of metrics.jsonl (a full
 *     outbox dropped steps 5-7, 8-10 arrived): every step once, in order, and again
 *     nothing; and over an attempt's first steps dropped, held of the attempt before;
 *     over a gap in a log with holes (steps and the validation that only metrics.jsonl
 *     and valid.jsonl hold are kept, in order), also when an edited metrics.jsonl holds
 *     them out of order and one twice; a replay into a metrics.jsonl that cannot be
 *     written says so (not "cannot read").
 *     check-unit.sh reads the event file: the restart marker at the gap's first step.
 *   test_control orphans RUN_DIR
 *     A log dead from step 3 and step 2 lost live: 19998 records only metrics.jsonl
 *     holds are written back without holding them all in memory, each step once.
 *   test_control backlog RUN_DIR
 *     A server that does not read (baton run stopped): 20000 metrics sent meanwhile over a
 *     socket with a small send buffer wait in the client's outbox, none of the sends
 *     waits, the channel stays open, and closing the client waits until the server,
 *     reading again, has them all: metrics.jsonl holds every step once, in order. An
 *     outbox over its limit drops the newest messages, the channel stays, and those
 *     before arrive. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control_client.h"
#include "control_internal.h"
#include "control_server.h"
#include "metrics_log.h"
#include "stage_spec.pb-c.h"
#include "test_control.h"
#include "util/clock.h"

/* ---- replay ---------------------------------------------------------------------------- */

static void replay_attempt(const char *run_dir, uint32_t attempt, uint64_t from, uint64_t to) {
    control_metrics_sink sink;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_metrics_open(&sink, run_dir, &d) == 0, "open: %s", d.msg);
    control_metrics_where w = {"pretrain", 1, attempt, 100};
    for (uint64_t step = from; step <= to; step++) {
        /* tokens_per_s tells the attempts apart, as a real replay's timing would */
        control_metrics m = {.step = step,
                             .loss = 5.0 - 0.1 * (double)step,
                             .lr = 1e-3,
                             .grad_norm = 0.5,
                             .tokens_per_s = 1000.0 * (attempt + 1),
                             .time = 1.7e9 + (double)step};
        CHECK(control_metrics_write(&sink, &w, &m, &d) == 0, "step %llu: %s",
              (unsigned long long)step, d.msg);
    }
    /* the closing validation after the last step; a second one of it is not written */
    for (int k = 0; k < 2; k++)
        CHECK(control_metrics_write_valid(&sink, &w, to, 4.0 + attempt, 64, 1.7e9 + 20, &d) == 0,
              "valid: %s", d.msg);
    control_metrics_close(&sink);
}

int replay(const char *run_dir) {
    char path[4200];
    replay_attempt(run_dir, 0, 1, 6);
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "a");
    CHECK(f != NULL && fputs("{\"time\": 1.7e9, \"stage\": \"pretr", f) >= 0, "torn line");
    if (f != NULL) fclose(f);
    snprintf(path, sizeof path, "%s/valid.jsonl", run_dir);
    f = fopen(path, "a");
    CHECK(f != NULL && fputs("{\"time\": 1.7e9, \"stage\": \"pretr", f) >= 0, "torn valid line");
    if (f != NULL) fclose(f);
    sleep_s(1.1); /* the second event file gets a name of its own (unix seconds) */
    replay_attempt(run_dir, 1, 4, 8);
    printf("control replay: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- stages: records told apart by stage and step -------------------------------------- */

/* Stage `stage` (named name, after offset steps of the stages before it) writes steps
 * from..to in attempt `attempt`, and its closing validation after `to` when valid. */
static void stages_write(const char *run_dir, const char *name, uint32_t stage, uint32_t attempt,
                         uint64_t offset, uint64_t from, uint64_t to, int valid) {
    control_metrics_sink sink;
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_metrics_open(&sink, run_dir, &d) == 0, "open: %s", d.msg);
    control_metrics_where w = {name, stage, attempt, offset};
    for (uint64_t step = from; step <= to; step++) {
        control_metrics m = {.step = step, .loss = 5.0, .lr = 1e-3, .time = 1.7e9 + (double)step};
        CHECK(control_metrics_write(&sink, &w, &m, &d) == 0, "step %llu: %s",
              (unsigned long long)step, d.msg);
    }
    if (valid)
        CHECK(control_metrics_write_valid(&sink, &w, to, 4.0, 64, 1.7e9 + 20, &d) == 0, "valid: %s",
              d.msg);
    control_metrics_close(&sink);
}

/* a's 10 steps, b's first 6; then b's offset as a recipe whose a has 4 steps counts it:
 * b's steps 7-8 are no restart, whatever their global steps; then b restarted from its
 * step 4: only b's steps from 5 on go, never a's. */
int stages(const char *run_dir) {
    stages_write(run_dir, "a", 0, 0, 0, 1, 10, 1);
    stages_write(run_dir, "b", 1, 0, 10, 1, 6, 0);
    sleep_s(1.1); /* an event file of its own (unix seconds) */
    stages_write(run_dir, "b", 1, 1, 4, 7, 8, 0);
    sleep_s(1.1);
    stages_write(run_dir, "b", 1, 2, 4, 5, 9, 0);
    printf("control stages: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- gap ------------------------------------------------------------------------------- */

/* Every field metrics.jsonl writes, with numbers a short format would round, a null
 * (odd steps' grad_norm), fp16's and MoE's (step 4): a record written back from
 * metrics.jsonl must come out the same. */
static void gap_fields(Baton__Metrics *m, uint64_t k) {
    static float loads[3] = {0.5f, 1.2345678f, 1.2654322f};
    m->has_grad_norm = m->has_lr = m->has_mfu = m->has_step_time_s = 1;
    m->has_memory_bytes = m->has_skipped_steps = 1;
    m->grad_norm = k % 2 ? NAN : 0.1 * (double)k, m->lr = 3e-4 / 7.0, m->mfu = 1.0 / 3.0;
    m->step_time_s = 0.123456789, m->memory_bytes = 123456789012ull, m->skipped_steps = k / 3;
    if (k != 4) return;
    m->has_loss_scale = m->has_overflow = 1, m->loss_scale = 65536.0, m->overflow = 1;
    m->has_moe_load_max_mean = m->has_moe_dropped = m->has_moe_aux_loss = 1;
    m->moe_load_max_mean = 1.2654322, m->moe_dropped = 17, m->moe_aux_loss = 0.01234567;
    m->n_moe_expert_load = 3, m->moe_expert_load = loads;
}

/* Step k of stage 1 (w) as rank 0 sends it: logged into l (unless an append failed: a
 * hole in the log) and received live (unless dropped by a full outbox while baton run was
 * stopped). */
static void gap_send(control_server *cs, metrics_log *l, const control_metrics_where *w, uint64_t k,
                     int logged, int live) {
    bt_diag d;
    bt_diag_init(&d);
    Baton__Metrics m = BATON__METRICS__INIT;
    m.has_step = m.has_loss = m.has_time = m.has_tokens_per_s = 1;
    m.step = k, m.loss = 5.0 - 0.1 * (double)k, m.time = 1.7e9 + (double)k;
    m.tokens_per_s = 1000.0 * (w->attempt + 1);
    gap_fields(&m, k);
    if (logged) CHECK(metrics_log_append(l, &m, &d) == 0, "append: %s", d.msg);
    control_metrics c;
    control_metrics_from(&m, 0, m.time, &c);
    if (live) CHECK(control_metrics_write(&cs->sink, w, &c, &d) == 0, "write: %s", d.msg);
}

/* Steps from..to of stage 1 (offset 100) as rank 0 sends them (gap_send): logged unless
 * their bit of unlogged is set, received live unless their bit of lost is. valid: the
 * closing validation after step `to`, 0 none, else 1 received live, 2 logged, 3 both. */
static void gap_steps(control_server *cs, const char *run_dir, uint32_t attempt, uint64_t from,
                      uint64_t to, uint64_t lost, uint64_t unlogged, int valid) {
    control_metrics_where w = {"pretrain", 1, attempt, 100};
    char path[4200];
    bt_diag d;
    bt_diag_init(&d);
    metrics_log_path(run_dir, 1, attempt, path, sizeof path);
    metrics_log l;
    CHECK(metrics_log_open(&l, path, &d) == 0, "log: %s", d.msg);
    for (uint64_t k = from; k <= to; k++)
        gap_send(cs, &l, &w, k, !(unlogged >> k & 1), !(lost >> k & 1));
    Baton__Metrics v = BATON__METRICS__INIT;
    v.has_step = v.has_time = v.has_valid_loss = v.has_valid_windows = 1;
    v.step = to, v.time = 1.7e9 + (double)to + 0.5, v.valid_loss = 4.5, v.valid_windows = 8;
    if (valid & 2) CHECK(metrics_log_append(&l, &v, &d) == 0, "append: %s", d.msg);
    if (valid & 1)
        CHECK(control_metrics_write_valid(&cs->sink, &w, to, 4.5, 8, v.time, &d) == 0, "valid: %s",
              d.msg);
    metrics_log_close(&l);
}

/* Steps of [lost_from, lost_to] as a bit mask. */
static uint64_t gap_mask(uint64_t lo, uint64_t hi) {
    uint64_t m = 0;
    for (uint64_t k = lo; k <= hi && k < 64; k++)
        m |= 1ull << k;
    return m;
}

/* Steps from..to, every one logged, received live unless in [lost_from, lost_to]. */
static void gap_attempt(control_server *cs, const char *run_dir, uint32_t attempt, uint64_t from,
                        uint64_t to, uint64_t lost_from, uint64_t lost_to) {
    gap_steps(cs, run_dir, attempt, from, to, gap_mask(lost_from, lost_to), 0, 0);
}

/* Replays stage 1's attempt; its count of records metrics.jsonl lacked must be want. */
static void gap_replay(control_server *cs, const char *run_dir, uint32_t attempt, unsigned want) {
    control_metrics_where w = {"pretrain", 1, attempt, 100};
    char path[4200];
    bt_diag d;
    bt_diag_init(&d);
    metrics_log_path(run_dir, 1, attempt, path, sizeof path);
    unsigned n = 0;
    int busy = 0;
    CHECK(control_server_replay(cs, &w, path, 0, &n, &busy, &d) == 0, "replay: %s", d.msg);
    CHECK(n == want && !busy, "attempt %u: %u record(s) replayed, expected %u", attempt, n, want);
}

/* metrics.jsonl's (global_step, attempt) pairs must be want's n, in order. */
static void gap_expect(const char *run_dir, const uint64_t (*want)[2], size_t n) {
    char path[4200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    size_t i = 0;
    while (f != NULL && fgets(line, sizeof line, f)) {
        const char *g = strstr(line, "\"global_step\": "), *a = strstr(line, "\"attempt\": ");
        uint64_t step = g ? strtoull(g + 15, NULL, 10) : 0, at = a ? strtoull(a + 11, NULL, 10) : 0;
        CHECK(i < n && step == want[i][0] && at == want[i][1],
              "%s line %zu: global_step %llu of attempt %llu, expected %llu of attempt %llu", path,
              i + 1, (unsigned long long)step, (unsigned long long)at,
              (unsigned long long)(i < n ? want[i][0] : 0),
              (unsigned long long)(i < n ? want[i][1] : 0));
        i++;
    }
    CHECK(f != NULL && i == n, "%s: %zu lines, expected %zu", path, i, n);
    if (f != NULL) fclose(f);
}

/* metrics.jsonl whole (free it), or NULL. */
static char *gap_read(const char *run_dir) {
    char path[4300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    char *text = calloc(1, 1 << 20);
    size_t n = f && text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    CHECK(f != NULL && text != NULL && n > 0, "%s: cannot read", path);
    if (f != NULL) fclose(f);
    return text;
}

/* Every line of before is in metrics.jsonl now, unchanged (frees before). */
static void gap_expect_kept(const char *run_dir, char *before) {
    char *after = gap_read(run_dir);
    for (char *line = before, *nl; after && line && (nl = strchr(line, '\n')) != NULL;
         line = nl + 1) {
        *nl = '\0';
        CHECK(strstr(after, line) != NULL, "%s/metrics.jsonl: lost or changed: %s", run_dir, line);
    }
    free(before);
    free(after);
}

/* valid.jsonl must hold one line, of global step want. */
static void gap_expect_valid(const char *run_dir, uint64_t want) {
    char path[4300], line[4096];
    snprintf(path, sizeof path, "%s/valid.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    size_t i = 0;
    while (f != NULL && fgets(line, sizeof line, f)) {
        const char *g = strstr(line, "\"global_step\": ");
        uint64_t step = g ? strtoull(g + 15, NULL, 10) : 0;
        CHECK(step == want, "%s line %zu: global_step %llu, expected %llu", path, i + 1,
              (unsigned long long)step, (unsigned long long)want);
        i++;
    }
    CHECK(f != NULL && i == 1, "%s: %zu lines, expected 1", path, i);
    if (f != NULL) fclose(f);
}

/* metrics.jsonl's lines rewritten in the order of `order` (n line numbers, from 1): an
 * edited file. A line given twice is there twice, its second copy with tokens_per_s 2000
 * instead of 1000. */
static void gap_edit(const char *run_dir, const int *order, size_t n) {
    char *text = gap_read(run_dir), *lines[64], path[4300];
    size_t k = 0;
    for (char *p = text, *nl; text && k < 64 && (nl = strchr(p, '\n')) != NULL; p = nl + 1)
        *nl = '\0', lines[k++] = p;
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "w");
    int copies[64] = {0};
    for (size_t i = 0; f != NULL && i < n; i++) {
        CHECK(order[i] >= 1 && (size_t)order[i] <= k, "%s: no line %d", path, order[i]);
        if (order[i] < 1 || (size_t)order[i] > k) continue;
        char *line = lines[order[i] - 1];
        char *tok = copies[order[i] - 1]++ ? strstr(line, "\"tokens_per_s\": 1000") : NULL;
        if (tok != NULL) tok[16] = '2';
        fprintf(f, "%s\n", line);
    }
    CHECK(f != NULL && fclose(f) == 0, "%s: cannot write", path);
    free(text);
}

/* metrics.jsonl's line of global step `global` must hold want. */
static void gap_expect_line(const char *run_dir, uint64_t global, const char *want) {
    char path[4300], line[4096], key[64];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    snprintf(key, sizeof key, "\"global_step\": %llu,", (unsigned long long)global);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f != NULL && fgets(line, sizeof line, f))
        if (strstr(line, key) != NULL) found = strstr(line, want) != NULL;
    CHECK(found, "%s: the line of global step %llu lacks %s", path, (unsigned long long)global,
          want);
    if (f != NULL) fclose(f);
}

/* Replays stage 1's attempt 0 into a sink that cannot write: the error must be want. */
static void gap_unwritable(control_server *cs, const char *run_dir, const char *want) {
    control_metrics_where w = {"pretrain", 1, 0, 100};
    char path[4200];
    bt_diag d;
    bt_diag_init(&d);
    metrics_log_path(run_dir, 1, 0, path, sizeof path);
    unsigned n = 0;
    int busy = 0;
    int rc = control_server_replay(cs, &w, path, 0, &n, &busy, &d);
    CHECK(rc != 0 && strstr(d.msg, want) != NULL && strstr(d.msg, "cannot read") == NULL,
          "a replay into metrics.jsonl that cannot be written: rc %d, \"%s\", expected \"%s\"", rc,
          d.msg, want);
}

static void gap_open(control_server *cs, const char *run_dir) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/logs'", run_dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    memset(cs, 0, sizeof *cs);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_metrics_open(&cs->sink, run_dir, &d) == 0, "open: %s", d.msg);
}

/* A gap in the middle of an attempt (steps 5-7 dropped, 8-10 received), filled; then an
 * attempt resumed at step 3 whose first steps (4, 5) were dropped, which metrics.jsonl
 * held of the attempt before: they are the new attempt's after the replay. */
int gap(const char *run_dir) {
    char dir[4200];
    control_server cs;
    snprintf(dir, sizeof dir, "%s/middle", run_dir);
    gap_open(&cs, dir);
    gap_attempt(&cs, dir, 0, 1, 10, 5, 7);
    gap_replay(&cs, dir, 0, 3);
    gap_replay(&cs, dir, 0, 0); /* once filled, nothing more */
    uint64_t middle[10][2];
    for (int i = 0; i < 10; i++)
        middle[i][0] = 101 + (uint64_t)i, middle[i][1] = 0;
    gap_expect(dir, middle, 10);
    control_metrics_close(&cs.sink);
    snprintf(dir, sizeof dir, "%s/first", run_dir);
    gap_open(&cs, dir);
    gap_attempt(&cs, dir, 0, 1, 6, 99, 99);
    gap_attempt(&cs, dir, 1, 4, 8, 4, 5);
    gap_replay(&cs, dir, 1, 2);
    const uint64_t first[8][2] = {{101, 0}, {102, 0}, {103, 0}, {104, 1},
                                  {105, 1}, {106, 1}, {107, 1}, {108, 1}};
    gap_expect(dir, first, 8);
    control_metrics_close(&cs.sink);
    /* A log with holes, writing gone on after them: steps 4 and 11 and the closing
     * validation never reached it but were received live; step 3 was not (a full
     * outbox). The fill from step 3 on keeps what only metrics.jsonl and valid.jsonl hold. */
    snprintf(dir, sizeof dir, "%s/holed", run_dir);
    gap_open(&cs, dir);
    gap_steps(&cs, dir, 0, 1, 11, gap_mask(3, 3), gap_mask(4, 4) | gap_mask(11, 11), 1);
    char *before = gap_read(dir);
    gap_replay(&cs, dir, 0, 1);
    gap_expect_kept(dir, before);
    gap_replay(&cs, dir, 0, 0);
    uint64_t holed[11][2];
    for (int i = 0; i < 11; i++)
        holed[i][0] = 101 + (uint64_t)i, holed[i][1] = 0;
    gap_expect(dir, holed, 11);
    gap_expect_valid(dir, 111);
    control_metrics_close(&cs.sink);
    /* An edited metrics.jsonl: the orphans (4-6, holes in a log that holds the closing
     * validation) out of order and step 6 twice: written back ascending, once each (the
     * last line of 6), so that none rewinds over another or over the validation. */
    snprintf(dir, sizeof dir, "%s/edited", run_dir);
    gap_open(&cs, dir);
    gap_steps(&cs, dir, 0, 1, 6, gap_mask(3, 3), gap_mask(4, 6), 2);
    control_metrics_close(&cs.sink);
    const int order[] = {1, 2, 4, 3, 5, 5}; /* steps 1, 2, 5, 4, 6, 6 */
    gap_edit(dir, order, sizeof order / sizeof order[0]);
    gap_open(&cs, dir);
    uint64_t edited[6][2];
    for (int i = 0; i < 6; i++)
        edited[i][0] = 101 + (uint64_t)i, edited[i][1] = 0;
    for (unsigned want = 1, again = 0; again < 2; want = 0, again++) {
        gap_replay(&cs, dir, 0, want);
        gap_expect(dir, edited, 6);
        gap_expect_line(dir, 106, "\"tokens_per_s\": 2000,");
        gap_expect_valid(dir, 106);
    }
    control_metrics_close(&cs.sink);
    /* metrics.jsonl that cannot be written: the replay's failure names it, not the log */
    snprintf(dir, sizeof dir, "%s/unwritable", run_dir);
    gap_open(&cs, dir);
    gap_attempt(&cs, dir, 0, 1, 3, 1, 3);
    /* on a full disk the records are held back in memory (rec_append.h), not lost */
    int full = open("/dev/full", O_WRONLY);
    CHECK(full >= 0 && dup2(full, cs.sink.jsonl.a.fd) >= 0, "/dev/full: %s", strerror(errno));
    close(full);
    gap_replay(&cs, dir, 0, 3);
    CHECK(cs.sink.jsonl.a.n_held == 3, "%zu record(s) held back, expected 3",
          cs.sink.jsonl.a.n_held);
    gap_replay(&cs, dir, 0, 0); /* the held ones count as there: not replayed again */
    close(cs.sink.jsonl.a.fd);
    cs.sink.jsonl.a.fd = -1, cs.sink.jsonl.a.n_held = cs.sink.jsonl.a.len = 0;
    gap_unwritable(&cs, dir, "metrics.jsonl: not open for appending");
    control_metrics_close(&cs.sink);
    printf("control gap: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}

/* ---- orphans --------------------------------------------------------------------------- */

#define ORPHANS_N 20000

#if defined(__SANITIZE_ADDRESS__)
#define ORPHANS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ORPHANS_ASAN 1
#endif
#endif

/* Peak resident memory so far, KiB. */
static long orphans_peak_kib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

/* A log dead from step 3 (every append failed from there on) and step 2 lost live: the
 * fill from step 2 on writes back ORPHANS_N - 2 records only metrics.jsonl holds. They
 * are read back one at a time, not held whole (2 KiB a record: 40 MiB here), so the
 * replay's peak memory grows by less than 16 MiB (not checked under AddressSanitizer,
 * whose quarantine keeps what is freed); metrics.jsonl ends with every step once. */
int orphans(const char *run_dir) {
    control_server cs;
    control_metrics_where w = {"pretrain", 1, 0, 100};
    char path[4200];
    bt_diag d;
    bt_diag_init(&d);
    gap_open(&cs, run_dir);
    metrics_log_path(run_dir, 1, 0, path, sizeof path);
    metrics_log l;
    CHECK(metrics_log_open(&l, path, &d) == 0, "log: %s", d.msg);
    for (uint64_t k = 1; k <= ORPHANS_N; k++)
        gap_send(&cs, &l, &w, k, k <= 2, k != 2);
    metrics_log_close(&l);
    long before = orphans_peak_kib();
    gap_replay(&cs, run_dir, 0, 1);
    long grown = orphans_peak_kib() - before;
#ifndef ORPHANS_ASAN
    CHECK(grown < 16 * 1024, "the replay of %d orphans grew the peak memory by %ld KiB",
          ORPHANS_N - 2, grown);
#endif
    uint64_t(*want)[2] = calloc(ORPHANS_N, sizeof *want);
    for (size_t i = 0; want != NULL && i < ORPHANS_N; i++)
        want[i][0] = 101 + (uint64_t)i, want[i][1] = 0;
    if (want != NULL) gap_expect(run_dir, (const uint64_t(*)[2])want, ORPHANS_N);
    free(want);
    control_metrics_close(&cs.sink);
    printf("control orphans: %d records written back, peak memory +%ld KiB: %s\n", ORPHANS_N - 2,
           grown, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

/* ---- backlog --------------------------------------------------------------------------- */

#define BACKLOG_N 20000

/* Time bounds are looser under AddressSanitizer, whose checks slow every copy. */
#if defined(__SANITIZE_ADDRESS__)
#define BACKLOG_SLACK 4.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BACKLOG_SLACK 4.0
#endif
#endif
#ifndef BACKLOG_SLACK
#define BACKLOG_SLACK 1.0
#endif

static int backlog_done;
static int backlog_connected(const control_server *cs) {
    return control_server_connected(cs) == 1;
}

/* The server, reading again after 0.5 s, while the main thread closes the client. */
static void *backlog_serve(void *arg) {
    control_server *cs = arg;
    sleep_s(0.5);
    double end = bt_clock_now() + 30;
    while (!__atomic_load_n(&backlog_done, __ATOMIC_ACQUIRE) && bt_clock_now() < end)
        pump(cs, 20);
    return NULL;
}

/* A server for run_dir and a client of its first attempt, with a send buffer far smaller
 * than the messages sent. */
static void backlog_open(const char *run_dir, control_server *cs, control_client *c) {
    bt_diag d;
    bt_diag_init(&d);
    CHECK(control_server_open(cs, "s3cret", run_dir, "127.0.0.1", &d) == 0, "open: %s", d.msg);
    CHECK(control_server_begin_attempt(cs, 0, "pretrain", 0, 1, 0) == 0, "begin");
    CHECK(control_client_open(c, cs->address, "s3cret", 0, 1, 0, NULL, &d) == 0, "%s", d.msg);
    CHECK(pump_until(cs, backlog_connected), "the rank did not connect");
    int small = 4096;
    setsockopt(c->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
}

/* Sends metrics 1..n, none read meanwhile; returns the seconds the sends took. */
static double backlog_send(control_client *c, uint64_t n) {
    double t0 = bt_clock_now();
    for (uint64_t step = 1; step <= n; step++)
        send_metrics(c, step, 1.0);
    return bt_clock_now() - t0;
}

/* Sends metrics *n + 1 .. *n + k, none read meanwhile; returns the seconds they took. */
static double backlog_send_from(control_client *c, uint64_t *n, uint64_t k) {
    double t0 = bt_clock_now();
    for (uint64_t i = 0; i < k; i++)
        send_metrics(c, ++*n, 1.0);
    return bt_clock_now() - t0;
}

/* Steps of metrics.jsonl in RUN_DIR: how many lines, whether each is above the one before. */
static int backlog_lines(const char *run_dir, int *increasing) {
    char path[4200], line[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    unsigned long long prev = 0, step = 0;
    *increasing = f != NULL;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *p = strstr(line, "\"step\": ");
        if (p == NULL || sscanf(p + 8, "%llu", &step) != 1 || step <= prev) *increasing = 0;
        prev = step;
        n++;
    }
    if (f != NULL) fclose(f);
    return n;
}

/* Lets the server read again (a thread) while the client closes: close waits for it. */
static void backlog_close(control_server *cs, control_client *c) {
    pthread_t th;
    backlog_done = 0;
    CHECK(pthread_create(&th, NULL, backlog_serve, cs) == 0, "thread");
    control_client_close(c); /* waits until the server has read it all */
    sleep_s(0.2);
    __atomic_store_n(&backlog_done, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
}

static void backlog_all(const char *run_dir) {
    control_server cs;
    control_client c;
    backlog_open(run_dir, &cs, &c);
    double took = backlog_send(&c, BACKLOG_N);
    CHECK(took < 1.5 * BACKLOG_SLACK, "%d sends to a server not reading took %.1f s", BACKLOG_N,
          took);
    CHECK(c.fd >= 0 && c.out_len > 0 && c.dropped == 0,
          "the channel (fd %d) did not keep the backlog (%zu bytes waiting, %u dropped)", c.fd,
          c.out_len, c.dropped);
    backlog_close(&cs, &c);
    control_server_close(&cs);
    int increasing, lines = backlog_lines(run_dir, &increasing);
    CHECK(lines == BACKLOG_N && increasing, "metrics.jsonl has %d lines (%s), expected %d", lines,
          increasing ? "in order" : "out of order", BACKLOG_N);
}

/* More than the outbox (CONTROL_CLIENT_MAX_QUEUE) and the kernel's buffers take: messages
 * that do not fit are dropped, the channel stays, every other one arrives, in order. */
static void backlog_overflow(const char *run_dir) {
    control_server cs;
    control_client c;
    backlog_open(run_dir, &cs, &c);
    uint64_t n = 0;
    while (c.dropped == 0 && n < 4000000) /* the kernel's share varies: until one is dropped */
        send_metrics(&c, ++n, 1.0);
    /* a send to a full outbox costs no more than one to an empty one: nothing is moved
     * when nothing was sent */
    double took = backlog_send_from(&c, &n, BACKLOG_N);
    CHECK(took < 1.5 * BACKLOG_SLACK, "%d sends to a full outbox took %.1f s", BACKLOG_N, took);
    CHECK(c.fd >= 0 && c.dropped > 0, "fd %d, %u of %llu dropped", c.fd, c.dropped,
          (unsigned long long)n);
    uint64_t kept = n - c.dropped;
    unsigned dropped = c.dropped; /* a Fatal still fits, behind the metrics */
    control_client_fatal(&c, 1, 0, 0, "out of memory at step 7");
    CHECK(c.dropped == dropped, "the Fatal was dropped behind a full outbox of metrics");
    backlog_close(&cs, &c);
    CHECK(cs.fatal.key.seen && strstr(cs.fatal.message, "step 7") != NULL,
          "the Fatal queued behind a full outbox did not arrive");
    control_server_close(&cs);
    int increasing, lines = backlog_lines(run_dir, &increasing);
    CHECK((uint64_t)lines == kept && increasing,
          "metrics.jsonl has %d lines (%s), expected the %llu not dropped", lines,
          increasing ? "in order" : "out of order", (unsigned long long)kept);
}

int backlog(const char *run_dir) {
    char other[4200];
    snprintf(other, sizeof other, "%s-overflow", run_dir);
    backlog_all(run_dir);
    backlog_overflow(other);
    printf("control backlog: %s (%d failure(s))\n", failures ? "FAILED" : "ok", failures);
    return failures ? 1 : 0;
}
