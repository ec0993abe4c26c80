/* The pipeline's communication queue (pipeline.h), checked without a GPU: pipeline.c runs
 * its 1F1B schedule with the queue on, over a recording group (comm.h's backend side:
 * its sends and receives only record their buffers' accesses on the queue they are given,
 * as NCCL would enqueue them; comm_wait records that the host waited for that queue) and
 * the CPU backend with recording side queues, for a stage whose callbacks record what a
 * model's stage reads and writes on the ops' queue (a forward reads its slot's input and
 * writes its slot's output; a backward reads the gradient of its output and its slot's
 * activations and writes the gradient of its input, in the same buffer). The race
 * detector (race.h) then requires every pair of conflicting accesses to be ordered by the
 * events and host waits pipeline.c makes, and the ops' queue never to wait for the
 * communication queue by an event. Every stage position of pp 4 (first, middle, last)
 * with 1, 3 and 8 micro-batches. No data moves: the numbers of this test are the
 * orderings, not values (the passes also come in stages/pipe_order.h's order, which the
 * planner replays). Removing the event before a transfer, or the host's wait after
 * a batch that receives, is caught; the waits before a forward or backward that would
 * overwrite a buffer still being sent never fire in non-interleaved 1F1B (a receive,
 * waited for, always comes between), so removing them is not. The interleaved schedule
 * (pipe_schedule.h) runs over the same queue for every stage position of pp 4 with 2 chunks
 * and 4 to 9 micro-batches (5, 6, 7 and 9: the larger last group), and 3 chunks and 6
 * micro-batches: its forwards read the slot's input and write its output
 * (except where the model starts or ends), its backwards read the gradient and write it,
 * and take_grad moves a received gradient into it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "cpu_backend.h"
#include "pipe_order.h"
#include "pipeline.h"
#include "pipeline_vp.h"
#include "race.h"

#define COUNT     64 /* floats of one boundary activation */
#define MAX_SLOTS 24 /* activation slots a stage may need here */
#define MAX_GRADS 4  /* received gradients waiting at once */
#define MAX_PASS  64 /* forwards and backwards of a step: 2 K v */

static race X;

/* ---- the recording group: rank `stage` of `stages` ---- */

static int rec_p2p(comm *c, const comm_p2p_op *ops, int n, void *stream) {
    (void)c;
    int q = race_qid(stream);
    race_collective(&X, q);
    for (int i = 0; i < n; i++)
        race_touch(&X, q, ops[i].buf, ops[i].count, ops[i].kind == COMM_RECV);
    if (stream == NULL) race_host_wait(&X, q); /* NULL: complete on return */
    return 0;
}

static const comm_ops recorder = {.name = "recorder",
                                  .streams = 1,
                                  .p2p = rec_p2p,
                                  .wait = race_comm_wait,
                                  .abort = race_comm_nothing,
                                  .destroy = race_comm_nothing};

/* ---- a stage that records its accesses on the ops' queue ---- */

/* v chunks a stage (1: non-interleaved). Every slot's input, every slot's output, the
 * gradient and the received gradients are one race region each (accesses are ranges). */
typedef struct stage {
    int first, last, v;
    float input[MAX_SLOTS][COUNT], output[MAX_SLOTS][COUNT], grad[COUNT];
    float grad_in[MAX_GRADS][COUNT];
    int forwards, backwards;
    pipe_pass order[MAX_PASS]; /* the passes as they ran */
} stage;

static void record(stage *s, int forward, int mb, int chunk) {
    int n = s->forwards + s->backwards;
    if (n < MAX_PASS) s->order[n] = (pipe_pass){forward, (uint32_t)mb, (uint32_t)chunk};
}

/* A chunk's forward reads its input unless it starts the model (the first stage's chunk
 * 0) and writes its output unless it ends it (the last stage's last chunk). */
static int st_forward(void *ctx, int mb, int chunk, int slot) {
    stage *s = ctx;
    if (!(s->first && chunk == 0)) race_touch(&X, 0, s->input[slot], COUNT, 0);
    if (!(s->last && chunk == s->v - 1)) race_touch(&X, 0, s->output[slot], COUNT, 1);
    record(s, 1, mb, chunk);
    s->forwards++;
    return 0;
}

/* A backward reads the gradient of its output (unless it starts from the loss) and its
 * slot's activations, and writes the gradient of its input. */
static int st_backward(void *ctx, int mb, int chunk, int slot) {
    stage *s = ctx;
    if (!(s->last && chunk == s->v - 1)) race_touch(&X, 0, s->grad, COUNT, 0);
    race_touch(&X, 0, s->input[slot], COUNT, 0);
    race_touch(&X, 0, s->grad, COUNT, 1);
    record(s, 0, mb, chunk);
    s->backwards++;
    return 0;
}

