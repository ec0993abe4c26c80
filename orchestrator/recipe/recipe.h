/* From a loaded recipe to what the rest of baton consumes: semantic validation and
 * resolution of each stage into a self-contained StageSpec.
 *
 * Stage inheritance: stage i is defaults, overlaid by stages 0..i in order (each stage
 * starts from the one before it). The effective RoPE is model.rope overlaid by the
 * defaults' and the stages' rope. Data is not overlaid: the last data block given (the
 * recipe's, or a stage's up to this one) is used whole, so a stage that names new data
 * never inherits parts of the old mixture. */
#ifndef BATON_RECIPE_H
#define BATON_RECIPE_H

#include <stdint.h>

#include "recipe_load.h"
#include "stage_spec.pb-c.h"

/* Checks everything that makes a recipe runnable (sizes, divisibility, layouts,
 * precision, optimizer, RoPE). The first problem is reported in diag as
 * "FILE:LINE:COL: PATH: message", pointing at the key that set the offending value
 * (for inherited values: the stage or the defaults where it was written).
 * Returns 0 or BT_ERECIPE. What runs but is likely a mistake (a seq_len beyond the
 * context a RoPE scaling extends to, a warmup longer than the stage) is written to
 * doc->warn as "FILE:LINE:COL: warning: PATH: message" lines (recipe_doc.warn). */
int recipe_validate(const recipe_doc *doc, bt_diag *diag);
/* The most nodes a run takes (cluster.nodes + spare_nodes: baton run, resume and submit),
 * whatever the launcher: the hosts of a Slurm allocation, the nodes excluded and used, the
 * control channel's connections are sized by it. baton plan takes larger clusters (up to
 * its limit of devices) and warns. */
#define RECIPE_RUN_MAX_NODES 16384u
/* recipe_validate, except that with naming non-NULL (a run: baton run, resume, submit) a
 * cluster of more than RECIPE_RUN_MAX_NODES nodes + spare_nodes is refused (only a warning
 * without), and a stage name against the rules made
 * after runs could be started with such names ('.', a space, all digits) is not refused:
 * the first such problem goes to naming (its msg "" when none), for the caller to refuse
 * (a new run) or to warn about (a run that started with that recipe). */
int recipe_validate_run(const recipe_doc *doc, bt_diag *diag, bt_diag *naming);

/* The context a RoPE scaling extends to: original_max_position × factor, where linear, NTK
 * and YaRN's factor is the ratio of the contexts; twice that for llama3, which interpolates
 * only the low frequencies and is used so (Llama 3.1: 8K × factor 8 for 128K). 0 when sc
 * is NULL, of type none, or has no original_max_position or a factor below 1: none to
 * speak of. The one measure for plan's warnings and baton eval's. */
double recipe_rope_extent(const Baton__RopeScaling *sc);

/* Whether name can be a recipe's name, which names the default run directory runs/<name>
 * (and a Slurm job): 0, or BT_ERECIPE with what is wrong in why ("\"a/b\" has '/' at
 * character 2; use letters, ..."), to follow "the recipe name". */
int recipe_name_problem(const char *name, char *why, size_t cap);

/* Builds the StageSpec of stage i (0-based). The spec owns all its memory: free it with
 * protobuf_c_message_free_unpacked(&spec->base, NULL). All sub-messages are present,
 * n_kv_heads and parallel.dp are explicit. Call after recipe_validate succeeded. */
int recipe_resolve_stage(const recipe_doc *doc, size_t i, Baton__StageSpec **out, bt_diag *diag);

/* For showing stage i's spec s (from recipe_resolve_stage) as baton spec does: the
 * values the resolver filled in where the recipe gives none (the seed, n_kv_heads,
 * restart.heartbeat_timeout, optimizer.reset, data_from_start) are marked not present,
 * holding the same value, and an fp16 stage without a loss_scale block gets one of
 * defaults (what the worker reads), so that pb_dump_yaml shows them as defaults. s is
 * then for showing only: packed, it would lose them. */
