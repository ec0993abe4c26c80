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

/* The loader places its messages in the small document built from the assignment
 * ("--set a.b=x:2:5: a.b: ..."; a YAML syntax error adds "(... that starts at line 4,
 * column 1)"), places that mean nothing to someone who wrote a command line: the message
 * keeps the assignment and drops them. */
static void set_diag_unplace(bt_diag *diag, const char *what, const bt_diag *inner) {
    const char *m = inner->msg, *p, *q;
    size_t n = strlen(what);
    if (strncmp(m, what, n) != 0 || m[n] != ':') goto keep;
    p = m + n + 1;
    q = p + strspn(p, "0123456789");
    if (q == p || q[0] != ':' || q[1] < '0' || q[1] > '9') goto keep;
    q += 1 + strspn(q + 1, "0123456789");
    if (*q != ':') goto keep;
    const char *ctx = strstr(q, " that starts at line ");
    const char *open = ctx ? ctx : q;
    while (open > q && strncmp(open, " (", 2) != 0)
        open--;
    int cut = ctx != NULL && open > q && q[strlen(q) - 1] == ')';
    bt_diag_set(diag, "%s%.*s", what, cut ? (int)(open - q) : (int)strlen(q), q);
    return;
keep:
    bt_diag_set(diag, "%s", m);
}

/* Whether path is base or lies under it ("a.b" and "a[0]" are under "a"). */
static int set_path_within(const char *path, const char *base) {
    size_t n = strlen(base);
    return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '.' || path[n] == '[');
}

/* Records where the values the override wrote came from: part's entries at or under base
 * (the assignment's key as a recipe path, "stages[1].steps") join doc's, naming the
 * assignment, so that validation errors about them cite the command line, not the file. */
static int set_record(recipe_doc *doc, const recipe_doc *part, const char *base, const char *what,
                      bt_diag *diag) {
    size_t n = 0;
    for (size_t k = 0; k < part->npos; k++)
        n += set_path_within(part->pos[k].path, base) != 0;
    if (n == 0) return 0;
    recipe_pos *pos = realloc(doc->pos, (doc->npos + n) * sizeof *pos);
    if (pos == NULL) goto oom;
    doc->pos = pos;
    for (size_t k = 0; k < part->npos; k++) {
        if (!set_path_within(part->pos[k].path, base)) continue;
        recipe_pos *p = &doc->pos[doc->npos];
        *p = (recipe_pos){strdup(part->pos[k].path), 0, 0, strdup(what)};
        if (p->path == NULL || p->set == NULL) {
            free(p->path);
            free(p->set);
            goto oom;
        }
        doc->npos++;
    }
    return 0;
oom:
    bt_diag_set(diag, "%s: out of memory", what);
    return BT_ENOMEM;
}

/* Loads text as a recipe and overlays it (or its stage si onto stage si); base is the
 * assignment's key as a recipe path. */
static int set_overlay(recipe_doc *doc, const char *what, const char *text, long si,
                       const char *base, bt_diag *diag) {
    recipe_doc part;
    bt_diag inner;
    bt_diag_init(&inner);
    int rc = recipe_load_buffer(what, text, strlen(text), &part, &inner);
    if (rc != 0) {
        set_diag_unplace(diag, what, &inner);
        return rc;
    }
    Baton__Stage *d = doc->recipe->defaults, *g = part.recipe->defaults;
    uint32_t pp0 = d && d->parallel ? d->parallel->pp : 0;
    uint32_t v0 = d && d->parallel ? d->parallel->virtual_stages : 0;
    if (si >= 0 && part.recipe->n_stages == (size_t)si + 1)
        rc = pb_merge(&doc->recipe->stages[si]->base, &part.recipe->stages[si]->base);
    else if (si < 0)
        rc = pb_merge(&doc->recipe->base, &part.recipe->base);
    d = doc->recipe->defaults; /* --set defaults.parallel.pp=N: as a stage changing it */
    if (rc == 0 && si < 0 && d != NULL && g != NULL)
        recipe_drop_stale_split(d->parallel, g->parallel, pp0, v0);
    if (rc == 0) rc = set_record(doc, &part, base, what, diag);
    recipe_doc_free(&part);
    return rc;
}

