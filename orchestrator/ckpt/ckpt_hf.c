/* baton ckpt export --format hf / import --format hf: a checkpoint's model as a Hugging
 * Face LlamaForCausalLM directory (model.safetensors + config.json) and back.
 *
 * baton's parameters already are that model: the same tensor names, shapes and
 * (out, in) orientation (model.h), and RoPE with the same rotate-half pairing of head
 * elements i and i + hd/2 (cpu_norm.c's rope_head computes HF's
 * q * cos + rotate_half(q) * sin), so q_proj and k_proj need no permutation, unlike
 * Meta's original interleaved checkpoints. An export is a consolidation of the shards
 * (any saved layout) into one file; optimizer moments (optim.*) are not exported. An
 * import is a one-rank checkpoint (layout tp1 pp1 dp1) at step 0 with no optimizer
 * state, from which a run can start with any layout.
 *
 * Exit status: 0 done, 1 failed (out of memory, cannot write), 2 bad usage or input. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "ckpt_store_fs.h"
#include "../cli.h"
#include "export_partial.h"
#include "hf_config.h"
#include "model.h"
#include "precision.h"
#include "safetensors.h"
#include "util/buf.h"
#include "util/cleanup.h"
#include "util/utf8.h"

#define HF_WEIGHTS        "model.safetensors"
#define HF_CONFIG         "config.json"
#define HF_CONFIG_MAX     (16u << 20)
#define HF_CHUNK_FLOATS   (1u << 22) /* export reads tensors in row blocks of this size */
#define HF_COMMIT_TIMEOUT 30.0
#define HF_DEFAULT_RECIPE "hf-import"

static int hf_exit(int rc) {
    if (rc == BT_OK) return BT_EXIT_OK;
    return rc == BT_ENOMEM || rc == BT_EIO || rc == BT_EINTERNAL ? BT_EXIT_FAILURE : BT_EXIT_USAGE;
}

static int hf_path(char *out, size_t cap, const char *dir, const char *file) {
    return (size_t)snprintf(out, cap, "%s/%s", dir, file) < cap ? 0 : BT_ERANGE;
}

/* The tensors of the one-process model (model.c's table), tp1 pp1. */
typedef struct hf_tensor {
    char name[64];
    int ndim;
    uint64_t shape[2];
} hf_tensor;

static int hf_model_tensors(const Baton__Model *pb, hf_tensor **out, size_t *n, bt_diag *diag) {
    model_config cfg;
    int rc = model_config_from_pb(&cfg, pb, diag);
    if (rc) return rc;
    size_t cap = 3 + (size_t)cfg.n_layers * 9, k = 0;
    hf_tensor *t = calloc(cap, sizeof *t);
    if (t == NULL) return BT_ENOMEM;
    model_tensor mt;
    for (int i = 0; k < cap && model_tensor_slice(&cfg, i, &mt) == 0; i++, k++) {
        snprintf(t[k].name, sizeof t[k].name, "%s", mt.name);
        t[k].ndim = mt.ndim;
        t[k].shape[0] = (uint64_t)mt.global_shape[0];
        t[k].shape[1] = mt.ndim == 2 ? (uint64_t)mt.global_shape[1] : 0;
    }
    *out = t, *n = k;
    return 0;
}

static const hf_tensor *hf_tensor_find(const hf_tensor *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0) return &t[i];
    return NULL;
}

static uint64_t hf_tensor_count(const hf_tensor *t) {
    return t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
}

/* ================================ export ================================ */

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: baton ckpt export CKPT --out DIR [--format hf] [--dtype fp32|bf16]\n"
            "                         [--max-position N]\n\n"
            "Writes the model of checkpoint CKPT (a checkpoint directory or a run directory:\n"
            "its newest complete checkpoint), consolidated from any saved layout, as a\n"
            "Hugging Face LlamaForCausalLM: DIR/" HF_WEIGHTS " (tensors sorted by name)\n"
            "and DIR/" HF_CONFIG ", both 0644 under umask 022 (an export is for sharing).\n"
            "Optimizer state is not exported. Both are written in a new directory beside\n"
            "DIR (DIR.partial-HOST-PID-XXXXXX, 0700) and moved to DIR (created, with its\n"
            "missing parents, if missing) once complete: a failed export leaves DIR as it\n"
            "was and removes the directories it created. The export holds a lock on a\n"
            "file in it while it runs: one left by an export killed before it could clean\n"
            "up is removed by the next export to DIR on that host, once nothing holds\n"
            "that lock (whatever the pid in its name says, as in another container).\n\n"
            "  --out DIR          output directory\n"
            "  --format hf        the only format (default)\n"
            "  --dtype fp32|bf16  tensor dtype in the file (default fp32; bf16 rounds to\n"
            "                     nearest even)\n"
            "  --max-position N   max_position_embeddings in " HF_CONFIG " (default: the\n"
            "                     context the checkpoint records, the seq_len it was\n"
            "                     trained at or an import's max_position_embeddings, where\n"
            "                     longer than a RoPE scaling's original context; else the\n"
            "                     scaling's original context times its factor, for llama3\n"
            "                     twice that (right for Llama 3.1, not 3.2); else, for a\n"
            "                     checkpoint too old to record its context, %d, with a\n"
            "                     note)\n"
            "  --help             show this help\n\n"
            "Exit status: 0 written, 1 cannot write, 2 bad usage or bad checkpoint.\n",
            HF_DEFAULT_MAX_POSITION);
}