void recipe_spec_mark_defaults(const recipe_doc *doc, size_t i, Baton__StageSpec *s);

/* Stage i's first global sample (StageSpec.start_sample): after every sample the earlier
 * stages over the same training data and seq_len consumed, so a run split into stages
 * over one data set does not train on its first samples again; 0 for a stage over other
 * data, another window length, or with data_from_start. extra[k] (NULL: none) are the
 * samples stage k read beyond its steps x global_batch: the windows its loss-spike
 * rollbacks skipped. ended[k] (NULL: none), unless RECIPE_END_UNKNOWN, is where a
 * completed stage k did end (the sample past its last one, rollbacks' windows included),
 * as its run recorded it: taken instead of its start + steps x global_batch + extra[k],
 * which a recipe edited after it completed no longer tells. */
#define RECIPE_END_UNKNOWN UINT64_MAX
int recipe_data_start(const recipe_doc *doc, size_t i, const uint64_t *extra, const uint64_t *ended,
                      uint64_t *start);

/* The effective (merged, not yet completed) Stage i: defaults then stages 0..i.
 * Caller frees with protobuf_c_message_free_unpacked. */
int recipe_effective_stage(const recipe_doc *doc, size_t i, Baton__Stage **out);
/* Whether stage i resets the optimizer (optimizer.reset): its own value, else the
 * defaults', never an earlier stage's, as its spec carries it (recipe_effective_stage
 * merges the earlier stages' in). */
int recipe_stage_reset(const Baton__Recipe *r, size_t i);
/* After given (a stage's or an override's parallel settings) was merged into e: when it
 * changed pp or virtual_stages (pp0, v0 before) without giving stage_layers, e goes back to
 * the even split, its inherited list having been for another pipeline (a stage says so
 * itself with `stage_layers: []`, which pb_merge overlays as an empty list). */
void recipe_drop_stale_split(Baton__Parallel *e, const Baton__Parallel *given, uint32_t pp0,
                             uint32_t v0);

/* Overlays one --set KEY=VALUE assignment (recipe_set.c) onto the loaded recipe: KEY a
 * dotted field path (stages by name or index: stages.pretrain.steps; an element of another
 * list by index: data.mix.0.weight), VALUE YAML. Errors
 * name the assignment. Validate afterwards. */
int recipe_apply_set(recipe_doc *doc, const char *assignment, bt_diag *diag);

/* A command line's overrides in the order given: --set KEY=VALUE, and --nodes K and
 * --gpus-per-node G as cluster.nodes=K and cluster.gpus_per_node=G (baton run, resume,
 * submit and plan). */
#define RECIPE_MAX_SETS 32
typedef struct recipe_sets {
    char *set[RECIPE_MAX_SETS];         /* KEY=VALUE, owned */
    unsigned char opt[RECIPE_MAX_SETS]; /* which gave it: 0 --set, 1 --nodes, 2 --gpus-per-node */
    int n;
} recipe_sets;
/* Appends key followed by value; -1 (a message naming cmd on stderr) when full or out of
 * memory. */
int recipe_sets_add(recipe_sets *s, const char *cmd, const char *key, const char *value);
/* The override option at argv[*i] with its value (*i moves past it): 1 taken, 0 not one,
 * -1 (a message naming cmd on stderr) when its value is missing or the list is full, -2
 * (said so) when it is --nodes or --gpus-per-node given again (each takes one value;
 * --set repeats). */
int recipe_sets_parse(recipe_sets *s, const char *cmd, int argc, char **argv, int *i);
/* recipe_apply_set for each, in order (messages name --nodes and --gpus-per-node as
 * given); the first failure. */
int recipe_sets_apply(const recipe_sets *s, recipe_doc *doc, bt_diag *diag);
void recipe_sets_free(recipe_sets *s);

#endif
