/* baton ckpt reshard CKPT --to LAYOUT --out DIR: rewrites a checkpoint offline for
 * another tensor/pipeline/expert layout, its weights as that layout's ranks would have
 * saved them. Loading already reshards, so this is for moving a checkpoint somewhere its
 * shards should match the readers one-to-one. Optimizer moments are written per (tp, pp,
 * ep) rank as whole boxes (the ZeRO shards of the source are merged; a ZeRO-1 save would
 * split them over dp); ep rank 0 writes the dense tensors, every ep rank its routed
 * experts; dp, cp and zero are recorded in the layout only. When the tp ranks fold into
 * the experts' parallelism (an MoE model, tp > 1; stages/layout.h), ep may divide
 * tp x dp x cp instead of dp x cp; the files stay one per (tp, pp, ep) position (the
 * loader reads boxes, so any grid loads), no longer one per rank. DIR is all it writes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "ckpt_store_fs.h"
#include "model.h"
#include "plan.h"
#include "train_ckpt.h"
#include "util/cleanup.h"
#include "../cli.h"

static void reshard_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt reshard CKPT --to LAYOUT --out DIR\n\n"
               "Rewrites a checkpoint for another layout: LAYOUT names degrees such as\n"
               "'tp2,pp2,dp4,zero1', 'tp2cp2', 'dp4ep2z1' or 'dp2z1' (missing ones are 1; zero\n"
               "0 or 1; ep takes its ranks from dp x cp, or from tp x dp x cp for an MoE\n"
               "model with tp > 1 (the tp ranks fold in), and must divide the experts);\n"
               "'pp2v2' an interleaved pipeline (v: virtual_stages), 'pp2,layers=3+1' its\n"
               "stages' layers (parallel.stage_layers; interleaved: pp x v chunks).\n"
               "DIR is the new checkpoint directory: it must not exist; its missing parent\n"
               "directories are created (and removed again should reshard fail). It is\n"
               "written as DIR.partial and renamed once complete; nothing else is touched.\n"
               "CKPT is a checkpoint directory or a run directory (its newest complete\n"
               "checkpoint).\n\n"
               "Exit status: 0 done, 1 failed, 2 bad usage or input.\n");
}

#define RESHARD_MAX_LIST 256

/* "3+1+2" (after layers=) into list; the characters taken, or -1. */
static int reshard_parse_list(const char *s, uint32_t *list, size_t *n) {
    const char *at = s;
    for (*n = 0;; at++) {
        unsigned v;
        int k = 0;
        if (*n == RESHARD_MAX_LIST || sscanf(at, "%u%n", &v, &k) != 1 || v == 0 || v > 65536)
            return -1;
        list[(*n)++] = v, at += k;
        if (*at != '+') return (int)(at - s);
    }
}

/* The degree named key, or NULL. */
static uint32_t *reshard_slot(Baton__Parallel *p, const char *key) {
    return strcmp(key, "tp") == 0                              ? &p->tp
           : strcmp(key, "pp") == 0                            ? &p->pp
           : strcmp(key, "cp") == 0                            ? &p->cp
           : strcmp(key, "dp") == 0                            ? &p->dp
           : strcmp(key, "ep") == 0                            ? &p->ep
           : strcmp(key, "v") == 0                             ? &p->virtual_stages
           : strcmp(key, "zero") == 0 || strcmp(key, "z") == 0 ? &p->zero
                                                               : NULL;
}

/* A degree given twice in --to (tp2,tp4): refused, not the last taken. */
static int reshard_twice(bt_diag *diag, const char *key) {
    bt_diag_set(diag, "%s given twice", key);
    return -2;
}

/* "tp2,pp2" / "tp2pp2" / "tp=2,pp=2" / "pp2v2,layers=1+2+2+1" into p (its stage_layers in
 * list). */
