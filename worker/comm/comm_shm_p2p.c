/* Point to point through the shared-memory segment (comm_shm.h): a channel per ordered
 * pair of members (comm_shm_impl.h's shm_chan), each a byte stream of messages, a 16-byte
 * header (tag, length) and the payload padded to 16 bytes. A batch (comm_p2p) makes
 * progress on all of its transfers in turn, so a ring exchange cannot deadlock: a send
 * writes what fits of its message into its channel, a receive takes what arrived from its
 * peer. Each side rings the other's bell (a futex word in the member's record) when it
 * moved bytes, and a member with nothing to do sleeps on its own bell.
 *
 * Matching follows comm.h: messages between one pair with one tag in order, tags apart. A
 * message that arrives while no receive of the batch wants it (another tag, or a message
 * the peer sent ahead for a later batch while this one still waits on that peer) is copied
 * into a buffer of its own, which a later receive takes first.
 *
 * A send is complete once its message is in the channel (the receiver may take it after
 * the sender left); one to a peer already lost fails at once. Failures as for rounds: the
 * timeout bounds the time a batch makes no progress and names the peers still pending; a
 * peer that died or left fails the transfers pending with it, after what it had written
 * has been taken; a failure aborts the segment. Early messages are not bounded: a message
 * whose tag is never received stays buffered until the group is destroyed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_shm_impl.h"

enum { HDR = 16, CHUNK = 64 << 10, P2P_SPINS = 200, P2P_SLICE_MS = 20, OPS_ON_STACK = 16 };
enum { MSG_MAGIC = 0x70327062u }; /* "bp2p": a header where the stream says one must be */
enum { PENDING = 0, BOUND, CLAIMED, DONE };

typedef struct msg_hdr {
    uint32_t tag;
    uint32_t magic;
    uint64_t len;
} msg_hdr;

/* A message taken before a receive wanted it. */
typedef struct early_msg {
    struct early_msg *next;
    uint32_t tag;
    int claimed;  /* a receive of the current batch takes it once complete */
    int complete; /* all of its payload arrived */
    uint64_t len;
    unsigned char buf[];
} early_msg;

/* The receiving side of the channel from one peer. */
typedef struct shm_rx {
    early_msg *early; /* in arrival order */
    int active;       /* a message's header was read, its body is still arriving */
    uint64_t len;     /* its payload bytes */
    uint64_t taken;   /* bytes of its body (payload and padding) taken so far */
    unsigned char *dst;
    int op; /* the receive it goes to, or -1: into `to` */
    early_msg *to;
} shm_rx;

typedef struct batch {
    const comm_p2p_op *ops;
    int n;
    unsigned char *state; /* per op: PENDING, BOUND (receive under way), CLAIMED, DONE */
    uint64_t *off;        /* per send: bytes of its message written */
    early_msg **claim;    /* per CLAIMED receive */
    int left;             /* ops not DONE */
} batch;

static uint64_t op_bytes(const comm_p2p_op *o) {
    return (uint64_t)o->count * comm_dtype_size(o->dtype);
}

static uint64_t body_bytes(uint64_t len) {
    return (len + 15) & ~(uint64_t)15;
}

static size_t min_sz(uint64_t a, uint64_t b) {
    return (size_t)(a < b ? a : b);
}

static shm_chan *chan(const comm *c, int src, int dst) {
    const shm_impl *s = shm_of(c);
    size_t i = (size_t)src * (size_t)(c->size - 1) + (size_t)(dst < src ? dst : dst - 1);
    return (shm_chan *)(s->chans + i * (sizeof(shm_chan) + s->ring));
}

static unsigned char *ring_of(shm_chan *ch) {
    return (unsigned char *)(ch + 1);
}

/* Tells member p that one of its channels moved. */
static void ring_bell(comm *c, int p) {
    shm_member *m = &shm_of(c)->head->member[p];
    atomic_fetch_add(&m->bell, 1);
    if (atomic_load(&m->sleeping)) shm_futex_wake(&m->bell);
}

