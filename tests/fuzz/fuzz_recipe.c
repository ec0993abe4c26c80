/* Fuzz target for the recipe path: load (YAML -> protobuf), validate, resolve every
 * stage and plan it. Any input must give either a result or a clean error: no crash,
 * no leak, no undefined behaviour, and an error always comes with a message.
 * Built as a libFuzzer target with clang (-DBATON_FUZZ=ON) and, everywhere, as a
 * replay program over the seed corpus (fuzz_recipe_replay FILES...). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "plan.h"
#include "recipe.h"

static void fuzz_plan_stages(const recipe_doc *doc) {
    for (size_t i = 0; i < doc->recipe->n_stages; i++) {
        bt_diag diag;
        bt_diag_init(&diag);
        Baton__StageSpec *spec = NULL;
        if (recipe_resolve_stage(doc, i, &spec, &diag) != 0)
            abort(); /* a validated recipe always resolves */
        plan_stage ps;
        if (plan_stage_build(spec, &ps, &diag) != 0 && !bt_diag_isset(&diag)) abort();
        protobuf_c_message_free_unpacked(&spec->base, NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    recipe_doc doc = {0};
    bt_diag diag;
    bt_diag_init(&diag);
    int rc = recipe_load_buffer("fuzz.yaml", (const char *)data, size, &doc, &diag);
    doc.warn = NULL; /* the warnings are formatted all the same */
    if (rc == 0) rc = recipe_validate(&doc, &diag);
    if (rc != 0 && !bt_diag_isset(&diag)) abort(); /* every error must say what is wrong */
    if (rc == 0) fuzz_plan_stages(&doc);
    recipe_doc_free(&doc);
    return 0;
}
