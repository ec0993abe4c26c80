/* --set KEY=VALUE overrides: KEY is a dotted path of recipe fields (as in YAML), with
 * stages addressed by name or index (stages.pretrain.steps, stages.1.parallel.dp) and the
 * elements of other lists by index (data.mix.0.weight, defaults.parallel.stage_layers.1);
 * VALUE is YAML (units and shorthands as in a recipe file). The assignment is turned into
 * a small recipe document, loaded by the same loader (so it is checked the same way), and
 * overlaid onto the loaded recipe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_dump.h"
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

/* One step of an assignment's key resolved against the schema: field f of the message
 * reached so far, and for a list the element (index >= 0) the next steps go into. */
typedef struct set_step {
    const ProtobufCFieldDescriptor *f;
    long index; /* -1: the field itself */
} set_step;

/* Deeper than any path in the schema: a longer key names a field that is not there, which
 * the loader reports. */
#define SET_MAX_STEPS 32

/* An assignment resolved against the loaded recipe: the small recipe document that says
 * it (text), its key as a recipe path (base, "data.mix[1].weight") and the steps that
 * lead to the value. */
typedef struct set_plan {
    bt_buf text;
    bt_buf base;
    set_step step[SET_MAX_STEPS];
    int nsteps;
    int nindex;                           /* list elements among the steps */
    const ProtobufCFieldDescriptor *last; /* the field the value is for; NULL: unknown */
} set_plan;

static size_t set_count(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f) {
    return m ? *(const size_t *)((const char *)m + f->quantifier_offset) : 0;
}

static void *set_elem(const ProtobufCMessage *m, const ProtobufCFieldDescriptor *f, size_t i) {
    return *(char *const *)((const char *)m + f->offset) + i * pb_elem_size(f->type);
}

/* A stage's name or index, or -1. */
static long set_stage_index(const recipe_doc *doc, const char *key, size_t n) {
    for (size_t k = 0; k < doc->recipe->n_stages; k++) {
        const char *name = doc->recipe->stages[k]->name;
        if (name && strlen(name) == n && strncmp(name, key, n) == 0) return (long)k;
    }
    return -1;
}

/* seg[0, n) as a 0-based index (digits only), or -1. */
static long set_index(const char *seg, size_t n) {
    long i = 0;
    if (n == 0 || n > 9 || strspn(seg, "0123456789") < n) return -1;
    for (size_t k = 0; k < n; k++)
        i = i * 10 + (seg[k] - '0');
    return i;
}

/* The element of list f of m (m may be NULL: a block the recipe does not give) that
 * segment seg[0, n) of key names, or an error; key[0, at) names the list. */
static long set_list_index(const recipe_doc *doc, const char *what, const char *key, size_t at,
                           const char *seg, size_t n, const ProtobufCMessage *m,
                           const ProtobufCFieldDescriptor *f, const char *path, bt_diag *diag) {
    size_t count = set_count(m, f);
    int stages = m == &doc->recipe->base && strcmp(f->name, "stages") == 0;
    long i = set_index(seg, n);
    if (i >= 0 && seg[0] == '0' && n > 1) { /* "01": a number written two ways */
        bt_diag_set(diag,
                    "%s: index \"%.*s\" of %s has a leading zero; write an index as a plain "
                    "0-based number, %.*s.%ld",
                    what, (int)n, seg, path, (int)at, key, i);
        return -1;
    }
    if (stages && (i < 0 || (size_t)i >= count)) i = set_stage_index(doc, seg, n);
    if (i >= 0 && (size_t)i < count) return i;
    if (stages) {
        bt_buf names;
        bt_buf_init(&names);
        for (size_t k = 0; k < doc->recipe->n_stages; k++)
            bt_buf_printf(&names, "%s%s", k ? ", " : "",
                          doc->recipe->stages[k]->name ? doc->recipe->stages[k]->name : "?");
        bt_diag_set(diag,
                    "%s: the recipe has no stage '%.*s' (its stages: %s; or a 0-based "
                    "index below %zu)",
                    what, (int)n, seg, bt_buf_str(&names), doc->recipe->n_stages);
        bt_buf_free(&names);
        return -1;
    }
    char place[300] = "";
    const recipe_pos *at_file = recipe_doc_find(doc, path);
    if (at_file != NULL && at_file->line > 0 && strcmp(at_file->path, path) == 0)
        snprintf(place, sizeof place, " (%s:%d:%d)", doc->file, at_file->line, at_file->col);
    if (i < 0)
        bt_diag_set(diag,
                    "%s: %s is a list: name an element by its 0-based index (%.*s.0), not "
                    "\"%.*s\", or give the whole list: %.*s=[...]",
                    what, path, (int)at, key, (int)n, seg, (int)at, key);
    else if (count == 0)
        bt_diag_set(diag,
                    "%s: %s%s %s, so there is no element %ld; give the whole list: %.*s=[...]",
                    what, path, place,
                    m && *(void *const *)((const char *)m + f->offset) ? "is empty"
                                                                       : "is not in the recipe",
                    i, (int)at, key);
    else
        bt_diag_set(diag,
                    "%s: %s%s has %zu element%s, so index %ld is out of range (0-based, 0 to "
                    "%zu); to change its length, give the whole list: %.*s=[...]",
                    what, path, place, count, count == 1 ? "" : "s", i, count - 1, (int)at, key);
    return -1;
}