static void finish(batch *b, int i) {
    b->state[i] = DONE;
    b->left--;
}

/* ---- sending ----------------------------------------------------------------------- */

/* Writes what fits of send op i into its channel: 1 if it wrote anything. */
static int push(comm *c, batch *b, int i) {
    const comm_p2p_op *o = &b->ops[i];
    shm_chan *ch = chan(c, c->rank, o->peer);
    unsigned char *ring = ring_of(ch);
    const size_t R = shm_of(c)->ring;
    const uint64_t len = op_bytes(o), total = HDR + body_bytes(len);
    uint64_t tail = atomic_load_explicit(&ch->tail, memory_order_relaxed);
    uint64_t room = R - (tail - atomic_load_explicit(&ch->head, memory_order_acquire));
    if (room == 0) return 0;
    while (b->off[i] < total && room > 0) {
        size_t pos = (size_t)(tail & (R - 1)), n = HDR;
        if (b->off[i] == 0) {
            msg_hdr h = {o->tag, MSG_MAGIC, len};
            memcpy(ring + pos, &h, HDR);
        } else {
            n = min_sz(min_sz(total - b->off[i], room), min_sz(R - pos, CHUNK));
            uint64_t p = b->off[i] - HDR;
            if (p < len) memcpy(ring + pos, (const unsigned char *)o->buf + p, min_sz(n, len - p));
        }
        tail += n, b->off[i] += n, room -= n;
        atomic_store_explicit(&ch->tail, tail, memory_order_release);
        ring_bell(c, o->peer);
    }
    if (b->off[i] == total) finish(b, i);
    return 1;
}

/* Whether op i is the first unfinished op of its kind with its peer: sends go into a
 * channel in the order of the batch (only the first writes), and a peer's channel is
 * pulled once per pass (for its first unfinished receive, on behalf of all). */
static int first_to_peer(const batch *b, int i) {
    for (int j = 0; j < i; j++)
        if (b->ops[j].kind == b->ops[i].kind && b->ops[j].peer == b->ops[i].peer &&
            b->state[j] != DONE)
            return 0;
    return 1;
}

/* ---- receiving --------------------------------------------------------------------- */

/* The first receive of the batch still looking for a message from peer with tag, or -1. */
static int wanting(const batch *b, int peer, uint32_t tag) {
    for (int i = 0; i < b->n; i++) {
        const comm_p2p_op *o = &b->ops[i];
        if (o->kind == COMM_RECV && o->peer == peer && o->tag == tag && b->state[i] == PENDING)
            return i;
    }
    return -1;
}

/* Whether a receive from peer still waits for a message of the channel. */
static int wants_any(const batch *b, int peer) {
    for (int i = 0; i < b->n; i++)
        if (b->ops[i].kind == COMM_RECV && b->ops[i].peer == peer && b->state[i] == PENDING)
            return 1;
    return 0;
}

static int size_mismatch(comm *c, const comm_p2p_op *o, uint64_t len) {
    return comm_fail(c, BT_EIO, COMM_FAULT_INTERNAL, "recv",
                     "message of %llu bytes from peer %d (global %d, tag %u) for a receive of "
                     "%llu bytes",
                     (unsigned long long)len, o->peer, c->members[o->peer], o->tag,
                     (unsigned long long)op_bytes(o));
}

/* Gives the message whose header h was just read its destination: the receive that wants
 * it, or a buffer of its own at the end of the peer's early messages. */
