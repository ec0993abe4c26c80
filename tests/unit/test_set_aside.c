/* run_set_aside (orchestrator/run/run_set_aside.c), what a rollback and the request the
 * rollback limit refuses do to the checkpoint root: the checkpoints at or after the first
 * spiking step move aside, by (stage, step) as numbers, so at steps of 10^8 and more,
 * whose names are a digit longer, s00-step99999999 stays before s00-step100000000;
 * `latest` is dropped; the newest one left is named. And run_set_aside_refused_from, where
 * the request the rollback limit refuses sets aside from: the first spiking step when the
 * checkpoint left carries a window that arms the guard for the spikes, else the guard's
 * 10 steps of warm-up before them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "run_set_aside.h"

static char root[256];

static void make_ckpt(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/%s/manifest.pb", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    if (f) fclose(f);
}

static int exists(const char *dir, const char *name) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

/* Spikes from step 100000000 on: 99999999 and the earlier stage's stay, 100000000 and
 * 100000001 (and a later stage's) move; a second request at the same step finds nothing
 * more to move into its own directory. */
static void test_big_steps(void) {
    char ck[300], aside[300], aside2[300], kept[64];
    snprintf(ck, sizeof ck, "%s/checkpoints", root);
    snprintf(aside, sizeof aside, "%s/rolled-back/s01-a03", root);
    snprintf(aside2, sizeof aside2, "%s/rolled-back/s01-a04", root);
    CHECK(mkdir(ck, 0700) == 0);
    char parent[300];
    snprintf(parent, sizeof parent, "%s/rolled-back", root);
    CHECK(mkdir(parent, 0700) == 0);
    make_ckpt(ck, "s00-step00000500");
    make_ckpt(ck, "s01-step99999999");
    make_ckpt(ck, "s01-step100000000");
    make_ckpt(ck, "s01-step100000001");
    make_ckpt(ck, "s02-step00000001");
    char p[400];
    snprintf(p, sizeof p, "%s/latest", ck);
    CHECK(symlink("s01-step100000001", p) == 0);
    bt_diag d;
    bt_diag_init(&d);
    CHECK(run_set_aside(ck, aside, 1, 100000000, kept, sizeof kept, &d) == 0);
    CHECK(strcmp(kept, "s01-step99999999") == 0);
    CHECK(exists(ck, "s00-step00000500") && exists(ck, "s01-step99999999"));
    CHECK(!exists(ck, "s01-step100000000") && !exists(ck, "s01-step100000001"));
    CHECK(!exists(ck, "s02-step00000001") && !exists(ck, "latest"));
    CHECK(exists(aside, "s01-step100000000") && exists(aside, "s01-step100000001"));
    CHECK(exists(aside, "s02-step00000001"));
    /* again from step 99999999: it moves, and the earlier stage's is the newest left */
    CHECK(run_set_aside(ck, aside2, 1, 99999999, kept, sizeof kept, &d) == 0);
    CHECK(strcmp(kept, "s00-step00000500") == 0);
    CHECK(exists(aside2, "s01-step99999999") && !exists(ck, "s01-step99999999"));
    /* nothing left at or after the bound: no directory made, nothing named but the kept */
    snprintf(aside2, sizeof aside2, "%s/rolled-back/s01-a05", root);
    CHECK(run_set_aside(ck, aside2, 1, 1, kept, sizeof kept, &d) == 0);
    CHECK(strcmp(kept, "s00-step00000500") == 0);
    CHECK(!exists(aside2, "."));
    /* from the stage's start of stage 0: none left */
    CHECK(run_set_aside(ck, aside2, 0, 1, kept, sizeof kept, &d) == 0);
    CHECK(strcmp(kept, "none") == 0);
}

/* A window of n steps (loss and norm alike, finite unless bad). */
static void make_window(Baton__SpikeGuardState *g, double *loss, double *norm, size_t n, int bad) {
    baton__spike_guard_state__init(g);
    for (size_t i = 0; i < n; i++)
        loss[i] = 3.0 + 0.01 * (double)i, norm[i] = 1.0;
    if (bad && n > 0) loss[n - 1] = NAN;
    g->n_loss = g->n_grad_norm = n, g->loss = loss, g->grad_norm = norm;
}

static void test_refused_from(void) {
    Baton__SpikeGuardState g;
    double loss[20], norm[20];
    /* no window (an older checkpoint, the guard off, a hand-off): the warm-up before them */
    CHECK(run_set_aside_refused_from(NULL, 26, 30) == 20);
    CHECK(run_set_aside_refused_from(NULL, 13, 25) == 15);
    CHECK(run_set_aside_refused_from(NULL, 0, 8) == 1);
    make_window(&g, loss, norm, 0, 0);
    CHECK(run_set_aside_refused_from(&g, 26, 30) == 20);
    /* a full window, 3 steps before the spikes: armed, nothing before them set aside */
    make_window(&g, loss, norm, 20, 0);
    CHECK(run_set_aside_refused_from(&g, 26, 30) == 30);
    CHECK(run_set_aside_refused_from(&g, 13, 25) == 25);
    /* 10 values right before the spikes: armed */
    make_window(&g, loss, norm, 10, 0);
    CHECK(run_set_aside_refused_from(&g, 29, 30) == 30);
    /* 5 values and 4 steps to go: 9, not armed; 5 steps to go: armed */
    make_window(&g, loss, norm, 5, 0);
    CHECK(run_set_aside_refused_from(&g, 25, 30) == 20);
    CHECK(run_set_aside_refused_from(&g, 24, 30) == 30);
    /* a window the worker would ignore: none */
    make_window(&g, loss, norm, 20, 1);
    CHECK(run_set_aside_refused_from(&g, 26, 30) == 20);
    make_window(&g, loss, norm, 20, 0);
    g.n_grad_norm = 19;
    CHECK(run_set_aside_refused_from(&g, 26, 30) == 20);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/baton-test-set-aside.XXXXXX");
    if (mkdtemp(root) == NULL) return 1;
    test_big_steps();
    test_refused_from();
    check_rmdir(root);
    return check_status();
}
