/* baton ckpt pack / unpack: a checkpoint as one pax tar + zstd archive whose top-level
 * entry is the checkpoint directory. Both directions stream (one chunk in memory at a
 * time) and check every shard byte against the manifest's CRC32C values: pack refuses to
 * archive damaged data, unpack extracts into NAME.partial and renames only after the
 * whole checkpoint has been checked. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt_cmds.h"
#include "ckpt_gone.h"
#include "ckpt_store_crc.h"
#include "ckpt_store_fs.h"
#include "../cli.h"
#include "util/cleanup.h"

#define PACK_CHUNK (1u << 20)

/* ---- pack ---- */

static void pack_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt pack CKPT [--out FILE.tar.zst]\n\n"
               "Archives checkpoint CKPT (a checkpoint or run directory) as pax tar + zstd,\n"
               "checking every shard byte against the manifest's CRC32C on the way.\n\n"
               "options:\n"
               "  --out FILE   the archive to write (default: ./<checkpoint-name>.tar.zst);\n"
               "               it must not exist; missing directories above it are created\n"
               "  --help       show this help\n\n"
               "Exit status: 0 packed, 1 failed (a shard that fails its CRC32C, cannot\n"
               "write), 2 bad usage, not a checkpoint, or FILE exists.\n");
}

/* The archive being written: libarchive writes it to `path` (the .partial file). */
typedef struct pack_out {
    struct archive *a;
    const char *path;
} pack_out;

/* A failed write into the archive: the output is what failed (libarchive only writes), so
 * the message names it and the errno (ENOSPC: a full disk), what was being archived after. */
static int pack_write_failed(const pack_out *o, const char *what, bt_diag *diag) {
    int err = archive_errno(o->a);
    bt_diag_set(diag, "%s: cannot write (archiving %s): %s", o->path, what,
                err > 0 ? strerror(err) : archive_error_string(o->a));
    return BT_EIO;
}

/* Streams one file into the archive as NAME/FILE; chk (may be NULL) checks its bytes. */
static int pack_file(const pack_out *o, const char *dir, const char *top, const char *file,
                     ckpt_file_check *chk, unsigned char *buf, bt_diag *diag) {
    struct archive *a = o->a;
    char path[CKPT_PATH_MAX], entry_name[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, dir, file);
    ckpt_path_join(entry_name, sizeof entry_name, top, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return BT_EIO;
    }
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, entry_name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, st.st_mode & 0777);
    archive_entry_set_size(e, st.st_size);
    archive_entry_set_mtime(e, st.st_mtime, 0);
    int rc = archive_write_header(a, e) != ARCHIVE_OK ? pack_write_failed(o, path, diag) : 0;
    if (chk) ckpt_check_reset(chk);
    int64_t total = 0;
    while (rc == 0) {
        ssize_t got = read(fd, buf, PACK_CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got < 0)
                bt_diag_set(diag, "%s: read error: %s", path, strerror(errno));
            else if (total != st.st_size)
                bt_diag_set(diag, "%s: changed size while being packed", path);
            else if (chk)
                rc = ckpt_check_end(chk, path, diag);
            if (got < 0 || total != st.st_size) rc = BT_EIO;
            break;
        }
        if (chk) rc = ckpt_check_feed(chk, buf, (size_t)got, path, diag);
        if (rc == 0) rc = bt_cleanup_check(diag);
        if (rc == 0 && archive_write_data(a, buf, (size_t)got) != got)
            rc = pack_write_failed(o, path, diag);
        total += got;
    }
    archive_entry_free(e);
    close(fd);
    return rc;
}

static int pack_dir_entry(const pack_out *o, const char *dir, const char *top, bt_diag *diag) {
    char entry_name[CKPT_PATH_MAX];
    struct stat st;
    if (stat(dir, &st) != 0) st.st_mtime = 0;
    snprintf(entry_name, sizeof entry_name, "%s/", top);
    struct archive_entry *e = archive_entry_new();
    archive_entry_set_pathname(e, entry_name);
    archive_entry_set_filetype(e, AE_IFDIR);
    archive_entry_set_perm(e, 0700);
    archive_entry_set_mtime(e, st.st_mtime, 0);
    int rc = archive_write_header(o->a, e) == ARCHIVE_OK ? 0 : pack_write_failed(o, dir, diag);
    archive_entry_free(e);
    return rc;
}