/* Resolves key (checked by set_check_key) against the schema and doc, and writes the
 * document that assigns value to it: "a.b.c" -> "a:\n  b:\n    c: VALUE\n"; an element of
 * a list (stages by name or index, others by index) as that list with the elements before
 * it as placeholders, so that the loader's paths and messages say [i] as the merged recipe
 * does ("- {}" for a message; for a single value, the one the recipe has, which loads). A
 * key that leaves the schema (an unknown field, a field under a single value) is written
 * as given, for the loader to report. */
static int set_plan_build(set_plan *p, const recipe_doc *doc, const char *what, const char *key,
                          const char *value, bt_diag *diag) {
    const ProtobufCMessageDescriptor *d = &baton__recipe__descriptor;
    const ProtobufCMessage *m = &doc->recipe->base;
    int depth = 0;
    for (const char *seg = key;;) {
        const char *dot = strchr(seg, '.');
        size_t n = dot ? (size_t)(dot - seg) : strlen(seg);
        const ProtobufCFieldDescriptor *f = NULL;
        if (d != NULL && p->nsteps < SET_MAX_STEPS - 1) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)n, seg);
            f = n < sizeof name ? protobuf_c_message_descriptor_get_field_by_name(d, name) : NULL;
        }
        if (f == NULL) { /* unknown to the schema here: the loader says what is wrong */
            set_nested(&p->text, seg, value, depth);
            bt_buf_printf(&p->base, "%s%s", p->base.len ? "." : "", seg);
            p->last = NULL;
            return 0;
        }
        bt_buf_printf(&p->base, "%s%s", p->base.len ? "." : "", f->name);
        bt_buf_printf(&p->text, "%*s%s:", depth * 2, "", f->name);
        p->step[p->nsteps++] = (set_step){f, -1};
        p->last = f;
        if (dot == NULL) {
            bt_buf_printf(&p->text, " %s\n", value);
            return 0;
        }
        bt_buf_printf(&p->text, "\n");
        seg = dot + 1;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            m = f->type == PROTOBUF_C_TYPE_MESSAGE && m != NULL
                    ? *(ProtobufCMessage *const *)((const char *)m + f->offset)
                    : NULL;
            d = f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
            depth++;
            continue;
        }
        /* an element of a list */
        dot = strchr(seg, '.');
        n = dot ? (size_t)(dot - seg) : strlen(seg);
        if (m == &doc->recipe->base && strcmp(f->name, "stages") == 0 && dot == NULL) {
            bt_diag_set(diag,
                        "%s: name a stage and a field, e.g. stages.%s.steps (stages: by name "
                        "or 0-based index)",
                        what, doc->recipe->n_stages ? doc->recipe->stages[0]->name : "NAME");
            return BT_ERECIPE;
        }
        long i = set_list_index(doc, what, key, (size_t)(seg - 1 - key), seg, n, m, f,
                                bt_buf_str(&p->base), diag);
        if (i < 0) return BT_ERECIPE;
        p->step[p->nsteps - 1].index = i;
        p->nindex++;
        bt_buf_printf(&p->base, "[%ld]", i);
        for (long k = 0; k < i; k++) {
            bt_buf_printf(&p->text, "%*s- ", depth * 2 + 2, "");
            if (f->type == PROTOBUF_C_TYPE_MESSAGE)
                bt_buf_printf(&p->text, "{}");
            else
                pb_dump_scalar(&p->text, f, set_elem(m, f, (size_t)k));
            bt_buf_printf(&p->text, "\n");
        }
        bt_buf_printf(&p->text, "%*s-", depth * 2 + 2, "");
        if (dot == NULL) {
            bt_buf_printf(&p->text, " %s\n", value);
            return 0;
        }
        bt_buf_printf(&p->text, "\n");
        seg = dot + 1;
        m = f->type == PROTOBUF_C_TYPE_MESSAGE
                ? *(ProtobufCMessage *const *)set_elem(m, f, (size_t)i)
                : NULL;
        d = f->type == PROTOBUF_C_TYPE_MESSAGE ? f->descriptor : NULL;
        depth += 2;
    }
}

