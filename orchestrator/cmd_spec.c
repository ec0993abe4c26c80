/* baton spec RECIPE [--stage NAME|INDEX] [--out FILE] [--set KEY=VALUE ...] [--nodes K]
 * [--gpus-per-node G]: resolves one stage of a recipe, with baton run's overrides, into
 * the StageSpec a worker receives, and prints it as YAML or writes it as a binary
 * protobuf (the input of `baton-worker --spec FILE`). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "pb_dump.h"
#include "plan_precision.h"
#include "recipe.h"
#include "util/out_file.h"

static void spec_usage(FILE *f) {
    fprintf(f, "usage: baton spec RECIPE [--stage NAME|INDEX] [--out FILE] [--set KEY=VALUE ...]\n"
               "                  [--nodes K] [--gpus-per-node G]\n\n"
               "Resolves a stage of RECIPE (defaults, earlier stages and transforms merged)\n"
               "into the self-contained StageSpec a worker runs, and prints it as YAML.\n\n"
               "  --stage NAME|INDEX  the stage (default: the first)\n"
               "  --out FILE          write the binary StageSpec to FILE instead: a regular\n"
               "                      file atomically (FILE.partial, renamed), a device,\n"
               "                      FIFO or /dev/stdout in place, a link's target\n"
               "  --set KEY=VALUE, --nodes K, --gpus-per-node G\n"
               "                      override the recipe as baton run does (e.g. --set\n"
               "                      cluster.device=cuda, --set stages.pretrain.steps=10)\n"
               "  --help              show this help\n\n"
               "Exit status: 0 done, 1 cannot write FILE, 2 invalid recipe or usage (FILE a\n"
               "directory or a dangling link too).\n");
}

typedef struct spec_args {
    const char *recipe, *stage, *out;
    recipe_sets sets; /* --set, --nodes, --gpus-per-node */
} spec_args;

static int spec_parse_args(int argc, char **argv, spec_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int taken = recipe_sets_parse(&a->sets, "baton spec", argc, argv, &i);
        if (taken < 0) return -1;
        if (taken > 0) continue;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            spec_usage(stdout);
            return 1;
        } else if (strcmp(arg, "--stage") == 0 || strcmp(arg, "--out") == 0) {
            const char **v = arg[2] == 's' ? &a->stage : &a->out;
            if (i + 1 >= argc) return cli_no_value("spec", arg);
            if (cli_once("spec", arg, *v, argv[i + 1]) != 0) return -1;
            *v = argv[++i];
            if (**v == '\0') {
                fprintf(stderr, "baton spec: %s '': name %s\n", arg,
                        v == &a->out ? "the file to write" : "a stage or its index");
                return -1;
            }
        } else if (arg[0] == '-' && arg[1] != '\0') {
            fprintf(stderr, "baton spec: unknown option '%s'\n", arg);
            return -1;
        } else if (a->recipe == NULL) {
            a->recipe = arg;
        } else {
            fprintf(stderr, "baton spec: one recipe at a time (got '%s' and '%s')\n", a->recipe,
                    arg);
            return -1;
        }
    }
    if (a->recipe == NULL) {
        fprintf(stderr, "baton spec: no recipe given\n");
        spec_usage(stderr);
        return -1;
    }
    return 0;
}

/* name as a stage index: a plain 0-based number (digits only, no leading zero, as
 * --set writes one); -1 when it is not one. */
static long spec_index(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 9 || strspn(name, "0123456789") != n || (name[0] == '0' && n > 1)) return -1;
    return strtol(name, NULL, 10);
}

/* The stage named name, or with that index; -1 with a message when there is none. */
static long spec_find_stage(const recipe_doc *doc, const char *name, bt_diag *diag) {
    const Baton__Recipe *r = doc->recipe;
    if (name == NULL) return 0;
    for (size_t i = 0; i < r->n_stages; i++)
        if (r->stages[i]->name != NULL && strcmp(r->stages[i]->name, name) == 0) return (long)i;
    long i = spec_index(name);
    if (i >= 0 && (size_t)i < r->n_stages) return i;
    bt_buf names;
    bt_buf_init(&names);
    for (size_t k = 0; k < r->n_stages; k++)
        bt_buf_printf(&names, "%s%s", k ? ", " : "", r->stages[k]->name);
    bt_diag_set(diag, "%s: no stage \"%s\"; stages are: %s (or an index 0..%zu)", doc->file, name,
                bt_buf_str(&names), r->n_stages - 1);
    bt_buf_free(&names);
    return -1;
}

/* Writes the packed spec to path: a new or regular file atomically (temporary file, fsync,
 * rename), a device, FIFO or /dev/stdout in place, a link's target (util/out_file.h). */