/* -1: not the syntax; -2: a layout reshard cannot write, why in diag. */
static int reshard_parse_layout(const char *s, Baton__Parallel *p, uint32_t *list, bt_diag *diag) {
    baton__parallel__init(p);
    p->tp = p->pp = p->cp = p->dp = p->ep = p->virtual_stages = 1, p->zero = 0;
    const uint32_t *seen[8];
    size_t n_seen = 0;
    while (*s) {
        if (*s == ',' || *s == 'x' || *s == ' ') {
            s++;
            continue;
        }
        char key[8] = "";
        int n = 0;
        unsigned v = 0;
        if (sscanf(s, "%7[a-z]%n", key, &n) != 1) return -1;
        s += n;
        if (*s == '=') s++;
        if (strcmp(key, "layers") == 0) {
            if (p->stage_layers != NULL) return reshard_twice(diag, key);
            if ((n = reshard_parse_list(s, list, &p->n_stage_layers)) < 0) return -1;
            p->stage_layers = list, s += n;
            continue;
        }
        if (sscanf(s, "%u%n", &v, &n) != 1 || v > 4096) return -1;
        s += n;
        uint32_t *slot = reshard_slot(p, key);
        if (slot == NULL || (v == 0 && slot != &p->zero)) return -1;
        for (size_t k = 0; k < n_seen; k++)
            if (seen[k] == slot) return reshard_twice(diag, key);
        seen[n_seen++] = slot; /* 7 slots: a repeat is refused before an 8th */
        *slot = v;
    }
    if (n_seen == 0 && p->stage_layers == NULL) {
        bt_diag_set(diag, "no degree given (tp1 for one shard file)");
        return -2;
    }
    p->has_tp = p->has_pp = p->has_cp = p->has_dp = p->has_ep = p->has_zero = 1;
    p->has_virtual_stages = 1;
    uint64_t shards = (uint64_t)p->tp * p->pp * p->ep; /* one file each */
    uint64_t block = (uint64_t)p->tp * p->dp * p->cp;  /* the fold's; reshard_write narrows */
    if (p->zero > 1)
        bt_diag_set(diag, "zero %u: reshard writes zero 0 or 1 (a ZeRO-2/3 stage loads either)",
                    p->zero);
    else if (block % p->ep != 0)
        bt_diag_set(diag,
                    "ep %u must divide the ranks the experts spread over, tp x dp x cp = %llu "
                    "(an MoE model's: give dp so that it does; a dense model takes no ep)",
                    p->ep, (unsigned long long)block);
    else if (shards > 65536)
        bt_diag_set(diag, "tp x pp x ep = %llu shard files: at most 65536",
                    (unsigned long long)shards);
    else
        return 0;
    return -2;
}

typedef struct reshard_job {
    const char *src;
    const Baton__Manifest *m;
    const Baton__Parallel *to;
    char part[CKPT_PATH_MAX];
    float *buf;
    size_t cap;
    ckpt_reader rd; /* the source's shard files, each opened once */
} reshard_job;

/* Room for n floats in j->buf. */
static int reshard_room(reshard_job *j, size_t n) {
    if (j->cap >= n) return 0;
    float *p = realloc(j->buf, (n ? n : 1) * sizeof *p);
    if (p == NULL) return BT_ENOMEM;
    j->buf = p, j->cap = n;
    return 0;
}

/* Copies one box of key (if the source has it) into the writer. */
static int reshard_piece(reshard_job *j, ckpt_writer *w, const char *key, const model_tensor *mt,
                         bt_diag *diag) {
    const Baton__TensorEntry *e = ckpt_find(j->m, key);
    if (e == NULL) return 0;
    if (bt_cleanup_check(diag) != 0) return BT_EIO;
    ckpt_box b;
    int nd;
    uint64_t g[2];
    train_ckpt_tensor_box(mt, &nd, g, &b);
    int rc = reshard_room(j, mt->count);
    rc = rc ? rc : ckpt_reader_box(&j->rd, e, &b, j->buf, diag);
    return rc ? rc : ckpt_writer_add(w, key, nd, g, &b, e->dtype, j->buf, diag);
}

