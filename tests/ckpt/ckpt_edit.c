/* ckpt_edit: rewrites a checkpoint's manifest the way a checkpoint the tests cannot write
 * any more would look, so that the loader's paths for such checkpoints run end to end.
 *
 *   ckpt_edit DIR --format-1          fp8 amax histories inline in the manifest (format 1,
 *                                     before the shards held them), each gradient (".dy")
 *                                     state as the per-replica loss scaling saved it: its
 *                                     history times the layout's dp, its scale divided
 *                                     by dp (worker/engine/train.c, train_backward_scale)
 *   ckpt_edit DIR --drop-fp8 TEXT     the fp8 states whose name holds TEXT removed (a
 *                                     checkpoint from before those GEMMs ran fp8)
 *   ckpt_edit DIR --drop-seq-len      no seq_len (a checkpoint from before it was kept)
 *   ckpt_edit DIR --drop-data         no training data counts and no sample_order (a
 *                                     checkpoint from before they were kept: a mixture
 *                                     resumes in the order by slot, worker/data/loader.h)
 *   ckpt_edit DIR --drop-weights      no data.mix weights (a checkpoint from before they were
 *                                     kept: a resume under other weights goes by the spec)
 *   ckpt_edit DIR --drop-run-id       no run id (a checkpoint from before manifests recorded
 *                                     the run that saved it: ckpt_same_run)
 *   ckpt_edit DIR --drop-checksum     manifest.pb without its own CRC32C (a checkpoint from
 *                                     before manifests carried one: read unchecked)
 *   ckpt_edit DIR --set-format N      format_version N (a newer baton's checkpoint when N is
 *                                     beyond CKPT_FORMAT_VERSION), its checksum made again
 *
 * The shard files stay as they are (a dropped or inlined history's bytes are left unread);
 * manifest.pb is replaced atomically, with its checksum (ckpt_manifest_write) unless
 * --drop-checksum. A test tool: not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static int usage(void) {
    fprintf(stderr, "usage: ckpt_edit DIR --format-1\n"
                    "       ckpt_edit DIR --drop-fp8 TEXT\n"
                    "       ckpt_edit DIR --drop-seq-len\n"
                    "       ckpt_edit DIR --drop-data\n"
                    "       ckpt_edit DIR --drop-weights\n"
                    "       ckpt_edit DIR --drop-run-id\n"
                    "       ckpt_edit DIR --drop-checksum\n"
                    "       ckpt_edit DIR --set-format N\n");
    return 2;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Each state's history read from its shard into the manifest; ".dy" ones scaled by dp. */
static int to_format_1(const char *dir, Baton__Manifest *m, bt_diag *diag) {
    float dp = m->layout && m->layout->dp > 1 ? (float)m->layout->dp : 1.0f;
    ckpt_reader r;
    ckpt_reader_init(&r, dir, m);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < m->n_fp8; i++) {
        Baton__Fp8State *f = m->fp8[i];
        uint64_t n = ckpt_fp8_history_len(f);
        float *h = malloc((n ? n : 1) * sizeof *h);
        rc = h ? ckpt_reader_fp8(&r, f, h, diag) : BT_ENOMEM;
        if (rc != 0) {
            free(h);
            break;
        }
        float k = f->tensor && ends_with(f->tensor, ".dy") ? dp : 1.0f;
        for (uint64_t j = 0; j < n; j++)
            h[j] *= k;
        f->scale /= k;
        free(f->amax_history);
        f->amax_history = h, f->n_amax_history = n;
        if (f->history) baton__tensor_entry__free_unpacked(f->history, NULL);
        f->history = NULL;
    }
    ckpt_reader_close(&r);
    m->format_version = 1;
    return rc;
}

/* Returns how many states were dropped. */
static size_t drop_fp8(Baton__Manifest *m, const char *text) {
    size_t kept = 0;
    for (size_t i = 0; i < m->n_fp8; i++) {
        if (m->fp8[i]->tensor && strstr(m->fp8[i]->tensor, text)) {
            baton__fp8_state__free_unpacked(m->fp8[i], NULL);
            continue;
        }
        m->fp8[kept++] = m->fp8[i];
    }
    size_t dropped = m->n_fp8 - kept;
    m->n_fp8 = kept;
    return dropped;
}

static int write_manifest(const char *dir, const Baton__Manifest *m, int unchecked, bt_diag *diag) {
    if (!unchecked) return ckpt_manifest_write(dir, m, diag);
    Baton__Manifest old = *m; /* as a baton from before the checksum wrote it */
    old.has_manifest_crc32c = 0, old.has_checksummed = 0, old.checksummed = 0;
    size_t n = baton__manifest__get_packed_size(&old);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) return BT_ENOMEM;
    baton__manifest__pack(&old, buf);
    char p[CKPT_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST);
    int rc = ckpt_write_file_atomic(p, buf, n, diag);
    free(buf);
    return rc;
}

int main(int argc, char **argv) {
    int fmt1 = argc == 3 && strcmp(argv[2], "--format-1") == 0;
    int drop = argc == 4 && strcmp(argv[2], "--drop-fp8") == 0;
    int no_len = argc == 3 && strcmp(argv[2], "--drop-seq-len") == 0;
    int no_data = argc == 3 && strcmp(argv[2], "--drop-data") == 0;
    int no_run = argc == 3 && strcmp(argv[2], "--drop-run-id") == 0;
    int no_weights = argc == 3 && strcmp(argv[2], "--drop-weights") == 0;
    int no_crc = argc == 3 && strcmp(argv[2], "--drop-checksum") == 0;
    int set_fmt = argc == 4 && strcmp(argv[2], "--set-format") == 0;
    if (!fmt1 && !drop && !no_len && !no_data && !no_run && !no_weights && !no_crc && !set_fmt)
        return usage();
    const char *dir = argv[1];
    bt_diag diag = {0};
    Baton__Manifest *m = NULL;
    int rc = ckpt_manifest_read(dir, &m, &diag);
    if (rc == 0 && set_fmt) m->has_format_version = 1, m->format_version = (uint32_t)atoi(argv[3]);
    if (rc == 0 && fmt1) rc = to_format_1(dir, m, &diag);
    if (rc == 0 && no_len) m->has_seq_len = 0, m->seq_len = 0;
    if (rc == 0 && no_run) free(m->run_id), m->run_id = NULL;
    for (size_t i = 0; rc == 0 && no_weights && i < m->n_data; i++)
        m->data[i]->has_weight = 0, m->data[i]->weight = 0;
    if (rc == 0 && no_data) {
        for (size_t i = 0; i < m->n_data; i++)
            baton__data_counts__free_unpacked(m->data[i], NULL);
        m->n_data = 0;
        m->has_sample_order = 0, m->sample_order = 0;
    }
    if (rc == 0 && drop) {
        size_t n = drop_fp8(m, argv[3]);
        printf("%s: %zu fp8 state(s) holding \"%s\" dropped, %zu kept\n", dir, n, argv[3],
               m->n_fp8);
        if (n == 0) bt_diag_set(&diag, "no fp8 state's name holds \"%s\"", argv[3]), rc = 1;
    }
    if (rc == 0) rc = write_manifest(dir, m, no_crc, &diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (rc != 0) {
        fprintf(stderr, "ckpt_edit: %s: %s\n", dir, diag.msg);
        return 1;
    }
    return 0;
}