static int bind(comm *c, batch *b, int peer, const msg_hdr *h) {
    shm_rx *rx = &shm_of(c)->rx[peer];
    int i = wanting(b, peer, h->tag);
    rx->active = 1, rx->len = h->len, rx->taken = 0, rx->op = i, rx->to = NULL;
    if (i >= 0) {
        if (h->len != op_bytes(&b->ops[i])) return size_mismatch(c, &b->ops[i], h->len);
        rx->dst = b->ops[i].buf;
        b->state[i] = BOUND;
        return 0;
    }
    if (h->len > SIZE_MAX - sizeof(early_msg))
        return comm_fail(c, BT_EIO, COMM_FAULT_INTERNAL, "recv",
                         "corrupt channel from peer %d (global %d): a message of %llu bytes", peer,
                         c->members[peer], (unsigned long long)h->len);
    early_msg *e = malloc(sizeof *e + (size_t)h->len);
    if (e == NULL) return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "recv", "out of memory");
    *e = (early_msg){.tag = h->tag, .len = h->len};
    early_msg **end = &rx->early;
    while (*end != NULL)
        end = &(*end)->next;
    *end = e;
    rx->to = e, rx->dst = e->buf;
    return 0;
}

static void body_done(shm_rx *rx, batch *b) {
    rx->active = 0;
    if (rx->op >= 0)
        finish(b, rx->op);
    else
        rx->to->complete = 1;
}

/* Takes what arrived from peer: 1 if it took anything, 0, or the error. */
static int pull(comm *c, batch *b, int peer) {
    shm_rx *rx = &shm_of(c)->rx[peer];
    shm_chan *ch = chan(c, peer, c->rank);
    unsigned char *ring = ring_of(ch);
    const size_t R = shm_of(c)->ring;
    uint64_t head = atomic_load_explicit(&ch->head, memory_order_relaxed), start = head;
    const uint64_t tail = atomic_load_explicit(&ch->tail, memory_order_acquire);
    int rc = 0;
    while (rc == 0 && head < tail) {
        if (!rx->active) {
            if (!wants_any(b, peer)) break; /* the rest is for later batches */
            msg_hdr h;
            memcpy(&h, ring + (head & (R - 1)), HDR);
            head += HDR;
            if (h.magic != MSG_MAGIC)
                rc = comm_fail(c, BT_EIO, COMM_FAULT_INTERNAL, "recv",
                               "corrupt channel from peer %d (global %d)", peer, c->members[peer]);
            else
                rc = bind(c, b, peer, &h);
            if (rc == 0 && h.len == 0) body_done(rx, b);
            continue;
        }
        size_t pos = (size_t)(head & (R - 1));
        size_t n = min_sz(min_sz(tail - head, body_bytes(rx->len) - rx->taken), R - pos);
        if (rx->taken < rx->len)
            memcpy(rx->dst + rx->taken, ring + pos, min_sz(n, rx->len - rx->taken));
        head += n, rx->taken += n;
        if (rx->taken == body_bytes(rx->len)) body_done(rx, b);
    }
    if (head != start) {
        atomic_store_explicit(&ch->head, head, memory_order_release);
        ring_bell(c, peer);
    }
    return rc != 0 ? rc : head != start;
}

/* Unlinks e from the peer's early messages and frees it. */
static void drop_early(shm_rx *rx, early_msg *e) {
    early_msg **p = &rx->early;
    while (*p != e)
        p = &(*p)->next;
    *p = e->next;
    free(e);
}

/* Every pending receive takes the first unclaimed early message of its peer and tag. */
static int claim_early(comm *c, batch *b) {
    for (int i = 0; i < b->n; i++) {
        const comm_p2p_op *o = &b->ops[i];
        if (o->kind != COMM_RECV || b->state[i] != PENDING) continue;
        early_msg *e = shm_of(c)->rx[o->peer].early;
        while (e != NULL && (e->claimed || e->tag != o->tag))
            e = e->next;
        if (e == NULL) continue;
        if (e->len != op_bytes(o)) return size_mismatch(c, o, e->len);
        e->claimed = 1, b->claim[i] = e, b->state[i] = CLAIMED;
    }
    return 0;
}