/* Copies one delayed-scaling state (its history into the writer's shard). The written
 * checkpoint is of the current format: a format-1 gradient (dy) state is rescaled as the
 * loader rescales it (train_ckpt_load.c: each replica's own loss scaling made it dp times
 * today's). */
static int reshard_fp8(reshard_job *j, ckpt_writer *w, const Baton__Fp8State *f, bt_diag *diag) {
    uint64_t len = ckpt_fp8_history_len(f);
    if (len > UINT32_MAX) {
        bt_diag_set(diag, "%s: fp8 state %s: a history of %llu floats", j->src,
                    f->tensor ? f->tensor : "?", (unsigned long long)len);
        return BT_EINVAL;
    }
    int rc = reshard_room(j, (size_t)len);
    rc = rc ? rc : ckpt_reader_fp8(&j->rd, f, j->buf, diag);
    if (rc != 0) return rc;
    const char *name = f->tensor ? f->tensor : "";
    prec_fp8_meta meta = {.scale = f->scale, .history = j->buf, .len = (uint32_t)len};
    float k = ckpt_fp8_legacy_factor(j->m, name);
    if (k != 1.0f) prec_fp8_meta_rescale(&meta, k);
    return ckpt_writer_add_fp8(w, name, meta.scale, j->buf, (uint32_t)len, f->pos, diag);
}

/* The shard of virtual rank (tp rank r, stage s, ep rank q): its tensors' replica-0
 * boxes, the dense ones on ep rank 0 only. */
/* The model as virtual rank (tp rank r, stage s, ep rank q) of the target layout holds it. */
static model_config reshard_cfg(const reshard_job *j, const model_config *base, int r, int s,
                                int q) {
    model_config cfg = *base;
    cfg.tp = (int)j->to->tp, cfg.tp_rank = r, cfg.pp = (int)j->to->pp, cfg.pp_rank = s;
    cfg.vp = (int)j->to->virtual_stages;
    cfg.stage_layers = j->to->stage_layers, cfg.n_stage_layers = j->to->n_stage_layers;
    cfg.ep = (int)j->to->ep, cfg.ep_rank = q;
    if (cfg.ep > 1)
        cfg.moe.n_local = cfg.moe.n_experts / cfg.ep, cfg.moe.expert0 = q * cfg.moe.n_local;
    return cfg;
}

static int reshard_rank(reshard_job *j, const model_config *base, int r, int s, int q, int rank,
                        bt_diag *diag) {
    model_config cfg = reshard_cfg(j, base, r, s, q);
    ckpt_writer w;
    int rc = ckpt_writer_open(&w, j->part, rank, CKPT_DEFAULT_BLOCK, diag);
    static const char *const pre[3] = {"", "optim.exp_avg.", "optim.exp_avg_sq."};
    model_tensor mt;
    for (int i = 0; rc == 0 && model_tensor_slice(&cfg, i, &mt) == 0; i++) {
        if (mt.replica != 0 || (q > 0 && !mt.expert)) continue;
        for (int k = 0; rc == 0 && k < 3; k++) {
            char key[160];
            snprintf(key, sizeof key, "%s%s", pre[k], mt.name);
            rc = reshard_piece(j, &w, key, &mt, diag);
        }
    }
    for (size_t f = 0; rc == 0 && rank == 0 && f < j->m->n_fp8; f++)
        rc = reshard_fp8(j, &w, j->m->fp8[f], diag);
    if (rc != 0) {
        ckpt_writer_abort(&w);
        return rc;
    }
    return ckpt_writer_finish(&w, diag);
}

/* The pipeline of the layout suits the model: pp <= its layers; interleaved, pp > 1 and
 * pp v dividing the layers or layers= listing the chunks; layers= as plan_check_stage_layers
 * wants it. */