static int spec_write(const Baton__StageSpec *s, const char *path, bt_diag *diag) {
    size_t n = protobuf_c_message_get_packed_size(&s->base);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL) {
        bt_diag_set(diag, "out of memory");
        return BT_ENOMEM;
    }
    protobuf_c_message_pack(&s->base, buf);
    int rc = bt_out_write_file(path, buf, n, diag);
    free(buf);
    return rc;
}

/* For an fp16 stage i whose loss scale is not its loss_scale.initial, a comment saying
 * where it comes from (plan_scale_carried: the stage before; the first stage, the
 * recipe's init where an fp16 stage saved it), into b. */
static void spec_scale_note(bt_buf *b, const recipe_doc *doc, size_t i, const Baton__StageSpec *s) {
    Baton__Stage *prev = NULL;
    if (i > 0 && recipe_effective_stage(doc, i - 1, &prev) != 0) return;
    const char *init = doc->recipe->init;
    int reset = s->stage->optimizer && s->stage->optimizer->reset;
    if (prev && plan_scale_carried(prev->precision, s->stage->precision, reset))
        bt_buf_printf(b,
                      "# precision.loss_scale.initial is not used: the stage starts from the loss\n"
                      "# scale stage \"%s\" ended with (an fp16 stage after an fp16 stage\n"
                      "# carries it, as it carries the moments; optimizer.reset starts over)\n",
                      prev->name ? prev->name : "");
    else if (i == 0 && init && init[0] && s->stage->precision &&
             s->stage->precision->type == BATON__PRECISION__TYPE__FP16 && !reset)
        bt_buf_printf(b, "# precision.loss_scale.initial unless init's checkpoint was saved by an "
                         "fp16\n# stage: then the loss scale it ended with\n");
    if (prev) protobuf_c_message_free_unpacked(&prev->base, NULL);
}

static int spec_emit(const recipe_doc *doc, size_t i, const Baton__StageSpec *s, const char *out,
                     bt_diag *diag) {
    if (out != NULL) return spec_write(s, out, diag);
    bt_buf b;
    bt_buf_init(&b);
    const char *recipe = s->recipe_name && s->recipe_name[0] ? s->recipe_name : "(unnamed)";
    bt_buf_printf(&b, "# StageSpec: stage %u \"%s\" of recipe %s\n", s->stage_index, s->stage->name,
                  recipe);
    /* Every value the worker reads, those left at their defaults too, marked so. Not the
     * stage's rope: the recipe's overlay as given, which the resolver merged into
     * model.rope (the one the worker reads), and whose own unset fields, shown with their
     * defaults, would not be the stage's (theta 10000 beside a model's 500000). */
    Baton__Stage stage = *s->stage;
    Baton__StageSpec shown = *s;
    stage.rope = NULL, shown.stage = &stage;
    bt_buf_printf(&b,
                  "# model.rope is the stage's RoPE, its rope overlay merged in; \"# default\"\n"
                  "# marks a value the recipe leaves unset, the schema's default\n");
    spec_scale_note(&b, doc, i, s);
    pb_dump_yaml(&b, &shown.base, 0, 1);
    fputs(bt_buf_str(&b), stdout);
    bt_buf_free(&b);
    return 0;
}

int cmd_spec(int argc, char **argv) {
    spec_args a = {0};
    int prc = spec_parse_args(argc, argv, &a);
    if (prc != 0) {
        recipe_sets_free(&a.sets);
        return prc > 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    bt_diag diag;
    bt_diag_init(&diag);
    recipe_doc doc = {0};
    Baton__StageSpec *spec = NULL;
    int rc = recipe_load_file(a.recipe, &doc, &diag);
    rc = rc ? rc : recipe_sets_apply(&a.sets, &doc, &diag);
    doc.warn_cmd = "spec";
    rc = rc ? rc : recipe_validate(&doc, &diag);
    long stage = rc ? -1 : spec_find_stage(&doc, a.stage, &diag);
    if (rc == 0 && stage < 0) rc = BT_EINVAL;
    rc = rc ? rc : recipe_resolve_stage(&doc, (size_t)stage, &spec, &diag);
    int input_rc = rc; /* errors up to here are about the recipe or the command line */
    if (rc == 0 && a.out == NULL) recipe_spec_mark_defaults(&doc, (size_t)stage, spec);
    rc = rc ? rc : spec_emit(&doc, (size_t)stage, spec, a.out, &diag);
    if (rc != 0) cli_error("spec", &diag, rc);
    if (spec != NULL) protobuf_c_message_free_unpacked(&spec->base, NULL);
    recipe_doc_free(&doc);
    recipe_sets_free(&a.sets);
    if (rc == 0) return BT_EXIT_OK;
    int usage = rc == BT_EINVAL || (input_rc != 0 && input_rc != BT_ENOMEM);
    return usage ? BT_EXIT_USAGE : BT_EXIT_FAILURE;
}