/* Copies the claimed early messages that are complete into their receives. */
static int deliver_early(comm *c, batch *b) {
    int moved = 0;
    for (int i = 0; i < b->n; i++) {
        early_msg *e = b->claim[i];
        if (b->state[i] != CLAIMED || !e->complete) continue;
        if (e->len > 0) memcpy(b->ops[i].buf, e->buf, (size_t)e->len);
        drop_early(&shm_of(c)->rx[b->ops[i].peer], e);
        finish(b, i);
        moved = 1;
    }
    return moved;
}

/* ---- the batch --------------------------------------------------------------------- */

/* One pass over every transfer: 1 if anything moved, 0, or the error. */
static int pass(comm *c, batch *b) {
    int moved = deliver_early(c, b);
    for (int i = 0; i < b->n; i++) {
        const comm_p2p_op *o = &b->ops[i];
        if (b->state[i] == DONE || !first_to_peer(b, i)) continue;
        int rc = o->kind == COMM_SEND ? push(c, b, i) : pull(c, b, o->peer);
        if (rc < 0) return rc;
        moved |= rc;
    }
    return moved | deliver_early(c, b);
}

static const char *op_name(const batch *b) {
    return b->n == 1 ? (b->ops[0].kind == COMM_SEND ? "send" : "recv") : "p2p";
}

/* The peers of the transfers still pending, for messages. */
static void pending_peers(comm *c, const batch *b, char *who, size_t cap) {
    size_t len = 0;
    who[0] = '\0';
    for (int i = 0; i < b->n && len + 32 < cap; i++) {
        int p = b->ops[i].peer, seen = 0;
        for (int j = 0; j < i; j++)
            seen |= b->ops[j].peer == p && b->state[j] != DONE;
        if (b->state[i] == DONE || seen) continue;
        len += (size_t)snprintf(who + len, cap - len, "%s%d (global %d)", len ? ", " : "", p,
                                c->members[p]);
    }
}

/* A lost peer of a pending transfer: fails c naming it, unless one more pass (taking
 * what the peer wrote before it was lost) completes the transfer. 0 when none. */
static int check_peers(comm *c, batch *b) {
    for (int i = 0; i < b->n; i++) {
        if (b->state[i] == DONE) continue;
        int p = b->ops[i].peer;
        const char *why = shm_member_gone(c, p);
        if (why == NULL) continue;
        int rc = pass(c, b);
        if (rc < 0) return rc;
        if (b->state[i] != DONE)
            return comm_fail(c, BT_EIO, COMM_FAULT_PEER_LOST, op_name(b), "peer %d (global %d) %s",
                             p, c->members[p], why);
    }
    return 0;
}

static int fail_aborted(comm *c, const batch *b, uint32_t by) {
    return comm_fail(c, BT_EIO, COMM_FAULT_PEER_LOST, op_name(b),
                     "peer %d (global %d) aborted the group after a failure", (int)by - 1,
                     c->members[by - 1]);
}

/* Before anything moves: a send to a peer already lost (it would fit in the channel, and
 * nobody would take it), or a segment already aborted, fails the batch (naming the lost
 * peer first, as idle does). */
static int check_start(comm *c, const batch *b) {
    for (int i = 0; i < b->n; i++) {
        const char *why = b->ops[i].kind == COMM_SEND ? shm_member_gone(c, b->ops[i].peer) : NULL;
        if (why != NULL)
            return comm_fail(c, BT_EIO, COMM_FAULT_PEER_LOST, op_name(b), "peer %d (global %d) %s",
                             b->ops[i].peer, c->members[b->ops[i].peer], why);
    }
    uint32_t by = atomic_load(&shm_of(c)->head->aborted);
    return by != 0 ? fail_aborted(c, b, by) : 0;
}

/* Nothing moved: checks for failures, then sleeps on this member's bell until it moves
 * (it was bell when the last pass began) or a slice ends. 0 or the error. */
