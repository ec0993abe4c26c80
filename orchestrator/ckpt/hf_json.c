/* Recursive-descent JSON reader; see hf_json.h. */
#include "hf_json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"

typedef struct jp {
    const char *s;
    size_t len, pos;
    const char *what;
    bt_diag *diag;
} jp;

static int jp_fail(jp *p, const char *msg) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < p->pos && i < p->len; i++) {
        if (p->s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    bt_diag_set_placed(p->diag, p->what, (long)line, (long)col, "invalid JSON: %s", msg);
    return BT_EINVAL;
}

static void jp_skip_ws(jp *p) {
    while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) != NULL && p->s[p->pos] != '\0')
        p->pos++;
}

static int jp_peek(jp *p) {
    jp_skip_ws(p);
    return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static int jp_hex4(jp *p, unsigned *out) {
    if (p->len - p->pos < 4) return jp_fail(p, "short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return jp_fail(p, "bad hex digit in \\u escape");
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Appends code point cp as UTF-8. */
static size_t utf8_put(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A \u escape (the backslash and u consumed), surrogate pairs joined. */
static int jp_unicode(jp *p, char *o, size_t *k) {
    unsigned cp, lo;
    if (jp_hex4(p, &cp)) return BT_EINVAL;
    if (cp >= 0xD800 && cp < 0xDC00) {
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return jp_fail(p, "lone high surrogate in \\u escape");
        p->pos += 2;
        if (jp_hex4(p, &lo)) return BT_EINVAL;
        if (lo < 0xDC00 || lo > 0xDFFF) return jp_fail(p, "bad low surrogate in \\u escape");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return jp_fail(p, "lone low surrogate in \\u escape");
    } else if (cp == 0) {
        p->pos -= 6; /* at the escape */
        return jp_fail(p, "\\u0000 (NUL) in a string: baton's names and values cannot hold it");
    }
    *k += utf8_put(o + *k, cp);
    return 0;
}

static int jp_escape(jp *p, char *o, size_t *k) {
    if (p->pos >= p->len) return jp_fail(p, "unterminated string");
    char c = p->s[p->pos++];
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *at = c != '\0' ? strchr(from, c) : NULL;
    if (at != NULL) {
        o[(*k)++] = to[at - from];
        return 0;
    }
    if (c == 'u') return jp_unicode(p, o, k);
    p->pos--;
    return jp_fail(p, "unknown escape in string");
}

/* A string starting at the opening quote into a new malloc'd buffer. Decoded text is
 * never longer than the encoded one, so one buffer of the remaining length suffices. */
static int jp_string(jp *p, char **out) {
    p->pos++; /* the quote */
    size_t end = p->pos;
    while (end < p->len && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return jp_fail(p, "unterminated string");
    char *o = malloc(end - p->pos + 1);
    if (o == NULL) return BT_ENOMEM;
    size_t k = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos++];
        int rc = 0;
        size_t seq =
            c < 0x80 ? 1
                     : bt_utf8_seq((const unsigned char *)p->s + p->pos - 1, p->len - p->pos + 1);
        if (c < 0x20)
            rc = (p->pos--, jp_fail(p, "control character in string"));
        else if (c == '\\')
            rc = jp_escape(p, o, &k);
        else if (seq == 0)
            rc = (p->pos--, jp_fail(p, "a string that is not UTF-8 (JSON text is UTF-8)"));
        else
            memcpy(o + k, p->s + p->pos - 1, seq), k += seq, p->pos += seq - 1;
        if (rc) return free(o), rc;
    }
    p->pos++;
    o[k] = '\0';
    *out = o;
    return 0;
}

static int jp_number(jp *p, hf_json *j) {
    size_t b = p->pos, e = b;
    if (e < p->len && p->s[e] == '-') e++;
    size_t digits = e;
    while (e < p->len && p->s[e] >= '0' && p->s[e] <= '9')
        e++;
    if (e == digits) return jp_fail(p, "expected a value");
    if (p->s[digits] == '0' && e - digits > 1) return jp_fail(p, "leading zero in number");
    int integer = 1;
    if (e < p->len && p->s[e] == '.') {
        integer = 0, e++;
        size_t f = e;
        while (e < p->len && p->s[e] >= '0' && p->s[e] <= '9')
            e++;
        if (e == f) return (p->pos = e, jp_fail(p, "digits expected after '.'"));
    }
    if (e < p->len && (p->s[e] == 'e' || p->s[e] == 'E')) {
        integer = 0, e++;
        if (e < p->len && (p->s[e] == '+' || p->s[e] == '-')) e++;
        size_t f = e;
        while (e < p->len && p->s[e] >= '0' && p->s[e] <= '9')
            e++;
        if (e == f) return (p->pos = e, jp_fail(p, "digits expected in exponent"));
    }
    char buf[128];
    if (e - b >= sizeof buf) return jp_fail(p, "number too long");
    memcpy(buf, p->s + b, e - b);
    buf[e - b] = '\0';
    j->type = HF_JSON_NUMBER;
    j->num = strtod(buf, NULL);
    if (integer && buf[0] != '-') {
        errno = 0;
        unsigned long long v = strtoull(buf, NULL, 10);
        j->is_u64 = errno == 0;
        j->u64 = v;
    }
    p->pos = e;
    return 0;
}

static int jp_word(jp *p, const char *w, hf_json *j, hf_json_type t, int b) {
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0)
        return jp_fail(p, "expected a value");
    p->pos += n;
    j->type = t;
    j->boolean = b;
    return 0;
}

static int jp_value(jp *p, hf_json *j, int depth);

/* Appends a zeroed child to j. */
static hf_json *jp_push(hf_json *j, size_t *cap) {
    if (j->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        hf_json *ni = realloc(j->items, nc * sizeof *ni);
        if (ni == NULL) return NULL;
        j->items = ni, *cap = nc;
    }
    hf_json *c = &j->items[j->n++];
    memset(c, 0, sizeof *c);
    return c;
}

static int jp_member(jp *p, hf_json *j, size_t *cap, int depth) {
    if (jp_peek(p) != '"') return jp_fail(p, "expected a member name in quotes");
    char *key;
    int rc = jp_string(p, &key);
    if (rc) return rc;
    if (hf_json_get(j, key) != NULL) {
        free(key);
        return jp_fail(p, "duplicate member name");
    }
    hf_json *c = jp_push(j, cap);
    if (c == NULL) return free(key), BT_ENOMEM;
    c->key = key;
    if (jp_peek(p) != ':') return jp_fail(p, "expected ':'");
    p->pos++;
    return jp_value(p, c, depth + 1);
}

/* An object or array, the opening bracket at p->pos. */
static int jp_container(jp *p, hf_json *j, int depth) {
    int object = p->s[p->pos] == '{';
    char close = object ? '}' : ']';
    j->type = object ? HF_JSON_OBJECT : HF_JSON_ARRAY;
    if (depth >= HF_JSON_DEPTH) return jp_fail(p, "nested too deeply");
    p->pos++;
    size_t cap = 0;
    if (jp_peek(p) == close) return p->pos++, 0;
    for (;;) {
        int rc;
        if (object) {
            rc = jp_member(p, j, &cap, depth);
        } else {
            hf_json *c = jp_push(j, &cap);
            rc = c == NULL ? BT_ENOMEM : jp_value(p, c, depth + 1);
        }
        if (rc) return rc;
        int c = jp_peek(p);
        if (c == close) return p->pos++, 0;
        if (c != ',') return jp_fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        p->pos++;
    }
}

static int jp_value(jp *p, hf_json *j, int depth) {
    int c = jp_peek(p);
    switch (c) {
    case '{':
    case '[':
        return jp_container(p, j, depth);
    case '"':
        j->type = HF_JSON_STRING;
        return jp_string(p, &j->str);
    case 't':
        return jp_word(p, "true", j, HF_JSON_BOOL, 1);
    case 'f':
        return jp_word(p, "false", j, HF_JSON_BOOL, 0);
    case 'n':
        return jp_word(p, "null", j, HF_JSON_NULL, 0);
    case -1:
        return jp_fail(p, "unexpected end of text");
    default:
        return jp_number(p, j);
    }
}

int hf_json_parse(const char *text, size_t len, const char *what, hf_json *out, bt_diag *diag) {
    jp p = {.s = text, .len = len, .what = what, .diag = diag};
    memset(out, 0, sizeof *out);
    int rc = jp_value(&p, out, 0);
    if (rc == 0 && jp_peek(&p) != -1) rc = jp_fail(&p, "text after the value");
    if (rc == BT_ENOMEM) bt_diag_set(diag, "%s: out of memory parsing JSON", what);
    if (rc) hf_json_free(out);
    return rc;
}

void hf_json_free(hf_json *j) {
    for (size_t i = 0; i < j->n; i++)
        hf_json_free(&j->items[i]);
    free(j->items);
    free(j->key);
    free(j->str);
    memset(j, 0, sizeof *j);
}

const hf_json *hf_json_get(const hf_json *j, const char *key) {
    if (j == NULL || j->type != HF_JSON_OBJECT) return NULL;
    for (size_t i = 0; i < j->n; i++)
        if (strcmp(j->items[i].key, key) == 0) return &j->items[i];
    return NULL;
}

const char *hf_json_type_name(hf_json_type t) {
    static const char *names[] = {"null",     "a boolean", "a number",
                                  "a string", "an array",  "an object"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}