typedef struct export_opts {
    const char *ckpt, *out;
    int bf16;
    uint64_t max_position;
} export_opts;

static int opt_format(const char *cmd, const char *v) {
    if (strcmp(v, "hf") == 0) return 0;
    fprintf(stderr, "baton ckpt %s: --format '%s' is not supported (valid: hf)\n", cmd, v);
    return -1;
}

/* Option a, one of names[0..n), with value v: -1 after saying so when given before
 * (given[k] its earlier value), else 0 with given[k] = v; 0 when not among names. */
static int opt_once(const char *cmd, const char *const *names, const char **given, int n,
                    const char *a, const char *v) {
    for (int k = 0; k < n; k++) {
        if (strcmp(a, names[k]) != 0) continue;
        if (cli_once(cmd, a, given[k], v) != 0) return -1;
        given[k] = v;
    }
    return 0;
}

/* 0 parsed, 1 help shown, -1 usage error (reported). */
static int export_parse(int argc, char **argv, export_opts *o) {
    static const char *const names[] = {"--out", "--format", "--dtype", "--max-position"};
    const char *given[4] = {0};
    *o = (export_opts){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return export_usage(stdout), 1;
        int takes = strcmp(a, "--out") == 0 || strcmp(a, "--format") == 0 ||
                    strcmp(a, "--dtype") == 0 || strcmp(a, "--max-position") == 0;
        if (takes && v == NULL) {
            fprintf(stderr, "baton ckpt export: %s needs a value\n", a);
            return -1;
        }
        if (takes && opt_once("ckpt export", names, given, 4, a, v) != 0) return -1;
        if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--format") == 0 && opt_format("export", v))
            return -1;
        else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0) {
                fprintf(stderr, "baton ckpt export: --dtype '%s' (valid: fp32, bf16)\n", v);
                return -1;
            }
            o->bf16 = strcmp(v, "bf16") == 0;
        } else if (strcmp(a, "--max-position") == 0 &&
                   cli_count(v, 1, UINT32_MAX, &o->max_position) != 0) {
            fprintf(stderr,
                    "baton ckpt export: --max-position expects a count from 1 to %u, such as "
                    "4096 or 4K (K = 1024), got '%s'\n",
                    UINT32_MAX, v);
            return -1;
        } else if (!takes && a[0] == '-') {
            fprintf(stderr, "baton ckpt export: unknown option '%s'\n", a);
            return -1;
        } else if (!takes && o->ckpt != NULL) {
            fprintf(stderr, "baton ckpt export: more than one checkpoint given ('%s')\n", a);
            return -1;
        } else if (!takes) {
            o->ckpt = a;
        }
        i += takes;
    }
    if (o->out != NULL && o->out[0] == '\0') {
        fprintf(stderr, "baton ckpt export: --out '': name the output directory\n");
        return -1;
    }
    if (o->ckpt != NULL && o->out != NULL) return 0;
    fprintf(stderr, "baton ckpt export: %s is required\n", o->ckpt ? "--out DIR" : "CKPT");
    export_usage(stderr);
    return -1;
}

/* The checkpoint's model tensors, checked against the model config; anything else but
 * optimizer state is an error (a tensor we would silently drop). */
static int export_check(const char *dir, const Baton__Manifest *m, const hf_tensor *t, size_t n,
                        bt_diag *diag) {
    for (size_t i = 0; i < n; i++) {
        const Baton__TensorEntry *e = ckpt_find(m, t[i].name);
        if (e == NULL) {
            bt_diag_set(diag, "%s: tensor '%s' is missing from the checkpoint", dir, t[i].name);
            return BT_EINVAL;
        }
        int same = e->n_global_shape == (size_t)t[i].ndim && e->global_shape[0] == t[i].shape[0] &&
                   (t[i].ndim == 1 || e->global_shape[1] == t[i].shape[1]);
        if (!same) {
            bt_diag_set(diag,
                        "%s: tensor '%s' has a global shape that does not match the model "
                        "config in the manifest",
                        dir, t[i].name);
            return BT_EINVAL;
        }
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *k = m->tensors[i]->key;
        if (strncmp(k, "optim.", 6) != 0 && hf_tensor_find(t, n, k) == NULL) {
            bt_diag_set(diag, "%s: tensor '%s' has no place in a Hugging Face LLaMA model", dir, k);
            return BT_EUNSUPPORTED;
        }
    }
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const hf_tensor *)a)->name, ((const hf_tensor *)b)->name);
}

typedef struct export_ctx {
    const char *dir; /* the checkpoint */
    const Baton__Manifest *m;
    ckpt_reader rd; /* its shard files, each opened once */
    int bf16;
    float *buf; /* HF_CHUNK_FLOATS, or one row when a row is longer */
    uint16_t *half;
    FILE *f;
    const char *tmp;
    bt_diag *diag;
} export_ctx;