static int reshard_check_pipeline(const Baton__Parallel *to, uint32_t n_layers, bt_diag *diag) {
    uint32_t pp = to->pp, v = to->virtual_stages;
    if (pp > n_layers) {
        bt_diag_set(diag, "--to: pp %u exceeds the model's %u layers", pp, n_layers);
        return BT_EINVAL;
    }
    if (v > 1 && (pp < 2 || (n_layers % (pp * v) != 0 && to->n_stage_layers == 0))) {
        bt_diag_set(diag,
                    "--to: v %u needs pp > 1 and pp x v dividing the model's %u layers, or "
                    "layers= listing the pp x v chunks",
                    v, n_layers);
        return BT_EINVAL;
    }
    if (to->n_stage_layers == 0) return 0;
    bt_diag d;
    bt_diag_init(&d);
    if (plan_check_stage_layers(to->stage_layers, to->n_stage_layers, pp, v, n_layers, &d) != 0) {
        bt_diag_set(diag, "--to: layers=: %s", d.msg);
        return BT_EINVAL;
    }
    return 0;
}

static int reshard_write(reshard_job *j, const char *out, bt_diag *diag) {
    model_config cfg;
    int rc = model_config_from_pb(&cfg, j->m->model, diag);
    if (rc != 0) return rc;
    char root[CKPT_PATH_MAX], name[256];
    snprintf(root, sizeof root, "%s", out);
    char *slash = strrchr(root, '/');
    if (snprintf(name, sizeof name, "%s", slash ? slash + 1 : root) >= (int)sizeof name) {
        bt_diag_set(diag, "--out %s: the name is too long", out);
        return BT_EINVAL;
    }
    if (slash)
        *slash = '\0';
    else
        snprintf(root, sizeof root, ".");
    if (name[0] == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        bt_diag_set(diag, "--out %s: name a new checkpoint directory", out);
        return BT_EINVAL;
    }
    struct stat st;
    if (lstat(out, &st) == 0) {
        bt_diag_set(diag, "--out %s: already exists; name a new checkpoint directory", out);
        return BT_EINVAL;
    }
    int tp = (int)j->to->tp, pp = (int)j->to->pp, ep = (int)j->to->ep;
    if (reshard_check_pipeline(j->to, (uint32_t)cfg.n_layers, diag) != 0) return BT_EINVAL;
    if (ep > 1 && (cfg.moe.n_experts == 0 || cfg.moe.n_experts % ep != 0)) {
        if (cfg.moe.n_experts == 0)
            bt_diag_set(diag, "--to: ep %d needs an MoE model; this checkpoint's is dense", ep);
        else
            bt_diag_set(diag, "--to: ep %d must divide the model's routed experts (%d)", ep,
                        cfg.moe.n_experts);
        return BT_EINVAL;
    }
    const Baton__Moe *moe = j->m->model ? j->m->model->moe : NULL;
    if (!plan_parallel_folds_experts(j->to, moe) && (j->to->dp * j->to->cp) % j->to->ep != 0) {
        bt_diag_set(diag,
                    "--to: ep %u must divide dp x cp = %u (tp %u does not fold into the "
                    "experts' parallelism: that needs tp > 1 and an MoE model)",
                    j->to->ep, j->to->dp * j->to->cp, j->to->tp);
        return BT_EINVAL;
    }
    /* The worker's own checks of a layout against the model (tp dividing the heads, the
     * ffn and the vocabulary, ...): every rank's shapes follow from rank 0's. */
    model_config c0 = reshard_cfg(j, &cfg, 0, 0, 0);
    bt_diag d;
    bt_diag_init(&d);
    if (model_config_check(&c0, &d) != 0) {
        bt_diag_set(diag, "--to: %s", d.msg);
        return BT_EINVAL;
    }
    rc = ckpt_out_begin(root, name, j->part, sizeof j->part, diag);
    int n = tp * pp * ep;
    for (int rank = 0; rc == 0 && rank < n; rank++)
        rc = reshard_rank(j, &cfg, rank % tp, rank / tp % pp, rank / (tp * pp), rank, diag);
    Baton__Manifest h = *j->m;
    h.n_tensors = 0, h.tensors = NULL, h.n_fp8 = 0, h.fp8 = NULL;
    h.layout = (Baton__Parallel *)j->to;
    return rc ? rc : ckpt_commit_dir(root, name, &h, (uint32_t)n, 10, diag);
}