/* The directory entry, each shard file (checked), then manifest.pb. */
static int pack_entries(const pack_out *o, const char *dir, const char *top, ckpt_file_set *set,
                        bt_diag *diag) {
    unsigned char *buf = malloc(PACK_CHUNK);
    if (buf == NULL) return BT_ENOMEM;
    int rc = pack_dir_entry(o, dir, top, diag);
    for (size_t i = 0; rc == 0 && i < set->n; i++)
        rc = pack_file(o, dir, top, set->file[i].name, &set->file[i], buf, diag);
    if (rc == 0) rc = pack_file(o, dir, top, CKPT_MANIFEST, NULL, buf, diag);
    free(buf);
    return rc;
}

/* Writes the archive of dir to fd, the file at path (the .partial). */
static int pack_stream(int fd, const char *dir, const char *top, ckpt_file_set *set,
                       const char *path, bt_diag *diag) {
    struct archive *a = archive_write_new();
    if (a == NULL) return BT_ENOMEM;
    pack_out o = {.a = a, .path = path};
    int rc = 0;
    if (archive_write_set_format_pax(a) != ARCHIVE_OK ||
        archive_write_add_filter_zstd(a) != ARCHIVE_OK ||
        archive_write_open_fd(a, fd) != ARCHIVE_OK) {
        bt_diag_set(diag, "%s: cannot start a tar.zst archive: %s", path, archive_error_string(a));
        rc = BT_EIO;
    }
    if (rc == 0) rc = pack_entries(&o, dir, top, set, diag);
    if (rc == 0 && archive_write_close(a) != ARCHIVE_OK)
        rc = pack_write_failed(&o, "its end", diag);
    archive_write_free(a);
    return rc;
}

/* Archives dir into out through out.partial: fsync, rename, fsync of its directory. */
static int pack_to(const char *dir, const char *out, bt_diag *diag) {
    char top[256], partial[CKPT_PATH_MAX], parent[CKPT_PATH_MAX];
    int rc = ckpt_path_basename(dir, top, sizeof top, diag);
    if (rc < 0) return rc;
    Baton__Manifest *m = NULL;
    ckpt_file_set set = {0};
    rc = ckpt_manifest_read(dir, &m, diag);
    if (rc == 0) ckpt_gone_fault(dir);
    if (rc == 0) rc = ckpt_files_from_manifest(m, &set, diag);
    if (m) baton__manifest__free_unpacked(m, NULL);
    if (rc < 0) return rc;
    snprintf(partial, sizeof partial, "%s%s", out, CKPT_PARTIAL_SUFFIX);
    ckpt_path_parent(out, parent, sizeof parent);
    rc = ckpt_out_mkdirs(parent, diag);
    int fd = rc == 0 ? open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (fd >= 0 && bt_cleanup_add(partial, BT_CLEANUP_FILE) != 0) {
        close(fd), unlink(partial), fd = -1, errno = ENOMEM;
    }
    if (fd < 0) {
        if (rc == 0) bt_diag_set(diag, "%s: cannot create: %s", partial, strerror(errno));
        ckpt_files_free(&set);
        return rc ? rc : BT_EIO;
    }
    rc = pack_stream(fd, dir, top, &set, partial, diag);
    ckpt_files_free(&set);
    if (rc == 0 && fsync(fd) != 0) {
        bt_diag_set(diag, "%s: fsync: %s", partial, strerror(errno));
        rc = BT_EIO;
    }
    close(fd);
    if (rc == 0 && (rename(partial, out) != 0 || ckpt_fsync_dir(parent) < 0)) {
        bt_diag_set(diag, "%s: cannot rename to %s: %s", partial, out, strerror(errno));
        rc = BT_EIO;
    }
    if (rc < 0) unlink(partial);
    return rc;
}

/* Parses `pack CKPT [--out FILE]`: 0 to run, 1 for --help, 2 on a usage error. */
static int pack_parse(int argc, char **argv, const char **ckpt, const char **out) {
    *ckpt = *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (strcmp(a, "--out") == 0) {
            if (i + 1 >= argc) return cli_no_value("ckpt pack", a), 2;
            if (cli_once("ckpt pack", a, *out, argv[i + 1]) != 0) return 2;
            *out = argv[++i];
        } else if (a[0] == '-' || *ckpt) {
            fprintf(stderr, "baton ckpt pack: unexpected argument '%s'\n", a);
            return 2;
        } else {
            *ckpt = a;
        }
    }
    if (*ckpt == NULL) fprintf(stderr, "baton ckpt pack: missing CKPT\n");
    return *ckpt ? 0 : 2;
}