static int export_write(export_ctx *x, const void *p, size_t bytes) {
    if (fwrite(p, 1, bytes, x->f) == bytes) return 0;
    bt_diag_set(x->diag, "%s: cannot write: %s", x->tmp, strerror(errno));
    return BT_EIO;
}

/* Tensor t, row block by row block, converted to the file's dtype. */
static int export_tensor(export_ctx *x, const hf_tensor *t) {
    const Baton__TensorEntry *e = ckpt_find(x->m, t->name);
    uint64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = hf_tensor_count(t) / (rows ? rows : 1);
    uint64_t step = cols && cols < HF_CHUNK_FLOATS ? HF_CHUNK_FLOATS / cols : 1;
    for (uint64_t r = 0; r < rows; r += step) {
        uint64_t nr = rows - r < step ? rows - r : step, count = nr * cols;
        ckpt_box want = {.off = {r, 0}, .shape = {nr, cols}};
        int rc = bt_cleanup_check(x->diag);
        if (!rc) rc = ckpt_reader_box(&x->rd, e, &want, x->buf, x->diag);
        if (rc) return rc;
        if (!x->bf16) {
            rc = export_write(x, x->buf, count * sizeof(float));
        } else {
            for (uint64_t i = 0; i < count; i++)
                x->half[i] = prec_bf16_bits(x->buf[i]);
            rc = export_write(x, x->half, count * sizeof(uint16_t));
        }
        if (rc) return rc;
    }
    return 0;
}

static int export_alloc(export_ctx *x, const hf_tensor *t, size_t n) {
    uint64_t need = HF_CHUNK_FLOATS;
    for (size_t i = 0; i < n; i++)
        if (t[i].ndim == 2 && t[i].shape[1] > need) need = t[i].shape[1];
    x->buf = malloc(need * sizeof *x->buf);
    x->half = malloc(need * sizeof *x->half);
    return x->buf && x->half ? 0 : BT_ENOMEM;
}

/* Header and data of model.safetensors into x->f. */
static int export_stream(export_ctx *x, hf_tensor *t, size_t n) {
    safetensors_tensor *st = calloc(n ? n : 1, sizeof *st);
    if (st == NULL) return BT_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        st[i].name = t[i].name;
        st[i].dtype = x->bf16 ? SAFETENSORS_BF16 : SAFETENSORS_F32;
        st[i].ndim = t[i].ndim;
        memcpy(st[i].shape, t[i].shape, sizeof t[i].shape);
    }
    bt_buf hdr;
    bt_buf_init(&hdr);
    uint64_t data_bytes;
    safetensors_header(st, n, &hdr, &data_bytes);
    free(st);
    unsigned char pre[8];
    safetensors_prefix(hdr.len, pre);
    int rc = hdr.oom ? BT_ENOMEM : export_write(x, pre, sizeof pre);
    if (!rc) rc = export_write(x, hdr.data, hdr.len);
    bt_buf_free(&hdr);
    if (!rc) rc = export_alloc(x, t, n);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = export_tensor(x, &t[i]);
    return rc;
}