/* Overlays part (the assignment's document) onto dst along the plan's steps: at the last
 * list element on the way, that element's given fields (or, when the element itself is
 * the value, the whole element) replace the recipe's; without one, everything given. */
static int set_merge(ProtobufCMessage *dst, const ProtobufCMessage *src, const set_plan *p) {
    int seen = 0;
    for (int k = 0; k < p->nsteps; k++) {
        const set_step *s = &p->step[k];
        if (s->index < 0) {
            dst = *(ProtobufCMessage **)((char *)dst + s->f->offset);
            src = *(ProtobufCMessage *const *)((const char *)src + s->f->offset);
            continue;
        }
        if (++seen < p->nindex) {
            dst = *(ProtobufCMessage **)set_elem(dst, s->f, (size_t)s->index);
            src = *(ProtobufCMessage *const *)set_elem(src, s->f, (size_t)s->index);
            continue;
        }
        if (k == p->nsteps - 1) return pb_repeated_set(dst, src, s->f, (size_t)s->index);
        return pb_merge(*(ProtobufCMessage **)set_elem(dst, s->f, (size_t)s->index),
                        *(ProtobufCMessage *const *)set_elem(src, s->f, (size_t)s->index));
    }
    return pb_merge(dst, src);
}

/* What set_inherit copied into a stage, taken back when the assignment then fails:
 * the stage's data block, or its list f of message m. */
typedef struct set_undo {
    Baton__Stage *stage; /* data: stage->data was copied */
    ProtobufCMessage *m;
    const ProtobufCFieldDescriptor *f;
    ProtobufCMessage **made; /* the first message on the way to m that was made, or NULL */
} set_undo;

static void set_undo_apply(set_undo *u) {
    if (u->made != NULL) { /* m is inside it: all goes, the stage as it was */
        protobuf_c_message_free_unpacked(*u->made, NULL);
        *u->made = NULL;
        return;
    }
    if (u->stage != NULL) {
        protobuf_c_message_free_unpacked(&u->stage->data->base, NULL);
        u->stage->data = NULL;
    }
    if (u->m != NULL) {
        size_t *n = (size_t *)((char *)u->m + u->f->quantifier_offset);
        void **arr = (void **)((char *)u->m + u->f->offset);
        for (size_t k = 0; k < *n; k++) {
            if (u->f->type == PROTOBUF_C_TYPE_MESSAGE)
                protobuf_c_message_free_unpacked(((ProtobufCMessage **)*arr)[k], NULL);
            else if (u->f->type == PROTOBUF_C_TYPE_STRING)
                free(((char **)*arr)[k]);
        }
        free(*arr);
        *arr = NULL, *n = 0;
    }
}

/* Copies list f of src into dst's, which is empty (its array, if any, given empty). */
static int set_copy_list(ProtobufCMessage *dst, const ProtobufCMessage *src,
                         const ProtobufCFieldDescriptor *f) {
    size_t n = set_count(src, f), es = pb_elem_size(f->type);
    char *arr = calloc(n ? n : 1, es);
    if (arr == NULL) return BT_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        const void *e = set_elem(src, f, k);
        void *to = arr + k * es;
        if (f->type == PROTOBUF_C_TYPE_MESSAGE)
            *(ProtobufCMessage **)to = pb_clone(*(ProtobufCMessage *const *)e);
        else if (f->type == PROTOBUF_C_TYPE_STRING)
            *(char **)to = strdup(*(char *const *)e);
        else
            memcpy(to, e, es);
        if ((f->type == PROTOBUF_C_TYPE_MESSAGE || f->type == PROTOBUF_C_TYPE_STRING) &&
            *(void **)to == NULL) {
            n = k; /* dst owns (and frees) the k copied; the caller fails */
            break;
        }
    }
    void **slot = (void **)((char *)dst + f->offset);
    free(*slot);
    *slot = arr;
    *(size_t *)((char *)dst + f->quantifier_offset) = n;
    return n == set_count(src, f) ? 0 : BT_ENOMEM;
}

/* Stage i's data block when the stage gives none: the last one given before it. */
static const Baton__Data *set_inherited_data(const Baton__Recipe *r, size_t i) {
    const Baton__Data *d = r->data;
    for (size_t k = 0; k < i; k++)
        if (r->stages[k]->data != NULL) d = r->stages[k]->data;
    return d;
}

