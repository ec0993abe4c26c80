/* What a run's journal says about it: per stage, whether it completed, how many attempts
 * were started, the failures and recoveries; whether the whole run completed. Built by
 * replaying the records, so `baton run` on an existing run directory and `baton status`
 * see the same history. */
#ifndef BATON_RUN_STATE_H
#define BATON_RUN_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "journal.h"

#define RUN_MAX_STAGES 64

typedef struct run_stage_state {
    int started, completed;
    uint32_t attempts;     /* ATTEMPT_STARTED records */
    uint32_t next_attempt; /* past the highest attempt number any record of it names: the
                            * next attempt's (never one a failure of an older journal used
                            * without an ATTEMPT_STARTED) */
    uint32_t failures;     /* FAILURE records */
    uint32_t not_retried;  /* of them, failures not retried (retryable false): a
                            * configuration error, a damaged checkpoint, a full disk, a
                            * stuck PMIx server (which a fresh process retries) */
    uint32_t restarts;     /* retried failures followed by another attempt (a stuck
                            * server's too) */
    int failure_open;      /* a retried failure (or a stuck server's) no attempt followed yet */
    int recovery_open;     /* such a failure no step followed yet (an attempt after it may
                            * have started and stopped before its first): the next step
                            * completed is its recovery */
    double failure_at;     /* wall time of the last failure */
    uint64_t last_step;    /* of the last STAGE_COMPLETED, else of the last ATTEMPT_ENDED */
    double started_at, completed_at;
    double recovery_s_sum;
    uint32_t recoveries; /* failures followed by a completed step */
    double wall_s;       /* time spent in attempts that ended, and in those a killed
                          * supervisor left open, up to their last record */
    double last_at;      /* wall time of the stage's last record */
    double open_at;      /* wall time an attempt that has not ended (yet) started; 0: none */
    int failed;          /* the run gave up on it (STAGE_FAILED, but not one continued in a
                          * fresh process, or a failure not retried) and no attempt
                          * started since */
    int has_loss, has_tokens_per_s;
    double loss_at, tokens_per_s_at; /* wall times of the records they came from */
    double loss;                     /* the last loss journaled (has_loss) */
    double tokens_per_s;             /* at completion (has_tokens_per_s) */
} run_stage_state;

typedef struct run_state {
    int started, completed;
    size_t n_stages; /* stages seen in the journal (index + 1 of the highest) */
    run_stage_state stage[RUN_MAX_STAGES];
    uint32_t total_failures;
    uint32_t total_restarts;
    uint32_t total_recoveries; /* RECOVERED records */
    uint32_t failed_stage;     /* index + 1 of the stage the run gave up on, else 0 */
    double started_at;
} run_state;

void run_state_replay(run_state *s, Baton__JournalRecord *const *v, size_t n);

#endif