/* out/model.safetensors through a temporary name, fsynced, renamed. */
static int export_weights(export_ctx *x, const char *out, hf_tensor *t, size_t n) {
    char path[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    if (hf_path(path, sizeof path, out, HF_WEIGHTS) ||
        hf_path(tmp, sizeof tmp, out, HF_WEIGHTS ".tmp"))
        return bt_diag_set(x->diag, "%s: path too long", out), BT_EINVAL;
    x->tmp = tmp;
    x->f = fopen(tmp, "wb"); /* 0666 less the umask, as config.json (export_config) */
    if (x->f == NULL) {
        bt_diag_set(x->diag, "%s: cannot create: %s", tmp, strerror(errno));
        return BT_EIO;
    }
    int rc = export_stream(x, t, n);
    if (rc == 0 && (fflush(x->f) != 0 || fsync(fileno(x->f)) != 0)) {
        bt_diag_set(x->diag, "%s: cannot write: %s", tmp, strerror(errno));
        rc = BT_EIO;
    }
    if (fclose(x->f) != 0 && rc == 0) {
        bt_diag_set(x->diag, "%s: cannot write: %s", tmp, strerror(errno));
        rc = BT_EIO;
    }
    x->f = NULL;
    if (rc == 0 && rename(tmp, path) != 0) {
        bt_diag_set(x->diag, "%s: cannot rename into place: %s", path, strerror(errno));
        rc = BT_EIO;
    }
    if (rc) unlink(tmp);
    return rc;
}

/* out/config.json through a temporary name, fsynced, renamed: mode 0666 less the umask,
 * as model.safetensors (fopen's). */
static int export_config(const char *dir, const bt_buf *text, bt_diag *diag) {
    char path[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    if (hf_path(path, sizeof path, dir, HF_CONFIG) ||
        hf_path(tmp, sizeof tmp, dir, HF_CONFIG ".tmp"))
        return bt_diag_set(diag, "%s: path too long", dir), BT_EINVAL;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    int rc = fd < 0 ? BT_EIO : ckpt_write_all(fd, text->data, text->len, tmp, diag);
    if (fd >= 0 && rc == 0 && fsync(fd) != 0) rc = BT_EIO;
    if (fd >= 0 && close(fd) != 0) rc = BT_EIO;
    if (rc == 0 && rename(tmp, path) != 0) rc = BT_EIO;
    if (rc) {
        bt_diag_set(diag, "%s: cannot write: %s", path, strerror(errno));
        unlink(tmp);
    }
    return rc;
}

/* BT_EINVAL naming it when out/model.safetensors or out/config.json is a directory: a
 * rename onto it would fail once the other file had been replaced. */
static int export_targets_free(const char *out, bt_diag *diag) {
    static const char *const files[] = {HF_WEIGHTS, HF_CONFIG};
    char to[CKPT_PATH_MAX];
    struct stat st;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (hf_path(to, sizeof to, out, files[i]))
            return bt_diag_set(diag, "%s: path too long", out), BT_EINVAL;
        if (lstat(to, &st) == 0 && S_ISDIR(st.st_mode)) {
            bt_diag_set(diag,
                        "%s: a directory is in the way of the export; remove it or choose "
                        "another --out",
                        to);
            return BT_EINVAL;
        }
    }
    return 0;
}

/* The export is written into a new directory beside --out (OUT.partial-HOST-PID-XXXXXX,
 * 0700; export_partial.h) and moved into place only once complete, so that a failed
 * export leaves no --out behind, nor half of one in a directory that was already there.
 * Those an export that no longer runs left are removed first. */
static int export_stage_dir(const char *out, char *tmp, size_t cap, int *lock, bt_diag *diag) {
    struct stat st;
    size_t l = strlen(out);
    while (l > 1 && out[l - 1] == '/')
        l--;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        bt_diag_set(diag, "%s: cannot create the output directory: a file of that name exists",
                    out);
        return BT_EINVAL;
    }
    int rc = export_targets_free(out, diag);
    if (rc) return rc;
    if (export_partial_template(out, l, tmp, cap) != 0)
        return bt_diag_set(diag, "%s: path too long", out), BT_EINVAL;
    char parent[CKPT_PATH_MAX];
    ckpt_path_parent(tmp, parent, sizeof parent);
    rc = ckpt_out_mkdirs(parent, diag);
    if (rc) return rc;
    export_partial_sweep(out, l);
    if (mkdtemp(tmp) == NULL) {
        int err = errno;
        bt_diag_set(diag, "%s: cannot create the output directory (%s beside it): %s", out, tmp,
                    strerror(err));
        return err == ENOENT || err == ENOTDIR ? BT_EINVAL : BT_EIO;
    }
    if (bt_cleanup_add(tmp, BT_CLEANUP_TREE)) return BT_ENOMEM;
    *lock = export_partial_lock(tmp); /* held until the export ends: it is not abandoned */
    if (*lock >= 0) return 0;
    bt_diag_set(diag, "%s/" EXPORT_PARTIAL_LOCK ": cannot lock: %s", tmp, strerror(errno));
    return BT_EIO;
}

/* Moves the finished export in tmp to out: the directory itself when out does not
 * exist, else its two files into out (whose other contents stay). */
static int export_publish(const char *tmp, const char *out, bt_diag *diag) {
    static const char *const files[] = {HF_WEIGHTS, HF_CONFIG};
    char from[CKPT_PATH_MAX], to[CKPT_PATH_MAX];
    export_partial_unlink_lock(tmp); /* not moved with it; still held until the export ends */
    if (ckpt_fsync_dir(tmp) != 0) return bt_diag_set(diag, "%s: cannot sync", tmp), BT_EIO;
    struct stat st;
    mode_t mask = umask(0);
    umask(mask);
    /* the new directory becomes DIR: the usual mode for what is meant to be shared */
    if (lstat(out, &st) != 0 && errno == ENOENT && chmod(tmp, 0777 & ~mask) == 0 &&
        rename(tmp, out) == 0)
        return 0;
    int rc = export_targets_free(out, diag); /* checked at the start too: made since? */
    if (rc) return rc;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if (hf_path(from, sizeof from, tmp, files[i]) || hf_path(to, sizeof to, out, files[i]))
            return bt_diag_set(diag, "%s: path too long", out), BT_EINVAL;
        if (rename(from, to) != 0) {
            bt_diag_set(diag, "%s: cannot move into place: %s", to, strerror(errno));
            return BT_EIO;
        }
    }
    rmdir(tmp);
    return ckpt_fsync_dir(out) == 0 ? 0 : BT_EIO;
}

