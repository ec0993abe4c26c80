/* The NCCL watchdog's bookkeeping: see comm_watch.h for the rule and why. */
#include "comm_watch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

int comm_watch_expired(comm_watch_op *op, comm_watch_state seen, int64_t now_ms) {
    if (seen != COMM_WATCH_QUEUED && op->started_ms < 0) op->started_ms = now_ms;
    return seen == COMM_WATCH_RUNNING && now_ms - op->started_ms > op->timeout_ms;
}

int comm_watch_add(comm_watch *w, const void *owner, int timeout_ms, const char *what,
                   uint64_t *gen) {
    int i = 0;
    while (i < w->n && w->ops[i].owner != NULL)
        i++;
    if (i == w->n) {
        comm_watch_op *ops = realloc(w->ops, ((size_t)w->n + 1) * sizeof *ops);
        if (ops == NULL) return BT_ENOMEM;
        w->ops = ops;
        w->ops[w->n++] = (comm_watch_op){.ready = NULL, .done = NULL};
    }
    comm_watch_op *op = &w->ops[i];
    op->owner = owner;
    op->gen = *gen = ++w->gen;
    op->started_ms = -1;
    op->armed = 0;
    op->timeout_ms = timeout_ms;
    snprintf(op->what, sizeof op->what, "%s", what);
    return i;
}

int comm_watch_has_free(const comm_watch *w) {
    for (int i = 0; i < w->n; i++)
        if (w->ops[i].owner == NULL) return 1;
    return 0;
}

/* Slot i, when it is live in generation gen; else NULL. */
static comm_watch_op *live(comm_watch *w, int i, uint64_t gen) {
    if (i < 0 || i >= w->n) return NULL;
    comm_watch_op *op = &w->ops[i];
    return op->owner != NULL && op->gen == gen ? op : NULL;
}

void comm_watch_arm(comm_watch *w, int i, uint64_t gen) {
    comm_watch_op *op = live(w, i, gen);
    if (op != NULL) op->armed = 1;
}

void comm_watch_drop(comm_watch *w, int i, uint64_t gen) {
    comm_watch_op *op = live(w, i, gen);
    if (op != NULL) op->owner = NULL;
}

int comm_watch_due(comm_watch *w, int64_t now_ms) {
    if (now_ms < w->next_poll_ms) return 0;
    w->next_poll_ms = now_ms + COMM_WATCH_POLL_MS;
    return 1;
}

void comm_watch_drop_owner(comm_watch *w, const void *owner) {
    for (int i = 0; i < w->n; i++)
        if (w->ops[i].owner == owner) w->ops[i].owner = NULL;
}

int comm_watch_poll(comm_watch *w, int64_t now_ms, comm_watch_probe probe, void *ctx,
                    int *expired) {
    *expired = -1;
    for (int i = 0; i < w->n; i++) {
        comm_watch_op *op = &w->ops[i];
        if (op->owner == NULL || !op->armed) continue;
        comm_watch_state seen = COMM_WATCH_QUEUED;
        int rc = probe(ctx, op, &seen);
        if (rc < 0) {
            *expired = -1;
            return rc;
        }
        if (comm_watch_expired(op, seen, now_ms) &&
            (*expired < 0 || op->started_ms < w->ops[*expired].started_ms))
            *expired = i;
        if (seen == COMM_WATCH_DONE) op->owner = NULL;
    }
    return 0;
}

void comm_watch_free(comm_watch *w, void (*release)(void *marker)) {
    for (int i = 0; i < w->n; i++) {
        if (w->ops[i].ready) release(w->ops[i].ready);
        if (w->ops[i].done) release(w->ops[i].done);
    }
    free(w->ops);
    w->ops = NULL;
    w->n = 0;
}