static float *st_input(void *ctx, int slot) {
    return ((stage *)ctx)->input[slot];
}

static float *st_output(void *ctx, int slot) {
    return ((stage *)ctx)->output[slot];
}

static float *st_grad(void *ctx) {
    return ((stage *)ctx)->grad;
}

static float *st_grad_in(void *ctx, int i) {
    return ((stage *)ctx)->grad_in[i];
}

static void st_take_grad(void *ctx, int i) {
    stage *s = ctx;
    race_touch(&X, 0, s->grad_in[i], COUNT, 0);
    race_touch(&X, 0, s->grad, COUNT, 1);
}

/* Stage `rank` of `stages` runs K micro-batches of v chunks (1: pipeline_run_1f1b, else
 * pipeline_vp_run) with the communication queue on. */
static void run(int stages, int rank, int K, int v) {
    CHECK(2 * K * v <= MAX_PASS);
    backend be;
    cpu_backend_init(&be);
    race_side_queue_on(&be, &X);
    comm *g = NULL;
    CHECK(comm_create(&recorder, NULL, rank, stages, NULL, "pp", 1000, &g) == 0);
    static stage s;
    memset(&s, 0, sizeof s);
    s.first = rank == 0, s.last = rank == stages - 1, s.v = v;
    bt_diag d;
    bt_diag_init(&d);
    pipe_schedule sched = {0};
    int slots = pipeline_slots(stages, rank, K);
    if (v > 1) {
        CHECK(pipe_schedule_make(stages, rank, K, v, &sched, &d) == 0);
        CHECK(sched.grad_bufs <= (K % stages ? MAX_GRADS : 2)); /* 2 when pp divides K */
        slots = sched.slots;
    }
    CHECK(slots <= MAX_SLOTS);
    race_reset(&X);
    CHECK(race_region(&X, s.input[0], (size_t)MAX_SLOTS * COUNT) == 0);
    CHECK(race_region(&X, s.output[0], (size_t)MAX_SLOTS * COUNT) == 0);
    CHECK(race_region(&X, s.grad, COUNT) == 0);
    CHECK(race_region(&X, s.grad_in[0], (size_t)MAX_GRADS * COUNT) == 0);
    pipeline p;
    pipeline_init(&p, g, COUNT);
    CHECK(pipeline_set_queue(&p, &be, slots, &d) == 0);
    CHECK(p.stream == &race_side_queue); /* the queue is on */
    pipeline_stage st = {.ctx = &s,
                         .forward = st_forward,
                         .backward = st_backward,
                         .input = st_input,
                         .output = st_output,
                         .grad = st_grad,
                         .grad_in = st_grad_in,
                         .take_grad = st_take_grad};
    CHECK((v > 1 ? pipeline_vp_run(&p, &sched, &st, &d) : pipeline_run_1f1b(&p, K, &st, &d)) == 0);
    CHECK(s.forwards == K * v && s.backwards == K * v);
    pipe_pass want[MAX_PASS]; /* the order the planner replays (pipe_order.h) */
    pipe_order((uint32_t)stages, (uint32_t)v, (uint32_t)K, (uint32_t)rank, want);
    for (int i = 0; i < 2 * K * v && i < MAX_PASS; i++)
        CHECK(s.order[i].forward == want[i].forward && s.order[i].mb == want[i].mb &&
              s.order[i].chunk == want[i].chunk);
    CHECK(X.races == 0);
    CHECK(X.disorders == 0);
    CHECK(X.unbounded == 0);
    printf("stage %d of %d, %d micro-batches, %d chunk(s): %d buffer accesses, %d races, %d "
           "transfers out of order, %d waits without a deadline\n",
           rank, stages, K, v, X.accesses, X.races, X.disorders, X.unbounded);
    pipeline_free(&p);
    pipe_schedule_free(&sched);
    comm_destroy(g);
}

int main(void) {
    static const int ks[] = {1, 3, 8};
    for (int rank = 0; rank < 4; rank++)
        for (int i = 0; i < 3; i++)
            run(4, rank, ks[i], 1);
    for (int rank = 0; rank < 4; rank++)
        for (int k = 4; k <= 9; k++) /* 5, 6, 7, 9: pp does not divide them */
            run(4, rank, k, 2);
    for (int rank = 0; rank < 4; rank++)
        run(4, rank, 6, 3);
    return check_status();
}
