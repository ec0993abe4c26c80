/* What test_control's files share: the CHECK macro and its count of failures, the
 * server-pumping and metrics-sending helpers, and each subcommand's entry point.
 *   test_control.c          main, the connection and protocol tests (unit, crowd, ack,
 *                           slowstep, serve) and the shared helpers
 *   test_control_metrics.c  the metrics sink and replay tests (replay, stages, gap,
 *                           orphans, backlog)
 *   test_control_enospc.c   the metrics sink on a full disk (enospc)
 *   test_control_fatal.c    a full disk told by a rank's Fatal (fatal)
 *   test_control_reason.c   a Fatal's kind by its reason, not its words (reason)
 *   test_control_build.c    the build each rank's Hello names (build)
 *   test_control_many.c     a world of thousands of ranks (many) */
#ifndef BATON_TEST_CONTROL_H
#define BATON_TEST_CONTROL_H

#include <stdint.h>
#include <stdio.h>

#include "control_client.h"
#include "control_server.h"

/* Checks failed so far, in every file (defined once, in test_control.c). */
extern int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

void sleep_s(double s);
/* One poll-and-handle round of the server, waiting at most ms. */
void pump(control_server *cs, int ms);
/* Pumps until cond(cs) holds or 5 s pass. */
int pump_until(control_server *cs, int (*cond)(const control_server *));
/* Metrics of step `step` with loss `loss` and every other field set, sent by c. */
void send_metrics(control_client *c, uint64_t step, double loss);

/* The subcommands of test_control.c. */
int unit(const char *run_dir);
int crowd(const char *run_dir);
int ack(void);
int slowstep(void);
int serve(char **argv);

/* The subcommands of test_control_metrics.c. */
int replay(const char *run_dir);
int stages(const char *run_dir);
int gap(const char *run_dir);
int orphans(const char *run_dir);
int enospc(const char *run_dir, const char *which);

/* The subcommand of test_control_fatal.c. */
int fatal(const char *run_dir);
int backlog(const char *run_dir);

/* The subcommand of test_control_reason.c. */
int fatal_reason(const char *run_dir);

/* The subcommand of test_control_build.c. */
int build(const char *run_dir);

/* The subcommand of test_control_many.c. */
int many(const char *run_dir);

#endif