static int export_run(const export_opts *o, const char *dir, const Baton__Manifest *m,
                      bt_diag *diag) {
    if (m->model == NULL) {
        bt_diag_set(diag, "%s: the manifest has no model config", dir);
        return BT_EINVAL;
    }
    hf_tensor *t = NULL;
    size_t n = 0;
    char tmp[CKPT_PATH_MAX] = "";
    int lock = -1;
    bt_buf cfg;
    bt_buf_init(&cfg);
    /* config.json first: it refuses what has no Hugging Face form (MoE, a RoPE scaling
     * transformers lacks) before anything is read or written */
    int known;
    uint64_t max_position = hf_config_max_position(m->model, o->max_position, m->seq_len, &known);
    int rc = hf_config_write(m->model, max_position, o->bf16 ? "bfloat16" : "float32", &cfg, diag);
    if (rc) {
        char msg[sizeof diag->msg];
        snprintf(msg, sizeof msg, "%s", diag->msg);
        bt_diag_init(diag);
        bt_diag_set(diag, "%s: %s", dir, msg);
    }
    if (!rc) rc = hf_model_tensors(m->model, &t, &n, diag);
    if (!rc) rc = export_check(dir, m, t, n, diag);
    if (!rc) rc = export_stage_dir(o->out, tmp, sizeof tmp, &lock, diag);
    if (t != NULL) qsort(t, n, sizeof *t, by_name);
    export_ctx x = {.dir = dir, .m = m, .bf16 = o->bf16, .diag = diag};
    ckpt_reader_init(&x.rd, dir, m);
    if (!rc) rc = export_weights(&x, tmp, t, n);
    ckpt_reader_close(&x.rd);
    if (!rc) rc = export_config(tmp, &cfg, diag);
    if (!rc) rc = export_publish(tmp, o->out, diag);
    if (rc && tmp[0] != '\0') ckpt_remove_dir(tmp);
    if (lock >= 0) close(lock);
    if (!rc)
        printf("exported %zu tensors (%s) of %s step %" PRIu64 " to %s\n", n,
               o->bf16 ? "bf16" : "fp32", dir, m->step, o->out);
    if (!rc && !known)
        fprintf(stderr,
                "baton ckpt export: note: max_position_embeddings is %" PRIu64
                ", Hugging Face's default: the checkpoint does not say how long a context the "
                "model was trained for (one saved before baton recorded it; --max-position N "
                "says it; so does a RoPE scaling's original_max_position)\n",
                max_position);
    bt_buf_free(&cfg);
    free(x.buf);
    free(x.half);
    free(t);
    return rc;
}

/* --max-position against the checkpoint: below the original context a llama3 or yarn
 * scaling records (original_max_position_embeddings in config.json) it contradicts the
 * scaling, which transformers warns about; refused. */
static int export_check_max_position(const export_opts *o, const Baton__Manifest *m,
                                     bt_diag *diag) {
    const Baton__RopeScaling *s = m->model && m->model->rope ? m->model->rope->scaling : NULL;
    if (o->max_position == 0 || s == NULL ||
        (s->type != BATON__ROPE_SCALING__TYPE__LLAMA3 &&
         s->type != BATON__ROPE_SCALING__TYPE__YARN) ||
        o->max_position >= s->original_max_position)
        return 0;
    bt_diag_set(diag,
                "--max-position %" PRIu64 " is below the original context of the checkpoint's "
                "%s RoPE scaling, original_max_position %" PRIu64
                " (max_position_embeddings must be at least original_max_position_embeddings)",
                o->max_position, s->type == BATON__ROPE_SCALING__TYPE__LLAMA3 ? "llama3" : "yarn",
                (uint64_t)s->original_max_position);
    return BT_EINVAL;
}

/* One export of the checkpoint o (ctx) names, found into dir (ckpt_gone_try). */
static int export_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    const export_opts *o = ctx;
    Baton__Manifest *m = NULL;
    int rc = ckpt_open(o->ckpt, dir, cap, &m, diag);
    if (!rc) ckpt_gone_fault(dir);
    if (!rc) rc = export_check_max_position(o, m, diag);
    if (!rc) rc = export_run(o, dir, m, diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    return rc;
}

int ckpt_cmd_export(int argc, char **argv) {
    export_opts o;
    int p = export_parse(argc, argv, &o);
    if (p) return p > 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    bt_diag diag;
    bt_diag_init(&diag);
    char dir[CKPT_PATH_MAX];
    bt_cleanup_install();
    int rc =
        ckpt_gone_retry("baton ckpt export", o.ckpt, export_once, &o, dir, sizeof dir, NULL, &diag);
    if (rc) cli_error("ckpt export", &diag, rc);
    return bt_cleanup_exit(hf_exit(rc));
}

/* ================================ import ================================ */

static void import_usage(FILE *f) {
    fprintf(f,
            "usage: baton ckpt import [--format hf] DIR --out CKPT_DIR [--recipe-name N]\n\n"
            "Makes a baton checkpoint from a Hugging Face LlamaForCausalLM directory DIR\n"
            "(" HF_CONFIG " and one " HF_WEIGHTS " with F32, BF16 or F16 tensors): one\n"
            "rank's shard (layout tp1 pp1 dp1) in float32, step 0, no optimizer state.\n"
            "A run can start from it (baton-worker --init CKPT_DIR) with any layout.\n"
            "CKPT_DIR must not exist; it is written as CKPT_DIR.partial and renamed, its\n"
            "missing parents created (and removed again on failure); nothing else is touched.\n"
            "With tie_word_embeddings true the head is the embedding, as transformers\n"
            "loads it, whatever lm_head.weight the file holds (a note says when it differs).\n\n"
            "  --out CKPT_DIR     the checkpoint directory to create\n"
            "  --format hf        the only format (default)\n"
            "  --recipe-name N    recipe name recorded in the manifest (default " HF_DEFAULT_RECIPE
            ")\n"
            "  --help             show this help\n\n"
            "Exit status: 0 written, 1 cannot write, 2 bad usage or bad input.\n");
}

