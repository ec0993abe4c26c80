#define _GNU_SOURCE /* memmem */
#include "run_progress.h"

#include <stdio.h>
#include <string.h>

#include "util/clock.h"

void run_progress_end(run_progress *p) {
    if (p->bar_open) fputc('\n', stdout), fflush(stdout);
    p->bar_open = 0;
}

/* "  skipped N" once an update was skipped, "  scale S" for fp16: what the line adds. */
static void progress_extra(const run_progress *p, char *out, size_t cap) {
    size_t l = 0;
    out[0] = '\0';
    if (p->skipped > 0)
        l = (size_t)snprintf(out, cap, "  skipped %llu", (unsigned long long)p->skipped);
    if (p->loss_scale > 0 && l < cap) snprintf(out + l, cap - l, "  scale %g", p->loss_scale);
}

static void progress_show(run_progress *p) {
    if (p->quiet || p->total == 0) return;
    char extra[96];
    progress_extra(p, extra, sizeof extra);
    if (p->tty) {
        int width = 30, done = (int)(width * p->step / p->total);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < done ? '#' : '.';
        bar[width] = '\0';
        printf("\r[%s] %s %llu/%llu  loss %.4f  %.0f tok/s%s ", p->stage, bar,
               (unsigned long long)p->step, (unsigned long long)p->total, p->loss, p->tokens_per_s,
               extra);
        p->bar_open = 1;
    } else {
        uint64_t every = p->total >= 20 ? p->total / 20 : 1;
        if (p->step % every != 0 && p->step != p->total) return;
        printf("[%s] step %llu/%llu  loss %.6f  lr %.3e  grad_norm %.4f  %.0f tok/s%s\n", p->stage,
               (unsigned long long)p->step, (unsigned long long)p->total, p->loss, p->lr,
               p->grad_norm, p->tokens_per_s, extra);
    }
    fflush(stdout);
}

/* rank 0's "step N: ... update skipped ... (K skipped so far)" (an fp16 overflow, a loss
 * spike, a non-finite gradient norm): printed after the step's own line, so a bar is
 * redrawn with the count now; a plain line shows it from the next step on. */
static void progress_skipped(run_progress *p, const char *line) {
    const char *at = strstr(line, " skipped so far)");
    if (at == NULL) return;
    const char *d = at;
    while (d > line && d[-1] >= '0' && d[-1] <= '9')
        d--;
    unsigned long long k;
    if (d == at || sscanf(d, "%llu", &k) != 1) return;
    p->skipped = k;
    if (p->tty && p->have_step) progress_show(p);
}

/* A step completed: one past the latest (the other source's copy of a step is dropped),
 * from rank 0's printed line (text) or its Metrics. A printed line read before the step's
 * Metrics (baton run paused, or busy, while the ranks went on) holds the values rounded to
 * its digits: the Metrics for that step replace them, so that the journal and status keep
 * the exact ones, without counting or showing the step again. */
static void progress_update(run_progress *p, uint64_t s, double loss, double lr, double gn,
                            double tok, int text) {
    if (p->have_step && s == p->step && p->step_text && !text) {
        p->loss = loss, p->lr = lr, p->grad_norm = gn, p->tokens_per_s = tok;
        p->step_text = 0;
        return;
    }
    if (p->have_step && s <= p->step) return;
    p->have_step = 1, p->step = s, p->step_text = text;
    p->loss = loss, p->lr = lr, p->grad_norm = gn, p->tokens_per_s = tok;
    p->last_step_at = bt_clock_now();
    if (p->steps_seen++ == 0) p->first_step = s, p->first_step_at = p->last_step_at;
    progress_show(p);
}

/* rank 0's "step N/M  loss L  lr R  grad_norm G  T tok/s ..." */
static void progress_step(run_progress *p, const char *line) {
    unsigned long long s, t;
    double loss, lr, gn, tok;
    if (p->metrics || sscanf(line, "step %llu/%llu loss %lf lr %lf grad_norm %lf %lf tok/s", &s, &t,
                             &loss, &lr, &gn, &tok) != 6)
        return;
    if (p->total == 0) p->total = t;
    const char *scale = strstr(line, "  loss_scale ");
    double ls;
    if (scale != NULL && sscanf(scale, "  loss_scale %lf", &ls) == 1) p->loss_scale = ls;
    progress_update(p, s, loss, lr, gn, tok, 1);
}

void run_progress_at(run_progress *p, uint64_t step) {
    if (!p->have_step && step > p->step) p->step = step;
}

/* "started from CKPT at step N ...": an attempt resumed at step N has done N steps even
 * before its first step line (or without one, when N is the stage's last). */
static void progress_started(run_progress *p, const char *line) {
    unsigned long long s;
    const char *at = strstr(line, " at step ");
    if (at == NULL || sscanf(at, " at step %llu", &s) != 1) return;
    run_progress_at(p, s);
}

static void progress_valid(run_progress *p, const control_valid *v) {
    if (p->valid_shown) return; /* a replay repeats what arrived live */
    p->valid_shown = 1;
    if (p->quiet) return;
    run_progress_end(p);
    printf("[%s] valid loss %.6f (%.4f bits per token) over %u windows after step %llu\n", p->stage,
           v->loss, v->loss / 0.6931471805599453, v->windows, (unsigned long long)v->step);
    fflush(stdout);
}

void run_progress_metrics(void *arg, const control_metrics *m, const control_valid *v) {
    run_progress *p = arg;
    if (v != NULL) {
        progress_valid(p, v);
        return;
    }
    p->metrics = 1;
    if (m->skipped_steps > p->skipped) p->skipped = m->skipped_steps;
    if (m->loss_scale > 0) p->loss_scale = m->loss_scale;
    progress_update(p, m->step, m->loss, m->lr, m->grad_norm, m->tokens_per_s, 0);
}

void run_progress_line(void *arg, int rank, int stream, const char *line, size_t len) {
    run_progress *p = arg;
    if (p->log) fprintf(p->log, "[%d%s] %.*s\n", rank, stream == 2 ? " err" : "", (int)len, line);
    if (stream == 2) {
        if (memmem(line, len, "no usable checkpoint", 20) != NULL) p->no_ckpt = 1;
        run_words_note(&p->words, rank, line, len);
        run_progress_end(p);
        fprintf(stderr, "[%s rank %d] %.*s\n", p->stage, rank, (int)len, line);
        return;
    }
    if (rank != 0) return;
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), line);
    if (strncmp(buf, "step ", 5) == 0 && strstr(buf, " skipped so far)") != NULL)
        progress_skipped(p, buf);
    else if (strncmp(buf, "step ", 5) == 0)
        progress_step(p, buf);
    else if (strncmp(buf, "started from ", 13) == 0)
        progress_started(p, buf);
    /* the closing validation comes with the metrics once they arrive; this line only
     * before (no control channel, or rank 0 not connected to it), and only once */
    int valid = strncmp(buf, "valid loss", 10) == 0, none = strncmp(buf, "valid loss not", 14) == 0;
    if (valid && !none && (p->metrics || p->valid_shown)) return;
    if (valid && !none) p->valid_shown = 1;
    int start =
        strncmp(buf, "started from", 12) == 0 || strncmp(buf, "loss-spike guard: ", 18) == 0;
    if (!p->quiet && (valid || start)) {
        run_progress_end(p);
        printf("[%s] %s\n", p->stage, buf);
    }
}