static int idle(comm *c, batch *b, uint32_t bell, double deadline) {
    shm_head *h = shm_of(c)->head;
    shm_member *me = &h->member[c->rank];
    uint32_t by = atomic_load(&h->aborted);
    int rc = check_peers(c, b);
    if (rc != 0 || b->left == 0) return rc;
    if (by != 0) return fail_aborted(c, b, by);
    double left = deadline - shm_now_ms();
    if (left <= 0) {
        char who[512];
        pending_peers(c, b, who, sizeof who);
        return comm_fail(c, BT_EIO, COMM_FAULT_TIMEOUT, op_name(b),
                         "timed out after %d ms waiting for peer(s) %s (hung or stopped)",
                         c->timeout_ms, who);
    }
    atomic_store(&me->sleeping, 1);
    shm_futex_wait(&me->bell, bell, left < P2P_SLICE_MS ? (int)left + 1 : P2P_SLICE_MS);
    atomic_store(&me->sleeping, 0);
    return 0;
}

/* Passes until every transfer is done: spinning a while after the last one that moved
 * anything, then sleeping between passes. The timeout bounds the time without progress
 * (as Gloo gives each transfer its whole timeout): a long message through a small ring
 * under a loaded CPU is not cut short. */
static int run_batch(comm *c, batch *b) {
    shm_member *me = &shm_of(c)->head->member[c->rank];
    double deadline = shm_now_ms() + c->timeout_ms;
    int rc = check_start(c, b), moved_since = 0;
    rc = rc ? rc : claim_early(c, b);
    for (int spins = 0; rc == 0 && b->left > 0;) {
        uint32_t bell = atomic_load(&me->bell);
        int moved = pass(c, b);
        if (moved != 0 || b->left == 0) {
            rc = moved < 0 ? moved : 0;
            spins = 0, moved_since = 1;
        } else if (++spins >= P2P_SPINS) {
            if (moved_since) deadline = shm_now_ms() + c->timeout_ms, moved_since = 0;
            rc = idle(c, b, bell, deadline);
        }
    }
    return rc;
}

int shm_p2p_channels(comm *c, const comm_p2p_op *ops, int n) {
    shm_impl *s = shm_of(c); /* comm.c returned a sticky error before this */
    if (s->rx == NULL && (s->rx = calloc((size_t)c->size, sizeof *s->rx)) == NULL)
        return comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "p2p", "out of memory");
    unsigned char state_s[OPS_ON_STACK];
    uint64_t off_s[OPS_ON_STACK];
    early_msg *claim_s[OPS_ON_STACK];
    batch b = {ops, n, state_s, off_s, claim_s, n};
    if (n > OPS_ON_STACK) {
        b.state = malloc((size_t)n), b.off = malloc((size_t)n * 8);
        b.claim = malloc((size_t)n * sizeof *b.claim);
    }
    int rc = 0;
    if (b.state == NULL || b.off == NULL || b.claim == NULL)
        rc = comm_fail(c, BT_ENOMEM, COMM_FAULT_INTERNAL, "p2p", "out of memory");
    if (rc == 0) {
        memset(b.state, PENDING, (size_t)n);
        memset(b.off, 0, (size_t)n * sizeof *b.off);
        memset(b.claim, 0, (size_t)n * sizeof *b.claim);
        rc = run_batch(c, &b);
    }
    for (int i = 0; rc == 0 && i < n; i++)
        if (ops[i].kind == COMM_SEND) c->bytes_sent += op_bytes(&ops[i]);
    if (n > OPS_ON_STACK) free(b.state), free(b.off), free(b.claim);
    if (rc != 0 && c->fault != COMM_FAULT_USAGE) {
        shm_abort_segment(c);
        comm_abort(s->inner);
    }
    return rc;
}

void shm_p2p_free(comm *c) {
    shm_impl *s = shm_of(c);
    for (int p = 0; s->rx != NULL && p < c->size; p++)
        while (s->rx[p].early != NULL)
            drop_early(&s->rx[p], s->rx[p].early);
    free(s->rx);
    s->rx = NULL;
}