/* One pack (ckpt_gone_try) of the checkpoint ckpt names into out (NULL: the default,
 * NAME.tar.zst, for the checkpoint found); usage: the failure was bad usage or input. */
typedef struct pack_try {
    const char *ckpt, *given, *out;
    char def_out[300];
    int usage;
} pack_try;

static int pack_once(void *ctx, char *dir, size_t cap, bt_diag *diag) {
    pack_try *p = ctx;
    char name[256];
    p->out = p->given, p->usage = 1;
    int rc = ckpt_resolve(p->ckpt, dir, cap, diag);
    if (rc < 0) return rc;
    if (p->out == NULL && ckpt_path_basename(dir, name, sizeof name, diag) == 0) {
        snprintf(p->def_out, sizeof p->def_out, "%s.tar.zst", name);
        p->out = p->def_out;
    }
    struct stat st;
    if (p->out != NULL && lstat(p->out, &st) == 0) {
        bt_diag_set(diag, "%s: already exists; remove it or choose another --out", p->out);
        return BT_EINVAL;
    }
    p->usage = 0;
    return p->out == NULL ? BT_EIO : pack_to(dir, p->out, diag);
}

int ckpt_cmd_pack(int argc, char **argv) {
    pack_try p = {0};
    int rc = pack_parse(argc, argv, &p.ckpt, &p.given);
    if (rc != 0) {
        pack_usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    if (p.given != NULL && p.given[0] == '\0') {
        fprintf(stderr, "baton ckpt pack: --out '': name the archive to write\n");
        return BT_EXIT_USAGE;
    }
    char dir[CKPT_PATH_MAX];
    bt_diag diag;
    bt_diag_init(&diag);
    bt_cleanup_install();
    int gone;
    rc = ckpt_gone_retry("baton ckpt pack", p.ckpt, pack_once, &p, dir, sizeof dir, &gone, &diag);
    if (rc < 0) {
        fprintf(stderr, "baton ckpt pack: %s\n", diag.msg);
        return bt_cleanup_exit(p.usage && !gone ? BT_EXIT_USAGE : BT_EXIT_FAILURE);
    }
    printf("packed %s into %s\n", dir, p.out);
    return bt_cleanup_exit(BT_EXIT_OK);
}

/* ---- unpack ---- */

static void unpack_usage(FILE *f) {
    fprintf(f, "usage: baton ckpt unpack FILE.tar.zst [--into DIR]\n\n"
               "Restores a packed checkpoint into DIR/<checkpoint-name> (default DIR: .),\n"
               "extracting into <checkpoint-name>.partial and renaming it only after every\n"
               "CRC32C has been checked. Absolute paths, '..' and links are refused.\n\n"
               "options:\n"
               "  --into DIR   where to restore it (default: the current directory; created\n"
               "               with its missing parents, which a failure removes again)\n"
               "  --help       show this help\n\n"
               "Exit status: 0 unpacked, 1 failed (a damaged or unsafe archive, a CRC32C\n"
               "mismatch, cannot write), 2 bad usage, no such archive, FILE no archive at\n"
               "all (a directory, a file that is no tar), or DIR/<name> already exists.\n");
}

typedef struct unpack_state {
    const char *archive_path, *into;
    char top[256];
    char partial[CKPT_PATH_MAX], final[CKPT_PATH_MAX];
    unsigned char *buf;
    int exists;      /* INTO/NAME was there already */
    int not_archive; /* FILE is no tar (compressed or not) at all */
} unpack_state;

/* Splits an entry path into its top directory and file ("" for the directory itself);
 * anything but TOP/ or TOP/FILE with plain names is refused. */
static int unpack_split(const char *path, char *top, char *file, bt_diag *diag) {
    const char *slash = path ? strchr(path, '/') : NULL;
    size_t tl = slash ? (size_t)(slash - path) : (path ? strlen(path) : 0);
    const char *rest = slash ? slash + 1 : "";
    size_t rl = strlen(rest);
    if (rl > 0 && rest[rl - 1] == '/') rl--; /* "TOP/" or "TOP/FILE/" for a directory */
    if (tl == 0 || tl >= 256 || rl >= 256 || memchr(rest, '/', rl)) goto bad;
    memcpy(top, path, tl), top[tl] = '\0';
    memcpy(file, rest, rl), file[rl] = '\0';
    if (!ckpt_name_is_plain(top) || (rl > 0 && !ckpt_name_is_plain(file))) goto bad;
    return 0;
bad:
    bt_diag_set(diag,
                "entry '%s': not NAME/ or NAME/FILE with plain names (absolute paths, "
                "'..' and subdirectories are refused)",
                path ? path : "");
    return BT_EINVAL;
}

/* The first entry names the checkpoint: prepare INTO/NAME.partial. */
static int unpack_begin(unpack_state *u, const char *top, bt_diag *diag) {
    size_t sl = strlen(CKPT_PARTIAL_SUFFIX), tl = strlen(top);
    if (tl > sl && strcmp(top + tl - sl, CKPT_PARTIAL_SUFFIX) == 0) {
        bt_diag_set(diag, "entry '%s': an incomplete (.partial) checkpoint", top);
        return BT_EINVAL;
    }
    snprintf(u->top, sizeof u->top, "%s", top);
    struct stat st;
    char final[CKPT_PATH_MAX];
    if (ckpt_path_join(final, sizeof final, u->into, top) == 0 && lstat(final, &st) == 0)
        u->exists = 1;
    int rc = ckpt_partial_prepare(u->into, top, 0, u->partial, u->final, sizeof u->partial, diag);
    if (rc == 0 && bt_cleanup_add(u->partial, BT_CLEANUP_TREE) != 0) rc = BT_ENOMEM;
    return rc;
}

/* Streams the data of the current entry into partial/file. */
static int unpack_data(struct archive *a, unpack_state *u, const char *file, bt_diag *diag) {
    char path[CKPT_PATH_MAX];
    ckpt_path_join(path, sizeof path, u->partial, file);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        bt_diag_set(diag, "%s: cannot create: %s", path, strerror(errno));
        return BT_EIO;
    }
    int rc = 0;
    for (;;) {
        la_ssize_t got = archive_read_data(a, u->buf, PACK_CHUNK);
        if (got == 0) break;
        if (got < 0) {
            bt_diag_set(diag, "entry %s/%s: %s", u->top, file, archive_error_string(a));
            rc = BT_EIO;
            break;
        }
        rc = ckpt_write_all(fd, u->buf, (size_t)got, path, diag);
        if (rc == 0) rc = bt_cleanup_check(diag);
        if (rc < 0) break;
    }
    if (rc == 0 && fsync(fd) != 0) {
        bt_diag_set(diag, "%s: fsync: %s", path, strerror(errno));
        rc = BT_EIO;
    }
    close(fd);
    return rc;
}