static const char *const set_opt[] = {"--set", "--nodes", "--gpus-per-node"};
static const char *const set_opt_key[] = {"", "cluster.nodes=", "cluster.gpus_per_node="};

/* recipe_apply_set for the assignment option opt gave (an index into set_opt), which
 * its messages name as the user wrote it: "--nodes abc", not "--set cluster.nodes=abc". */
static int set_apply(recipe_doc *doc, const char *assignment, int opt, bt_diag *diag) {
    const char *eq = strchr(assignment, '=');
    char what[300], base[300];
    if (opt > 0 && eq != NULL)
        snprintf(what, sizeof what, "%s %s", set_opt[opt], eq + 1);
    else
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
        if (si < 0 && dot != NULL && dot > rest) {
            bt_buf names;
            bt_buf_init(&names);
            for (size_t k = 0; k < doc->recipe->n_stages; k++)
                bt_buf_printf(&names, "%s%s", k ? ", " : "",
                              doc->recipe->stages[k]->name ? doc->recipe->stages[k]->name : "?");
            bt_diag_set(diag,
                        "%s: the recipe has no stage '%.*s' (its stages: %s; or a 0-based "
                        "index below %zu)",
                        what, (int)(dot - rest), rest, bt_buf_str(&names), doc->recipe->n_stages);
            bt_buf_free(&names);
            rc = BT_ERECIPE;
        } else if (si < 0) {
            bt_diag_set(diag,
                        "%s: name a stage and a field, e.g. stages.%s.steps (stages: by name "
                        "or 0-based index)",
                        what, doc->recipe->n_stages ? doc->recipe->stages[0]->name : "NAME");
            rc = BT_ERECIPE;
        } else {
            /* Empty stages before it, so that the loader's paths (and messages) say
             * stages[si] as the merged recipe does. */
            bt_buf_printf(&b, "stages:\n");
            for (long k = 0; k < si; k++)
                bt_buf_printf(&b, "  - {}\n");
            bt_buf_printf(&b, "  -\n");
            set_nested(&b, dot + 1, eq + 1, 2);
            snprintf(base, sizeof base, "stages[%ld].%s", si, dot + 1);
        }
    } else if (rc == 0) {
        set_nested(&b, key, eq + 1, 0);
        snprintf(base, sizeof base, "%s", key);
    }
    if (rc == 0) rc = set_overlay(doc, what, bt_buf_str(&b), si, base, diag);
    bt_buf_free(&b);
    free(key);
    return rc;
}

int recipe_apply_set(recipe_doc *doc, const char *assignment, bt_diag *diag) {
    return set_apply(doc, assignment, 0, diag);
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
    snprintf(s->set[s->n], n, "%s%s", key, value);
    s->opt[s->n++] = 0;
    return 0;
}

int recipe_sets_parse(recipe_sets *s, const char *cmd, int argc, char **argv, int *i) {
    for (int k = 0; k < 3; k++) {
        if (strcmp(argv[*i], set_opt[k]) != 0) continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "%s: %s needs a value\n", cmd, set_opt[k]);
            return -1;
        }
        *i += 1;
        if (recipe_sets_add(s, cmd, set_opt_key[k], argv[*i]) != 0) return -1;
        s->opt[s->n - 1] = (unsigned char)k;
        return 1;
    }
    return 0;
}

int recipe_sets_apply(const recipe_sets *s, recipe_doc *doc, bt_diag *diag) {
    int rc = 0;
    for (int i = 0; rc == 0 && i < s->n; i++)
        rc = set_apply(doc, s->set[i], s->opt[i], diag);
    return rc;
}

void recipe_sets_free(recipe_sets *s) {
    for (int i = 0; i < s->n; i++)
        free(s->set[i]);
    s->n = 0;
}