typedef struct import_opts {
    const char *in, *out, *recipe;
} import_opts;

/* --recipe-name: a name the manifest can record and every tool print as it is (not
 * empty, UTF-8, no control character); -1 after saying why not, the name escaped. */
static int import_check_recipe(const char *name) {
    size_t at = bt_utf8_first_unprintable(name);
    if (name[0] != '\0' && name[at] == '\0') return 0;
    bt_buf b;
    bt_buf_init(&b);
    if (name[0] == '\0')
        fprintf(stderr, "baton ckpt import: --recipe-name '': name the recipe (default %s)\n",
                HF_DEFAULT_RECIPE);
    else
        fprintf(stderr,
                "baton ckpt import: --recipe-name '%s': byte %zu is a control character or "
                "not UTF-8; a recipe name is printable text\n",
                bt_buf_text_of(&b, name), at);
    bt_buf_free(&b);
    return -1;
}

/* DIR named, there and a directory: 0, or -1 after saying what it is instead. */
static int import_check_in(const char *in) {
    struct stat st;
    const char *what = NULL;
    int err = in[0] && stat(in, &st) != 0 ? errno : 0;
    if (in[0] == '\0')
        what = "name the Hugging Face model's directory";
    else if (err == ENOENT)
        what = "no such directory";
    else if (err != 0)
        what = strerror(err);
    else if (!S_ISDIR(st.st_mode))
        what = "not a directory; give the Hugging Face model's directory (" HF_CONFIG
               " and " HF_WEIGHTS ")";
    if (what == NULL) return 0;
    fprintf(stderr, "baton ckpt import: '%s': %s\n", in, what);
    return -1;
}

static int import_parse(int argc, char **argv, import_opts *o) {
    static const char *const names[] = {"--out", "--format", "--recipe-name"};
    const char *given[3] = {0};
    *o = (import_opts){.recipe = HF_DEFAULT_RECIPE};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return import_usage(stdout), 1;
        int takes = strcmp(a, "--out") == 0 || strcmp(a, "--format") == 0 ||
                    strcmp(a, "--recipe-name") == 0;
        if (takes && v == NULL) {
            fprintf(stderr, "baton ckpt import: %s needs a value\n", a);
            return -1;
        }
        if (takes && opt_once("ckpt import", names, given, 3, a, v) != 0) return -1;
        if (strcmp(a, "--out") == 0)
            o->out = v;
        else if (strcmp(a, "--recipe-name") == 0)
            o->recipe = v;
        else if (strcmp(a, "--format") == 0 && opt_format("import", v))
            return -1;
        else if (!takes && a[0] == '-') {
            fprintf(stderr, "baton ckpt import: unknown option '%s'\n", a);
            return -1;
        } else if (!takes && o->in != NULL) {
            fprintf(stderr, "baton ckpt import: more than one input directory given ('%s')\n", a);
            return -1;
        } else if (!takes) {
            o->in = a;
        }
        i += takes;
    }
    if (o->in != NULL && o->out != NULL)
        return import_check_in(o->in) != 0 ? -1 : import_check_recipe(o->recipe);
    fprintf(stderr, "baton ckpt import: %s is required\n", o->in ? "--out CKPT_DIR" : "DIR");
    import_usage(stderr);
    return -1;
}

static int import_read_config(const char *in, hf_model *h, bt_diag *diag) {
    char path[CKPT_PATH_MAX];
    if (hf_path(path, sizeof path, in, HF_CONFIG))
        return bt_diag_set(diag, "%s: path too long", in), BT_EINVAL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return BT_EINVAL;
    }
    char *text = malloc(HF_CONFIG_MAX);
    size_t len = text ? fread(text, 1, HF_CONFIG_MAX, f) : 0;
    int rc = text == NULL ? BT_ENOMEM : 0;
    if (!rc && ferror(f))
        bt_diag_set(diag, "%s: cannot read: %s", path, strerror(errno)), rc = BT_EIO;
    if (!rc && len == HF_CONFIG_MAX)
        bt_diag_set(diag, "%s: larger than 16 MiB; not a model config", path), rc = BT_EINVAL;
    fclose(f);
    if (!rc) rc = hf_config_read(text, len, path, h, diag);
    free(text);
    model_config cfg;
    if (!rc && model_config_from_pb(&cfg, &h->model, diag) != 0) {
        char msg[sizeof diag->msg];
        snprintf(msg, sizeof msg, "%s", diag->msg);
        bt_diag_init(diag);
        bt_diag_set(diag, "%s: %s", path, msg);
        rc = BT_EINVAL;
    }
    return rc;
}

