/* Builds compared by their sources' hash (control_build.h). */
#include "control_build.h"

#include <stdio.h>
#include <string.h>

#define BUILD_H_LEN 12

/* The 12 hex digits at s followed by ")" and the string's end. */
static int build_hash_at(const char *s) {
    for (int i = 0; i < BUILD_H_LEN; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return strcmp(s + BUILD_H_LEN, ")") == 0;
}

/* b's parts: the version's length (up to " ("), DESCRIBE (NULL when none) and its length,
 * and H; 0 when b is not of the form "V (git DESCRIBE, src H)" or "V (src H)". */
static int build_parse(const char *b, size_t *vlen, const char **desc, size_t *dlen,
                       const char **h) {
    const char *p = strstr(b, " (");
    if (p == NULL) return 0;
    *vlen = (size_t)(p - b), p += 2, *desc = NULL, *dlen = 0;
    if (strncmp(p, "git ", 4) == 0) {
        *desc = p + 4;
        *dlen = strspn(*desc, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz._+-");
        if (*dlen == 0 || strncmp(*desc + *dlen, ", ", 2) != 0) return 0;
        p = *desc + *dlen + 2;
    }
    if (strncmp(p, "src ", 4) != 0 || !build_hash_at(p + 4)) return 0;
    *h = p + 4;
    return 1;
}

int control_build_same(const char *a, const char *b) {
    size_t va, vb, da, db;
    const char *ga, *gb, *ha, *hb;
    if (!build_parse(a, &va, &ga, &da, &ha) || !build_parse(b, &vb, &gb, &db, &hb))
        return strcmp(a, b) == 0;
    return va == vb && strncmp(a, b, va) == 0 && memcmp(ha, hb, BUILD_H_LEN) == 0;
}

int control_build_commit(const char *a, const char *b, char *out, size_t cap) {
    size_t va, vb, da, db;
    const char *ga, *gb, *ha, *hb;
    if (!build_parse(a, &va, &ga, &da, &ha) || !build_parse(b, &vb, &gb, &db, &hb)) return 0;
    if (va != vb || strncmp(a, b, va) != 0 || ga == NULL || gb == NULL) return 0;
    if (da >= 6 && strncmp(ga + da - 6, "-dirty", 6) == 0) da -= 6;
    if (db >= 6 && strncmp(gb + db - 6, "-dirty", 6) == 0) db -= 6;
    if (da == 0 || da != db || strncmp(ga, gb, da) != 0 || da >= cap) return 0;
    snprintf(out, cap, "%.*s", (int)da, ga);
    return 1;
}