static int unpack_entry(struct archive *a, struct archive_entry *e, unpack_state *u,
                        bt_diag *diag) {
    char top[256], file[256];
    const char *path = archive_entry_pathname(e);
    int rc = unpack_split(path, top, file, diag);
    if (rc < 0) return rc;
    mode_t type = archive_entry_filetype(e);
    int is_dir = type == AE_IFDIR && file[0] == '\0';
    if ((!is_dir && (type != AE_IFREG || file[0] == '\0')) || archive_entry_hardlink(e) ||
        archive_entry_symlink(e)) {
        bt_diag_set(diag,
                    "entry '%s': only the checkpoint directory and regular files are "
                    "allowed (links and special files are refused)",
                    path);
        return BT_EINVAL;
    }
    if (u->top[0] == '\0') {
        rc = unpack_begin(u, top, diag);
        if (rc < 0) return rc;
    } else if (strcmp(top, u->top) != 0) {
        bt_diag_set(diag, "entry '%s': outside the checkpoint directory '%s/'", path, u->top);
        return BT_EINVAL;
    }
    return is_dir ? 0 : unpack_data(a, u, file, diag);
}

static int unpack_entries(struct archive *a, unpack_state *u, bt_diag *diag) {
    struct archive_entry *e;
    for (;;) {
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF) break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            bt_diag_set(diag, "%s", archive_error_string(a));
            return BT_EIO;
        }
        int rc = unpack_entry(a, e, u, diag);
        if (rc < 0) return rc;
    }
    if (u->top[0] == '\0') {
        bt_diag_set(diag, "no checkpoint in the archive (no entries)");
        return BT_EINVAL;
    }
    return 0;
}