/* The stage's own message along fields path[0, n) (made where missing; *made: the slot
 * of the first one made, else NULL), or NULL. */
static ProtobufCMessage *set_own_path(ProtobufCMessage *m, const ProtobufCFieldDescriptor **path,
                                      int n, ProtobufCMessage ***made) {
    *made = NULL;
    for (int k = 0; k < n && m != NULL; k++) {
        ProtobufCMessage **slot = (ProtobufCMessage **)((char *)m + path[k]->offset);
        const ProtobufCMessageDescriptor *d = path[k]->descriptor;
        if (*slot == NULL && (*slot = calloc(1, d->sizeof_message)) != NULL) {
            d->message_init(*slot);
            if (*made == NULL) *made = slot;
        }
        m = *slot;
    }
    return m;
}

/* An element of a list stage i inherits (rest: the key after "stages.S.", e.g.
 * "parallel.stage_layers.1" or "data.mix.0.weight"): the list is copied into the stage
 * first, as if the stage gave it, so that the element can be set there. A data block is
 * copied whole (valid too), since a stage's data block replaces the one before it. Does
 * nothing where the stage gives the list itself (or a data block of its own), or inherits
 * none. */
static int set_inherit_list(recipe_doc *doc, size_t i, const char *rest, set_undo *undo) {
    Baton__Stage *own = doc->recipe->stages[i], *eff = NULL;
    if (strncmp(rest, "data.", 5) == 0) {
        const Baton__Data *d = set_inherited_data(doc->recipe, i);
        if (own->data != NULL || d == NULL || d->n_mix == 0 || strncmp(rest + 5, "mix.", 4) != 0)
            return 0;
        own->data = (Baton__Data *)pb_clone(&d->base);
        undo->stage = own->data ? own : NULL;
        return own->data ? 0 : BT_ENOMEM;
    }
    if (recipe_effective_stage(doc, i, &eff) != 0) return BT_ENOMEM;
    const ProtobufCMessageDescriptor *d = &baton__stage__descriptor;
    const ProtobufCFieldDescriptor *path[SET_MAX_STEPS];
    const ProtobufCMessage *e = &eff->base, *o = &own->base;
    int n = 0, rc = 0;
    for (const char *seg = rest; seg != NULL && e != NULL && n < SET_MAX_STEPS;) {
        const char *dot = strchr(seg, '.');
        char name[128];
        snprintf(name, sizeof name, "%.*s", dot ? (int)(dot - seg) : (int)strlen(seg), seg);
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(d, name);
        if (f == NULL || dot == NULL) break;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (set_count(o, f) == 0 && set_count(e, f) > 0) {
                ProtobufCMessage *to = set_own_path(&own->base, path, n, &undo->made);
                rc = to ? set_copy_list(to, e, f) : BT_ENOMEM;
                if (to != NULL) undo->m = to, undo->f = f;
            }
            break;
        }
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) break;
        e = *(ProtobufCMessage *const *)((const char *)e + f->offset);
        o = o ? *(ProtobufCMessage *const *)((const char *)o + f->offset) : NULL;
        path[n++] = f, d = f->descriptor, seg = dot + 1;
    }
    protobuf_c_message_free_unpacked(&eff->base, NULL);
    return rc;
}

/* For key "stages.S.REST" naming a list element in REST: set_inherit_list. */
static int set_inherit(recipe_doc *doc, const char *key, set_undo *undo) {
    if (strncmp(key, "stages.", 7) != 0) return 0;
    const char *seg = key + 7, *dot = strchr(seg, '.');
    if (dot == NULL) return 0;
    size_t n = (size_t)(dot - seg);
    long i = seg[0] == '0' && n > 1 ? -1 : set_index(seg, n);
    if (i < 0 || (size_t)i >= doc->recipe->n_stages) i = set_stage_index(doc, seg, n);
    return i < 0 ? 0 : set_inherit_list(doc, (size_t)i, dot + 1, undo);
}

/* Whether an earlier override gave the defaults' stage_layers or one of its values. */
static int set_split_overridden(const recipe_doc *doc) {
    for (size_t k = 0; k < doc->npos; k++)
        if (doc->pos[k].set != NULL &&
            set_path_within(doc->pos[k].path, "defaults.parallel.stage_layers"))
            return 1;
    return 0;
}

