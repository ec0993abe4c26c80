/* A minimal assertion kit for the unit tests: each failed check prints where and why
 * and marks the test failed; main returns check_status(). */
#ifndef BATON_CHECK_H
#define BATON_CHECK_H

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One count per program, shared by all its files (weak: each file's copy is the same
 * variable), so a check failed in a helper file fails the test that main reports. */
__attribute__((weak)) int check_failures;

/* A float's bits and back (for tests of roundings). */
static inline uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                         \
    do {                                                                                           \
        unsigned long long va_ = (unsigned long long)(a), vb_ = (unsigned long long)(b);           \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: %s == %s failed: %llu != %llu\n", __FILE__, __LINE__, #a, #b,  \
                    va_, vb_);                                                                     \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* |a - b| <= rel * max(|a|, |b|) */
#define CHECK_REL(a, b, rel)                                                                       \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        double m_ = fabs(va_) > fabs(vb_) ? fabs(va_) : fabs(vb_);                                 \
        if (fabs(va_ - vb_) > (rel)*m_) {                                                          \
            fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g vs %.9g (rel %.3g)\n", __FILE__,          \
                    __LINE__, #a, #b, va_, vb_, (double)(rel));                                    \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                                            \
    do {                                                                                           \
        const char *h_ = (hay), *n_ = (needle);                                                    \
        if (h_ == NULL || strstr(h_, n_) == NULL) {                                                \
            fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", __FILE__, __LINE__, n_,          \
                    h_ ? h_ : "(null)");                                                           \
            check_failures++;                                                                      \
        }                                                                                          \
    } while (0)

/* Removes a test's temporary directory and everything below it (links are removed, not
 * followed). */
static inline void check_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[1024];
        struct stat st;
        int n = snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof p) continue; /* a path too long to be ours */
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            check_rmdir(p);
        else
            unlink(p);
    }
    if (d != NULL) closedir(d);
    rmdir(dir);
}

static inline int check_status(void) {
    if (check_failures) fprintf(stderr, "%d check(s) failed\n", check_failures);
    return check_failures ? 1 : 0;
}

#endif