/* *refused: the checkpoint was already in into, or file is no archive (exit 2). */
static int unpack_from(const char *file, const char *into, char *final, int *refused,
                       bt_diag *diag) {
    unpack_state u = {.archive_path = file, .into = into};
    u.buf = malloc(PACK_CHUNK);
    struct archive *a = archive_read_new();
    if (u.buf == NULL || a == NULL) {
        free(u.buf);
        if (a) archive_read_free(a);
        return BT_ENOMEM;
    }
    archive_read_support_filter_all(a);
    archive_read_support_format_tar(a);
    int rc = 0;
    if (archive_read_open_filename(a, file, PACK_CHUNK) != ARCHIVE_OK) {
        /* libarchive's ARCHIVE_ERRNO_FILE_FORMAT, EILSEQ on Linux: no tar, compressed or not */
        u.not_archive = archive_errno(a) == EILSEQ;
        bt_diag_set(diag, "%s%s",
                    u.not_archive ? "not a packed checkpoint (a zstd-compressed tar, "
                                    "as baton ckpt pack writes): "
                                  : "",
                    archive_error_string(a));
        rc = u.not_archive ? BT_EINVAL : BT_EIO;
    }
    if (rc == 0) rc = unpack_entries(a, &u, diag);
    archive_read_free(a);
    free(u.buf);
    if (rc == 0) rc = ckpt_check_dir(u.partial, diag);
    if (rc == 0) rc = ckpt_partial_publish(into, u.partial, u.final, diag);
    if (rc < 0 && u.partial[0]) ckpt_remove_dir(u.partial);
    snprintf(final, CKPT_PATH_MAX, "%s", u.final);
    *refused = u.exists || u.not_archive;
    return rc;
}

/* Parses `unpack FILE [--into DIR]`: 0 to run, 1 for --help, 2 on a usage error. */
static int unpack_parse(int argc, char **argv, const char **file, const char **into) {
    *file = NULL;
    *into = ".";
    int given = 0; /* --into */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
        if (strcmp(a, "--into") == 0) {
            if (i + 1 >= argc) return cli_no_value("ckpt unpack", a), 2;
            if (given++ && cli_once("ckpt unpack", a, *into, argv[i + 1]) != 0) return 2;
            *into = argv[++i];
        } else if (a[0] == '-' || *file) {
            fprintf(stderr, "baton ckpt unpack: unexpected argument '%s'\n", a);
            return 2;
        } else {
            *file = a;
        }
    }
    if (*file == NULL) fprintf(stderr, "baton ckpt unpack: missing FILE.tar.zst\n");
    return *file ? 0 : 2;
}

int ckpt_cmd_unpack(int argc, char **argv) {
    const char *file, *into;
    int p = unpack_parse(argc, argv, &file, &into);
    if (p != 0) {
        unpack_usage(p == 1 ? stdout : stderr);
        return p == 1 ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    struct stat st;
    if (into[0] == '\0') {
        fprintf(stderr, "baton ckpt unpack: --into '': name a directory (. for this one)\n");
        return BT_EXIT_USAGE;
    }
    if (file[0] == '\0') {
        fprintf(stderr, "baton ckpt unpack: '': name the archive (FILE.tar.zst)\n");
        return BT_EXIT_USAGE;
    }
    int err = stat(file, &st) != 0 ? errno : 0;
    if (err != 0 || S_ISDIR(st.st_mode)) {
        fprintf(stderr, "baton ckpt unpack: %s: %s\n", file,
                err == ENOENT ? "no such archive"
                : err != 0    ? strerror(err)
                              : "a directory, not a packed checkpoint (FILE.tar.zst)");
        return BT_EXIT_USAGE;
    }
    char final[CKPT_PATH_MAX];
    bt_diag diag;
    bt_diag_init(&diag);
    int refused = 0;
    bt_cleanup_install();
    if (unpack_from(file, into, final, &refused, &diag) < 0) {
        fprintf(stderr, "baton ckpt unpack: %s: %s\n", file, diag.msg);
        return bt_cleanup_exit(refused ? BT_EXIT_USAGE : BT_EXIT_FAILURE);
    }
    printf("unpacked %s into %s\n", file, final);
    return bt_cleanup_exit(BT_EXIT_OK);
}