/* Loads the plan's document and overlays it onto doc. */
static int set_overlay(recipe_doc *doc, const char *what, const set_plan *p, bt_diag *diag) {
    recipe_doc part;
    bt_diag inner;
    bt_diag_init(&inner);
    const char *text = bt_buf_str(&p->text);
    int rc = recipe_load_buffer(what, text, strlen(text), &part, &inner);
    if (rc != 0) {
        set_diag_unplace(diag, what, &inner);
        return rc;
    }
    Baton__Stage *d = doc->recipe->defaults, *g = part.recipe->defaults;
    uint32_t pp0 = d && d->parallel ? d->parallel->pp : 0;
    uint32_t v0 = d && d->parallel ? d->parallel->virtual_stages : 0;
    rc = p->nindex > 0 ? set_merge(&doc->recipe->base, &part.recipe->base, p)
                       : pb_merge(&doc->recipe->base, &part.recipe->base);
    /* --set defaults.parallel.pp=N: as a stage changing it, it drops the file's split but
     * not one an earlier --set gave (which then holds, as when given after it) */
    d = doc->recipe->defaults;
    if (rc == 0 && p->nindex == 0 && d != NULL && g != NULL && !set_split_overridden(doc))
        recipe_drop_stale_split(d->parallel, g->parallel, pp0, v0);
    if (rc == 0) rc = set_record(doc, &part, bt_buf_str(&p->base), what, diag);
    recipe_doc_free(&part);
    return rc;
}

static const char *const set_opt[] = {"--set", "--nodes", "--gpus-per-node"};
static const char *const set_opt_key[] = {"", "cluster.nodes=", "cluster.gpus_per_node="};

/* recipe_apply_set for the assignment option opt gave (an index into set_opt), which
 * its messages name as the user wrote it: "--nodes abc", not "--set cluster.nodes=abc". */
static int set_apply(recipe_doc *doc, const char *assignment, int opt, bt_diag *diag) {
    const char *eq = strchr(assignment, '=');
    char what[300];
    if (opt > 0 && eq != NULL)
        snprintf(what, sizeof what, "%s %s", set_opt[opt], eq + 1);
    else
        snprintf(what, sizeof what, "--set %s", assignment);
    if (opt > 0 && eq != NULL && eq[1] == '\0') {
        bt_diag_set(diag, "%s '': give a count, such as %s 2", set_opt[opt], set_opt[opt]);
        return BT_ERECIPE;
    }
    if (eq == NULL || eq == assignment) {
        bt_diag_set(diag, "%s: expected KEY=VALUE, e.g. --set stages.pretrain.steps=100", what);
        return BT_ERECIPE;
    }
    char *key = strndup(assignment, (size_t)(eq - assignment));
    set_plan p = {0};
    bt_buf_init(&p.text);
    bt_buf_init(&p.base);
    int rc = key ? set_check_key(what, key, diag) : BT_ENOMEM;
    /* An empty value is the empty string: YAML's empty value would be null, which no
     * field takes. */
    set_undo undo = {0};
    if (rc == 0) rc = set_inherit(doc, key, &undo);
    if (rc == 0) rc = set_plan_build(&p, doc, what, key, eq[1] ? eq + 1 : "\"\"", diag);
    if (rc == 0 && eq[1] == '\0' && p.last != NULL && p.last->type != PROTOBUF_C_TYPE_STRING) {
        bt_diag_set(diag,
                    "%s: empty value for %s, which is not a string; give one after '=' "
                    "(\"\" is taken only by a string field)",
                    what, bt_buf_str(&p.base));
        rc = BT_ERECIPE;
    }
    if (rc == 0 && (p.text.oom || p.base.oom)) rc = BT_ENOMEM;
    if (rc == 0) rc = set_overlay(doc, what, &p, diag);
    if (rc != 0) set_undo_apply(&undo); /* the recipe as it was, but for a failed overlay */
    if (rc == BT_ENOMEM) bt_diag_set(diag, "%s: out of memory", what);
    bt_buf_free(&p.text);
    bt_buf_free(&p.base);
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

/* Whether option k (--nodes, --gpus-per-node: one value each) was given before; says so
 * naming both values. */
static int sets_repeated(const recipe_sets *s, const char *cmd, int k, const char *v) {
    for (int j = 0; j < s->n; j++) {
        if (s->opt[j] != k) continue;
        const char *prev = s->set[j] + strlen(set_opt_key[k]);
        fprintf(stderr, "%s: %s given twice ('%s' and '%s'); give it once\n", cmd, set_opt[k], prev,
                v);
        return 1;
    }
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
        if (k > 0 && sets_repeated(s, cmd, k, argv[*i])) return -2;
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
