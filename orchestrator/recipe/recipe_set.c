/* --set KEY=VALUE overrides: KEY is a dotted path of recipe fields (as in YAML), with
 * stages addressed by name or index (stages.pretrain.steps, stages.1.parallel.dp);
 * VALUE is YAML (units and shorthands as in a recipe file). The assignment is turned into
 * a small recipe document, loaded by the same loader (so it is checked the same way), and
 * overlaid onto the loaded recipe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_util.h"
#include "recipe.h"
#include "util/buf.h"

/* "a.b.c" at depth d -> "a:\n  b:\n    c: VALUE\n" appended to b. */
static void set_nested(bt_buf *b, const char *path, const char *value, int depth) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    bt_buf_printf(b, "%*s%.*s:", depth * 2, "", (int)n, path);
    if (dot) {
        bt_buf_printf(b, "\n");
        set_nested(b, dot + 1, value, depth + 1);
    } else {
        bt_buf_printf(b, " %s\n", value);
    }
}

static long set_stage_index(const recipe_doc *doc, const char *key, size_t n) {
    char *end;
    long i = strtol(key, &end, 10);
    if (end == key + n && i >= 0 && (size_t)i < doc->recipe->n_stages) return i;
    for (size_t k = 0; k < doc->recipe->n_stages; k++) {
        const char *name = doc->recipe->stages[k]->name;
        if (name && strlen(name) == n && strncmp(name, key, n) == 0) return (long)k;
    }
    return -1;
}

/* Every segment of a dotted key must be a field name or a stage's name or index: an
 * empty one ("stages..steps", ".model.dim") would address stage 0 or produce YAML that
 * fails to parse, far from the mistake. */
static int set_check_key(const char *what, const char *key, bt_diag *diag) {
    for (const char *seg = key;; seg++) {
        size_t n = strcspn(seg, ".");
        const char *bad = NULL;
        if (n == 0) {
            bt_diag_set(diag,
                        "%s: the key \"%s\" has an empty path segment at character %zu (two "
                        "dots, or a dot at its start or end); a key is dot-separated field "
                        "names, e.g. stages.pretrain.steps",
                        what, key, (size_t)(seg - key) + 1);
            return BT_ERECIPE;
        }
        for (size_t k = 0; k < n && bad == NULL; k++)
            if (strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
                       seg[k]) == NULL)
                bad = seg + k;
        if (bad) {
            bt_diag_set(diag,
                        "%s: the key \"%s\" has '%c' in the path segment \"%.*s\"; a segment "
                        "is a field name, or a stage's name or index (letters, digits, '_', '-')",
                        what, key, *bad, (int)n, seg);
            return BT_ERECIPE;
        }
        seg += n;
        if (*seg == '\0') return 0;
    }
}

/* Loads text as a recipe and overlays it (or its first stage onto stage si). */
static int set_overlay(recipe_doc *doc, const char *what, const char *text, long si,
                       bt_diag *diag) {
    recipe_doc part;
    int rc = recipe_load_buffer(what, text, strlen(text), &part, diag);
    if (rc != 0) return rc;
    Baton__Stage *d = doc->recipe->defaults, *g = part.recipe->defaults;
    uint32_t pp0 = d && d->parallel ? d->parallel->pp : 0;
    uint32_t v0 = d && d->parallel ? d->parallel->virtual_stages : 0;
    if (si >= 0 && part.recipe->n_stages == 1)
        rc = pb_merge(&doc->recipe->stages[si]->base, &part.recipe->stages[0]->base);
    else if (si < 0)
        rc = pb_merge(&doc->recipe->base, &part.recipe->base);
    d = doc->recipe->defaults; /* --set defaults.parallel.pp=N: as a stage changing it */
    if (rc == 0 && si < 0 && d != NULL && g != NULL)
        recipe_drop_stale_split(d->parallel, g->parallel, pp0, v0);
    recipe_doc_free(&part);
    return rc;
}

int recipe_apply_set(recipe_doc *doc, const char *assignment, bt_diag *diag) {
    const char *eq = strchr(assignment, '=');
    char what[300];
    snprintf(what, sizeof what, "--set %s", assignment);
    if (eq == NULL || eq == assignment || eq[1] == '\0') {
        bt_diag_set(diag, "%s: expected KEY=VALUE, e.g. --set stages.pretrain.steps=100", what);
        return BT_ERECIPE;
    }
    char *key = strndup(assignment, (size_t)(eq - assignment));
    bt_buf b;
    bt_buf_init(&b);
    long si = -1;
    int rc = key ? set_check_key(what, key, diag) : BT_ENOMEM;
    if (rc == 0 && strncmp(key, "stages.", 7) == 0) {
        const char *rest = key + 7, *dot = strchr(rest, '.');
        si = dot ? set_stage_index(doc, rest, (size_t)(dot - rest)) : -1;
        if (si < 0) {
            bt_diag_set(diag,
                        "%s: name a stage and a field, e.g. stages.%s.steps (stages: by name "
                        "or 0-based index)",
                        what, doc->recipe->n_stages ? doc->recipe->stages[0]->name : "NAME");
            rc = BT_ERECIPE;
        } else {
            bt_buf_printf(&b, "stages:\n  -\n");
            set_nested(&b, dot + 1, eq + 1, 2);
        }
    } else if (rc == 0) {
        set_nested(&b, key, eq + 1, 0);
    }
    if (rc == 0) rc = set_overlay(doc, what, bt_buf_str(&b), si, diag);
    bt_buf_free(&b);
    free(key);
    return rc;
}

int recipe_sets_add(recipe_sets *s, const char *cmd, const char *key, const char *value) {
    if (s->n == RECIPE_MAX_SETS) {
        fprintf(stderr, "%s: at most %d --set overrides\n", cmd, RECIPE_MAX_SETS);
        return -1;
    }
    size_t n = strlen(key) + strlen(value) + 1;
    if ((s->set[s->n] = malloc(n)) == NULL) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        return -1;
    }
    snprintf(s->set[s->n++], n, "%s%s", key, value);
    return 0;
}

int recipe_sets_parse(recipe_sets *s, const char *cmd, int argc, char **argv, int *i) {
    static const char *const opt[] = {"--set", "--nodes", "--gpus-per-node"};
    static const char *const key[] = {"", "cluster.nodes=", "cluster.gpus_per_node="};
    for (int k = 0; k < 3; k++) {
        if (strcmp(argv[*i], opt[k]) != 0) continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", cmd, opt[k]);
            return -1;
        }
        *i += 1;
        return recipe_sets_add(s, cmd, key[k], argv[*i]) == 0 ? 1 : -1;
    }
    return 0;
}

int recipe_sets_apply(const recipe_sets *s, recipe_doc *doc, bt_diag *diag) {
    int rc = 0;
    for (int i = 0; rc == 0 && i < s->n; i++)
        rc = recipe_apply_set(doc, s->set[i], diag);
    return rc;
}

void recipe_sets_free(recipe_sets *s) {
    for (int i = 0; i < s->n; i++)
        free(s->set[i]);
    s->n = 0;
}