static int import_open_weights(const char *in, safetensors_file *sf, bt_diag *diag) {
    char path[CKPT_PATH_MAX], index[CKPT_PATH_MAX];
    if (hf_path(path, sizeof path, in, HF_WEIGHTS) ||
        hf_path(index, sizeof index, in, HF_WEIGHTS ".index.json"))
        return bt_diag_set(diag, "%s: path too long", in), BT_EINVAL;
    if (access(path, F_OK) != 0 && access(index, F_OK) == 0) {
        bt_diag_set(diag,
                    "%s: sharded weights (%s) are not supported; merge them into one " HF_WEIGHTS,
                    in, index);
        return BT_EUNSUPPORTED;
    }
    int rc = safetensors_open(sf, path, diag);
    return rc == BT_ENOENT || rc == BT_EIO ? BT_EINVAL : rc;
}

/* "[d0, d1, ...]" into out. */
static void hf_shape_str(const uint64_t *shape, int ndim, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s%" PRIu64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

/* 1 when t is the head and config.json ties it to the embedding. */
static int import_tied_head(const hf_model *h, const hf_tensor *t) {
    return h->tied && strcmp(t->name, "lm_head.weight") == 0;
}

/* The safetensors tensor to read for model tensor t (lm_head from embed_tokens when
 * tied, as transformers ties them whatever the file holds); its shape must be t's. */
static int import_source(const safetensors_file *sf, const hf_model *h, const hf_tensor *t,
                         const safetensors_tensor **out, bt_diag *diag) {
    const safetensors_tensor *s = import_tied_head(h, t)
                                      ? safetensors_find(sf, "model.embed_tokens.weight")
                                      : safetensors_find(sf, t->name);
    if (s == NULL) {
        bt_diag_set(diag, "%s: tensor '%s' is missing (the model " HF_CONFIG " describes has it)",
                    sf->path, t->name);
        return BT_EINVAL;
    }
    int same = s->ndim == t->ndim && s->shape[0] == t->shape[0] &&
               (t->ndim == 1 || s->shape[1] == t->shape[1]);
    if (!same) {
        char want[64], got[192];
        hf_shape_str(t->shape, t->ndim, want, sizeof want);
        hf_shape_str(s->shape, s->ndim, got, sizeof got);
        bt_diag_set(diag, "%s: tensor '%s' has shape %s; " HF_CONFIG " implies %s", sf->path,
                    s->name, got, want);
        return BT_EINVAL;
    }
    *out = s;
    return 0;
}

/* Every safetensors tensor must be a model tensor (older exports also carry the RoPE
 * tables as *.rotary_emb.inv_freq, which baton computes itself). */
static int import_check_extra(const safetensors_file *sf, const hf_tensor *t, size_t n,
                              bt_diag *diag) {
    const char *skip = ".rotary_emb.inv_freq";
    for (size_t i = 0; i < sf->n; i++) {
        const char *name = sf->t[i].name;
        size_t l = strlen(name), k = strlen(skip);
        if (hf_tensor_find(t, n, name) || (l > k && strcmp(name + l - k, skip) == 0)) continue;
        bt_diag_set(diag, "%s: tensor '%s' has no place in baton's LLaMA model", sf->path, name);
        return BT_EUNSUPPORTED;
    }
    return 0;
}

/* CKPT_DIR as a checkpoint root (its parent) and name. */
static int import_split(const char *out, char *root, char *name, bt_diag *diag) {
    char p[CKPT_PATH_MAX];
    size_t l = strlen(out);
    while (l > 1 && out[l - 1] == '/')
        l--;
    if (l >= sizeof p - 1) return bt_diag_set(diag, "%s: path too long", out), BT_EINVAL;
    memcpy(p, out, l), p[l] = '\0';
    char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0 ||
        strlen(base) > 255) {
        bt_diag_set(diag, "--out '%s': needs a new directory name", out);
        return BT_EINVAL;
    }
    memcpy(name, base, strlen(base) + 1); /* at most 255 bytes, checked above */
    if (slash == NULL)
        snprintf(root, CKPT_PATH_MAX, ".");
    else if (slash == p)
        snprintf(root, CKPT_PATH_MAX, "/");
    else
        *slash = '\0', snprintf(root, CKPT_PATH_MAX, "%s", p);
    struct stat st;
    if (lstat(out, &st) == 0) {
        bt_diag_set(diag, "--out '%s' already exists; give a new checkpoint directory", out);
        return BT_EINVAL;
    }
    return 0;
}

typedef struct import_ctx {
    safetensors_file *sf;
    const hf_model *h;
    const hf_tensor *t;
    size_t n;
    float *buf;
    bt_diag *diag;
} import_ctx;

/* The head tied to the embedding (now in x->buf, n floats): a note when the file's own
 * lm_head.weight, which transformers would not use either, differs from it. */