/* One reshard (ckpt_gone_try) of the checkpoint path names for layout to into out. */
typedef struct reshard_try {
    const char *path, *out;
    const Baton__Parallel *to;
} reshard_try;

static int reshard_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    const reshard_try *t = ctx;
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(t->path, dir, cap, &m, diag);
    if (rc == 0) ckpt_gone_fault(dir);
    reshard_job j = {.src = dir, .m = m, .to = t->to};
    ckpt_reader_init(&j.rd, dir, m);
    rc = rc ? rc : reshard_write(&j, t->out, diag);
    ckpt_reader_close(&j.rd);
    free(j.buf);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return rc;
}

int ckpt_cmd_reshard(int argc, char **argv) {
    const char *path = NULL, *to = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            reshard_usage(stdout);
            return BT_EXIT_OK;
        } else if (strcmp(argv[i], "--to") == 0 || strcmp(argv[i], "--out") == 0) {
            const char **v = argv[i][2] == 't' ? &to : &out;
            if (i + 1 == argc) {
                fprintf(stderr, "baton ckpt reshard: %s needs a value\n", argv[i]);
                return BT_EXIT_USAGE;
            }
            if (cli_once("ckpt reshard", argv[i], *v, argv[i + 1]) != 0) return BT_EXIT_USAGE;
            *v = argv[++i];
        } else if (argv[i][0] != '-' && path == NULL) {
            path = argv[i];
        } else {
            fprintf(stderr, "baton ckpt reshard: unexpected argument '%s'\n", argv[i]);
            return BT_EXIT_USAGE;
        }
    }
    Baton__Parallel lay;
    uint32_t list[RESHARD_MAX_LIST];
    if (!path || !to || !out) {
        fprintf(stderr, "baton ckpt reshard: %s\n",
                !path         ? "missing CKPT"
                : !to && !out ? "--to LAYOUT and --out DIR are required"
                : !to         ? "--to LAYOUT is required"
                              : "--out DIR is required");
        reshard_usage(stderr);
        return BT_EXIT_USAGE;
    }
    if (out[0] == '\0') {
        fprintf(stderr, "baton ckpt reshard: --out '': name a new checkpoint directory\n");
        return BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    int prc = reshard_parse_layout(to, &lay, list, &diag);
    if (prc == -2) {
        fprintf(stderr, "baton ckpt reshard: --to %s: %s\n", to, diag.msg);
        return BT_EXIT_USAGE;
    }
    if (prc != 0) {
        fprintf(stderr,
                "baton ckpt reshard: --to %s: expected degrees like tp2,pp2,dp4,zero1 "
                "(zero 0 or 1, ep dividing dp x cp, or tp x dp x cp for an MoE model; "
                "pp2v2 interleaved; layers=3+1 each stage's layers)\n",
                to);
        return BT_EXIT_USAGE;
    }
    char dir[CKPT_PATH_MAX];
    bt_cleanup_install();
    reshard_try t = {.path = path, .out = out, .to = &lay};
    int rc =
        ckpt_gone_retry("baton ckpt reshard", path, reshard_once, &t, dir, sizeof dir, NULL, &diag);
    if (rc != 0) {
        fprintf(stderr, "baton ckpt reshard: %s\n", diag.msg[0] ? diag.msg : bt_strerror(rc));
        return bt_cleanup_exit(rc == BT_EIO || rc == BT_ENOMEM ? BT_EXIT_FAILURE : BT_EXIT_USAGE);
    }
    bt_buf text;
    bt_buf_init(&text);
    ckpt_layout_text(&text, &lay);
    printf("%s: written for %s from %s\n", out, bt_buf_str(&text), dir);
    bt_buf_free(&text);
    return bt_cleanup_exit(BT_EXIT_OK);
}
