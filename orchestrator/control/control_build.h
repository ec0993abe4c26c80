/* The build a program names (BATON_VERSION, cmake/baton_version.cmake), as baton run
 * compares a worker's with its own: "V (git DESCRIBE[-dirty], src H)" or "V (src H)",
 * H the hash of the sources the build compiles. */
#ifndef BATON_CONTROL_BUILD_H
#define BATON_CONTROL_BUILD_H

#include <stddef.h>

/* 1 when builds a and b are one build: the same version and sources' hash H, whatever
 * git says of them (a clean checkout, one with doc edits, a container build without
 * .git); a build string not of that form (a worker older than H in every build) is
 * compared whole. */
int control_build_same(const char *a, const char *b);

/* 1 when builds a and b, of the same version, both name one git commit: its DESCRIBE,
 * -dirty dropped, into out (cap bytes); else 0. */
int control_build_commit(const char *a, const char *b, char *out, size_t cap);

#endif