static int import_tied_note(import_ctx *x, uint64_t n) {
    const safetensors_tensor *s = safetensors_find(x->sf, "lm_head.weight");
    if (s == NULL) return 0;
    int differs = safetensors_count(s) != n;
    float *own = differs ? NULL : malloc(n * sizeof *own);
    if (!differs && own == NULL) return BT_ENOMEM;
    int rc = differs ? 0 : safetensors_read_f32(x->sf, s, own, x->diag);
    for (uint64_t i = 0; rc == 0 && !differs && i < n; i++)
        differs = memcmp(&own[i], &x->buf[i], sizeof *own) != 0;
    free(own);
    if (rc == 0 && differs)
        fprintf(stderr,
                "baton ckpt import: note: %s: tie_word_embeddings is true, so the head is "
                "model.embed_tokens.weight, as transformers loads it; the file's own "
                "lm_head.weight differs from it and is not used\n",
                x->sf->path);
    return rc;
}

static int import_tensors(import_ctx *x, ckpt_writer *w) {
    for (size_t i = 0; i < x->n; i++) {
        const hf_tensor *t = &x->t[i];
        const safetensors_tensor *s;
        int rc = bt_cleanup_check(x->diag);
        if (!rc) rc = import_source(x->sf, x->h, t, &s, x->diag);
        if (!rc) rc = safetensors_read_f32(x->sf, s, x->buf, x->diag);
        if (!rc && import_tied_head(x->h, t)) rc = import_tied_note(x, hf_tensor_count(t));
        uint64_t rows = t->ndim == 2 ? t->shape[0] : 1, cols = hf_tensor_count(t) / rows;
        ckpt_box piece = {.shape = {rows, cols}};
        if (!rc)
            rc = ckpt_writer_add(w, t->name, t->ndim, t->shape, &piece, BATON__DTYPE__F32, x->buf,
                                 x->diag);
        if (rc) return rc;
    }
    return 0;
}

static int import_write(import_ctx *x, const import_opts *o, const char *root, const char *name) {
    char partial[CKPT_PATH_MAX];
    int rc = ckpt_out_begin(root, name, partial, sizeof partial, x->diag);
    if (rc) return rc;
    ckpt_writer w;
    rc = ckpt_writer_open(&w, partial, 0, CKPT_DEFAULT_BLOCK, x->diag);
    if (!rc) {
        rc = import_tensors(x, &w);
        if (rc)
            ckpt_writer_abort(&w);
        else
            rc = ckpt_writer_finish(&w, x->diag);
    }
    Baton__Parallel layout = BATON__PARALLEL__INIT;
    layout.has_tp = layout.has_pp = layout.has_dp = layout.has_cp = layout.has_ep = 1;
    layout.tp = layout.pp = layout.dp = layout.cp = layout.ep = 1;
    Baton__Precision prec = BATON__PRECISION__INIT;
    prec.has_type = 1, prec.type = BATON__PRECISION__TYPE__FP32;
    Baton__Manifest hdr = BATON__MANIFEST__INIT;
    hdr.recipe_name = (char *)o->recipe;
    hdr.stage_name = (char *)"import";
    hdr.has_stage_index = hdr.has_step = hdr.has_data_position = hdr.has_optim_step = 1;
    hdr.model = (Baton__Model *)&x->h->model;
    hdr.has_seq_len = 1, hdr.seq_len = x->h->max_position; /* the context it is for */
    hdr.layout = &layout;
    hdr.precision = &prec;
    if (!rc) rc = ckpt_commit_dir(root, name, &hdr, 1, HF_COMMIT_TIMEOUT, x->diag);
    return rc;
}

static int import_run(const import_opts *o, bt_diag *diag) {
    hf_model h;
    safetensors_file sf = {0};
    hf_tensor *t = NULL;
    size_t n = 0;
    char root[CKPT_PATH_MAX], name[256];
    int rc = import_read_config(o->in, &h, diag);
    if (!rc) rc = import_open_weights(o->in, &sf, diag);
    if (!rc) rc = hf_model_tensors(&h.model, &t, &n, diag);
    if (!rc) rc = import_check_extra(&sf, t, n, diag);
    if (!rc) rc = import_split(o->out, root, name, diag);
    uint64_t biggest = 1;
    for (size_t i = 0; i < n; i++)
        biggest = hf_tensor_count(&t[i]) > biggest ? hf_tensor_count(&t[i]) : biggest;
    import_ctx x = {.sf = &sf, .h = &h, .t = t, .n = n, .diag = diag};
    if (!rc && (x.buf = malloc(biggest * sizeof *x.buf)) == NULL) rc = BT_ENOMEM;
    if (!rc) rc = import_write(&x, o, root, name);
    if (!rc) printf("imported %zu tensors from %s into %s\n", n, o->in, o->out);
    free(x.buf);
    free(t);
    safetensors_close(&sf);
    return rc;
}

int ckpt_cmd_import(int argc, char **argv) {
    import_opts o;
    int p = import_parse(argc, argv, &o);
    if (p) return p > 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    bt_diag diag;
    bt_diag_init(&diag);
    bt_cleanup_install();
    int rc = import_run(&o, &diag);
    if (rc) cli_error("ckpt import", &diag, rc);
    return bt_cleanup_exit(hf_exit(rc));
}
