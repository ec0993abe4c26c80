/* Loading recipe files: YAML mapped onto the baton.Recipe protobuf through its
 * descriptors (no code per field), with the source position of every key kept so that
 * later (semantic) errors can point at file:line:column.
 *
 * Mapping rules (documented for users in docs/recipe.md):
 *  - a YAML mapping key is a field name of the message at that place;
 *  - a scalar given where a message is expected sets that message's field number 1
 *    (so `precision: bf16` means `precision: {type: bf16}`);
 *  - baton.ByteSize / baton.Bandwidth / baton.Duration fields take unit strings
 *    ("80GB", "450GB/s", "5m");
 *  - integer fields take K/M/G/T suffixes as powers of two ("8K" = 8192);
 *  - enum values match the enum's value names case-insensitively, '-' standing for '_';
 *  - repeated fields take a YAML sequence;
 *  - bool fields take true/false/yes/no/on/off.
 * Every message the loader builds can be released with
 * protobuf_c_message_free_unpacked(msg, NULL). */
#ifndef BATON_RECIPE_LOAD_H
#define BATON_RECIPE_LOAD_H

#include <stddef.h>
#include <stdio.h>

#include "recipe.pb-c.h"
#include "util/err.h"

/* Where a value came from. path uses the field names with [i] for sequence items:
 * "defaults.parallel.tp", "stages[1].rope.scaling.type". line:col is, for a field, the
 * start of its key ("tp" in "tp: 8"); for a sequence item, the start of the item's node
 * (the first key of a block mapping, the '{' of a flow mapping, the scalar itself; for an
 * alias, the node it refers to); for the document root (path ""), the start of the root
 * mapping. A scalar given for a message ("precision: fp8") records only the field's key.
 * A value from a --set override (recipe_apply_set) has no place in the file: set names
 * the override ("--set stages.0.steps=7") and line = col = 0. */
typedef struct recipe_pos {
    char *path;
    int line;  /* 1-based; 0 for an override */
    int col;   /* 1-based; 0 for an override */
    char *set; /* owned; NULL for a value from the file */
} recipe_pos;

typedef struct recipe_doc {
    char *file;            /* the name errors use (as given by the caller) */
    Baton__Recipe *recipe; /* owned */
    /* The bytes recipe_load_file read and parsed (owned; NULL from recipe_load_buffer):
     * what a run keeps as RUN_DIR/recipe.yaml, never the file read again, which a pipe or
     * FIFO (/dev/stdin, <(...)) cannot give twice and an editor may have changed since. A
     * recipe is one file (aliases and merge keys refer within it; --set overrides are
     * kept apart), so these bytes are all of it. */
    char *text;
    size_t text_len;
    /* 1 when text came from what gives its bytes once only (a pipe, a FIFO, a terminal:
     * /dev/stdin, <(...)): file names nothing that can be copied again. */
    int text_once;
    recipe_pos *pos; /* one per mapping key, sequence item and document root */
    size_t npos;
    /* Where recipe_validate writes its warnings (a recipe that runs, but likely not as
     * meant), one line each: stderr after loading; NULL silences them. A line starts with
     * the place in the file, "FILE:LINE:COL: warning: ", or, for a value a --set override
     * wrote, with "baton CMD: warning: " where CMD is warn_cmd ("plan"; NULL: none). */
    FILE *warn;
    const char *warn_cmd;
    /* Also given each warning about one stage (its index and "PLACE: PATH: message"), when
     * set: `baton plan` lists them with the stage's own. */
    void (*stage_warn)(void *ctx, size_t stage, const char *text);
    void *stage_warn_ctx;
} recipe_doc;

/* Loads and maps a recipe file, read once (recipe_read_file), its bytes kept in doc->text.
 * On failure returns a negative BT_ code and sets diag to "FILE:LINE:COL: PATH: what is
 * wrong (what would be valid)". */
int recipe_load_file(const char *path, recipe_doc *doc, bt_diag *diag);

/* recipe_load_file for a run's kept copy (RUN_DIR/recipe.yaml): only a regular file is
 * read, opened without following a symbolic link and without waiting (a FIFO put there
 * would make `baton status` or `baton resume` wait for a writer forever): anything else
 * is BT_EIO, diag "PATH: cannot read: not a regular file ...". */
int recipe_load_kept(const char *path, recipe_doc *doc, bt_diag *diag);

/* At most this many bytes of recipe text (a recipe is a small text file). */
#define RECIPE_MAX_BYTES (16u << 20)

/* load_read.c: the bytes of the file path names, read once, at most RECIPE_MAX_BYTES + 1
 * (one more tells it is too big), into *data (malloc'ed; free it): a regular file, or a
 * pipe, a FIFO or a terminal (/dev/stdin, <(...)), read until its writer closes it (*once
 * then 1, else 0; once may be NULL). Such
 * a read may wait for its writer as long as that takes, so SIGINT, SIGTERM and SIGHUP are
 * unblocked while it does (`baton run` blocks them from its first code on): they end
 * baton as they end any reader, where nothing has been made yet; a regular file is read
 * with them as the caller has them. A missing file is BT_ENOENT; any other failure to
 * open or read it BT_EIO, diag saying "PATH: cannot open|read: why". */
int recipe_read_file(const char *path, char **data, size_t *len, int *once, bt_diag *diag);

/* The same for a buffer already in memory; name is used in messages. */
int recipe_load_buffer(const char *name, const char *data, size_t len, recipe_doc *doc,
                       bt_diag *diag);

void recipe_doc_free(recipe_doc *doc);

/* The entry for path, or for its longest recorded prefix; NULL when there is none. */
const recipe_pos *recipe_doc_find(const recipe_doc *doc, const char *path);

/* Finds the position of path, or of its longest recorded prefix ("stages[1].parallel.cp"
 * falls back to "stages[1].parallel", then "stages[1]"). Returns 0 if something was
 * found, else -1 with line = col = 0. */
int recipe_doc_where(const recipe_doc *doc, const char *path, int *line, int *col);

#endif
