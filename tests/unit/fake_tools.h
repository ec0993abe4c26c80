/* Fake command-line tools for unit tests: shell scripts in a private directory put first on
 * PATH, each logging its name and arguments to DIR/calls before running its body. */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

static char dir[256]; /* the fake tools' directory, first on PATH */

/* DIR made (TMPDIR/NAME.XXXXXX) and put first on PATH. */
static void fake_tools_init(const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/%s.XXXXXX", tmp ? tmp : "/tmp", name);
    CHECK(mkdtemp(dir) != NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s:%s", dir, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
    setenv("PATH", path, 1);
}

/* A fake tool NAME running BODY (sh) after logging its call. */
static void script(const char *name, const char *body) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f == NULL) return;
    fprintf(f, "#!/bin/sh\necho \"%s $*\" >>%s/calls\n%s\n", name, dir, body);
    fclose(f);
    chmod(path, 0755);
}

/* What the fake tools were called with since the last look (then forgotten). */
static void calls(char *out, size_t cap) {
    char path[512];
    snprintf(path, sizeof path, "%s/calls", dir);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f) fclose(f);
    unlink(path);
}

/* DIR removed. */
static void fake_tools_done(void) {
    char rm[512];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    CHECK(system(rm) == 0);
}
