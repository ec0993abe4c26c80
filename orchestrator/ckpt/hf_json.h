/* A small JSON reader for the two JSON texts of a Hugging Face model directory: the
 * header of a .safetensors file and config.json. It parses the whole text (RFC 8259:
 * objects, arrays, strings with every escape, numbers, true, false, null) into a tree
 * the caller walks. Limits keep hostile input cheap: nesting at most HF_JSON_DEPTH.
 * Duplicate keys are an error (the formats give them no meaning). */
#ifndef BATON_HF_JSON_H
#define BATON_HF_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define HF_JSON_DEPTH 64

typedef enum hf_json_type {
    HF_JSON_NULL,
    HF_JSON_BOOL,
    HF_JSON_NUMBER,
    HF_JSON_STRING,
    HF_JSON_ARRAY,
    HF_JSON_OBJECT,
} hf_json_type;

typedef struct hf_json {
    hf_json_type type;
    char *key;             /* the member name inside an object, else NULL */
    char *str;             /* HF_JSON_STRING: the decoded text (NUL-terminated) */
    double num;            /* HF_JSON_NUMBER */
    uint64_t u64;          /* HF_JSON_NUMBER written as a plain non-negative integer */
    int is_u64;            /* ... and fitting 64 bits */
    int boolean;           /* HF_JSON_BOOL */
    struct hf_json *items; /* HF_JSON_ARRAY / HF_JSON_OBJECT: n children */
    size_t n;
} hf_json;

/* Parses text[0, len) into *out. On error returns BT_EINVAL with diag naming `what`
 * (a file name) and the line and column. Free with hf_json_free. */
int hf_json_parse(const char *text, size_t len, const char *what, hf_json *out, bt_diag *diag);
void hf_json_free(hf_json *j);
/* The member `key` of an object, NULL when absent or j is not an object. */
const hf_json *hf_json_get(const hf_json *j, const char *key);
/* A human name of a type for messages ("a string", "an object", ...). */
const char *hf_json_type_name(hf_json_type t);

#endif
