/* manifest.pb's bytes: its own CRC32C first, then the message (ckpt.h, ckpt_manifest_pack). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "crc32c.h"
#include "util/file.h"

/* Field 26 (manifest_crc32c), wire type 5 (fixed32): its tag as a varint, then the four
 * bytes of the CRC, little endian. */
#define MANIFEST_CRC_TAG0 0xD5
#define MANIFEST_CRC_TAG1 0x01
#define MANIFEST_CRC_HEAD 6

int ckpt_manifest_pack(const Baton__Manifest *m, uint8_t **out, size_t *len) {
    Baton__Manifest body = *m; /* shallow: only the two fields below differ */
    body.has_manifest_crc32c = 0, body.manifest_crc32c = 0;
    body.has_checksummed = 1, body.checksummed = 1;
    size_t n = baton__manifest__get_packed_size(&body);
    uint8_t *buf = malloc(MANIFEST_CRC_HEAD + n);
    if (buf == NULL) return BT_ENOMEM;
    baton__manifest__pack(&body, buf + MANIFEST_CRC_HEAD);
    uint32_t crc = crc32c_update(0, buf + MANIFEST_CRC_HEAD, n);
    buf[0] = MANIFEST_CRC_TAG0, buf[1] = MANIFEST_CRC_TAG1;
    for (int k = 0; k < 4; k++)
        buf[2 + k] = (uint8_t)(crc >> (8 * k));
    *out = buf, *len = MANIFEST_CRC_HEAD + n;
    return 0;
}

/* Whether buf starts with the checksum's field; its CRC into *want. */
static int manifest_has_head(const uint8_t *buf, size_t len, uint32_t *want) {
    if (len < MANIFEST_CRC_HEAD || buf[0] != MANIFEST_CRC_TAG0 || buf[1] != MANIFEST_CRC_TAG1)
        return 0;
    *want = 0;
    for (int k = 0; k < 4; k++)
        *want |= (uint32_t)buf[2 + k] << (8 * k);
    return 1;
}

int ckpt_manifest_decode(const uint8_t *buf, size_t len, const char *where, Baton__Manifest **out,
                         bt_diag *diag) {
    uint32_t want = 0;
    int head = manifest_has_head(buf, len, &want);
    *out = NULL;
    if (head) {
        uint32_t got = crc32c_update(0, buf + MANIFEST_CRC_HEAD, len - MANIFEST_CRC_HEAD);
        if (got != want) {
            bt_diag_set(diag,
                        "%s: damaged: its CRC32C is 0x%08x, the checksum it carries 0x%08x (the "
                        "manifest was changed after it was written)",
                        where, got, want);
            return BT_EINVAL;
        }
    }
    Baton__Manifest *m = baton__manifest__unpack(NULL, len, buf);
    if (m == NULL) {
        bt_diag_set(diag, "%s: not a checkpoint manifest (cannot be decoded)", where);
        return BT_EINVAL;
    }
    if (!head && (m->has_manifest_crc32c || m->checksummed)) {
        bt_diag_set(diag,
                    "%s: damaged: it is marked as checksummed, but its checksum is not where "
                    "it belongs (the file's first bytes)",
                    where);
        baton__manifest__free_unpacked(m, NULL);
        return BT_EINVAL;
    }
    int rc = ckpt_manifest_check_version(m, where, diag);
    if (rc != 0) {
        baton__manifest__free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

int ckpt_manifest_checked(const Baton__Manifest *m) {
    return m->has_manifest_crc32c;
}

int ckpt_manifest_read(const char *dir, Baton__Manifest **out, bt_diag *diag) {
    char p[CKPT_PATH_MAX], *buf = NULL;
    size_t len = 0;
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST);
    *out = NULL;
    if (bt_read_file(p, CKPT_MAX_MANIFEST, &buf, &len) != 0) {
        int err = errno;
        bt_diag_set(diag, "%s: cannot read: %s", p, strerror(err));
        errno = err; /* the caller may weigh the cause (run_stage_finished) */
        return err == ENOENT ? BT_ENOENT : BT_EIO;
    }
    int rc = ckpt_manifest_decode((const uint8_t *)buf, len, p, out, diag);
    free(buf);
    return rc;
}

int ckpt_manifest_write(const char *dir, const Baton__Manifest *m, bt_diag *diag) {
    uint8_t *buf;
    size_t n;
    if (ckpt_manifest_pack(m, &buf, &n) != 0) {
        bt_diag_set(diag, "%s: out of memory packing %s", dir, CKPT_MANIFEST);
        return BT_ENOMEM;
    }
    char p[CKPT_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST);
    int rc = ckpt_write_file_atomic(p, buf, n, diag);
    free(buf);
    return rc;
}

int ckpt_manifest_check_version(const Baton__Manifest *m, const char *where, bt_diag *diag) {
    if (m->format_version <= CKPT_FORMAT_VERSION) return 0;
    bt_diag_set(diag,
                "%s: checkpoint format %u, written by a newer baton (this one reads up to "
                "format %u)",
                where, m->format_version, CKPT_FORMAT_VERSION);
    return BT_EUNSUPPORTED;
}
