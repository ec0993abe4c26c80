/* The Gloo backend: an extern "C" shim over Gloo's TCP transport (Debian's libgloo,
 * git 2022-05-18).
 *
 * Rules this file keeps:
 *  - No exception crosses into C: every entry point runs its body in guarded(), which
 *    turns a gloo::IoException, a store failure or anything else into a BT_ code and a
 *    message on the comm, aborts the group (closes its connections, so that peers
 *    blocked on this rank fail now rather than at their timeout) and leaves the comm
 *    failed.
 *  - Every wait is bounded by the group's timeout: Gloo's collectives take it as their
 *    option, our own waits pass it to waitRecv/waitSend, the rendezvous store gets it.
 *  - A peer's death fails the operation at once, not at the timeout: each group has a
 *    watchdog (see Watch) that aborts the waits of the operation in flight when any of
 *    the group's connections fails. Every buffer an operation sends from is ours and
 *    registered with it (Gloo's collectives get theirs through the options); receives
 *    Gloo interrupts itself.
 *  - A process's groups share one TCP device (one event-loop thread) and one store;
 *    each group has its own Gloo context (its own connections), rendezvoused under its
 *    own prefix (PrefixStore over the shared store).
 *  - Slots: Gloo's collectives use top-byte prefixes 0x01-0x08; point-to-point uses
 *    0x40 (| tag), the reduce-scatter ring 0x41, the failure probe 0x42, the
 *    watchdog's sentinel 0x43 and the barrier 0x44, so they never meet.
 *  - Reduce-scatter is ours (this Gloo has no options-style one): a ring over unbound
 *    buffers, size-1 steps, chunk r ending on rank r; the group keeps one chunk of
 *    scratch (two for in place), grown on first use and kept. The
 *    barrier is ours too (a dissemination barrier), so that its buffers are registered.
 *  - Byte counters follow the algorithm each op runs (Gloo's ring allreduce with its
 *    segmenting, its ring allgather and binomial broadcast, our ring), payload only. */
#include "comm_gloo.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

namespace {

using Millis = std::chrono::milliseconds;
using UBuf = gloo::transport::UnboundBuffer;

constexpr uint64_t kSlotP2P = 0x40ull << 56;
constexpr uint64_t kSlotRing = 0x41ull << 56;
constexpr uint64_t kSlotProbe = 0x42ull << 56;
constexpr uint64_t kSlotSentinel = 0x43ull << 56;
constexpr uint64_t kSlotBarrier = 0x44ull << 56;
constexpr uint64_t kSlotTree = 0x45ull << 56;
/* How long the watchdog's sentinel waits: for ever, in practice (a Gloo wait that times
 * out tears its whole group down). */
constexpr Millis kForever = Millis(10LL * 365 * 24 * 3600 * 1000);

/* A classified failure raised inside an operation. peer: the group rank involved, or
 * -1 when not known; aborted: a wait the watchdog interrupted (its reason is better). */
struct Failure : std::runtime_error {
    Failure(int code, comm_fault fault, const std::string &msg, int peer = -1, bool aborted = false)
        : std::runtime_error(msg), code(code), fault(fault), peer(peer), aborted(aborted) {}
    int code;
    comm_fault fault;
    int peer;
    bool aborted;
};

/* The C store seen by Gloo. Gloo waits for a key and then gets it: fetched values are
 * kept so that the get does not read the store again. */
class CStore : public gloo::rendezvous::Store {
  public:
    CStore(const comm_store &s, int timeout_ms) : s_(s), timeout_ms_(timeout_ms) {}

    void set(const std::string &key, const std::vector<char> &data) override {
        bt_diag d;
        bt_diag_init(&d);
        int rc = s_.set(s_.ctx, key.c_str(), data.data(), data.size(), &d);
        if (rc < 0) throw Failure(rc, COMM_FAULT_STORE, d.msg);
    }
    std::vector<char> get(const std::string &key) override {
        return fetch(key, timeout_ms_);
    }
    void wait(const std::vector<std::string> &keys) override {
        wait(keys, Millis(timeout_ms_));
    }
    void wait(const std::vector<std::string> &keys, const Millis &timeout) override {
        for (const auto &k : keys)
            fetch(k, (int)timeout.count());
    }

  private:
    /* Gloo's keys are "<rank>" and "rank_<rank>" (group ranks); a missing one names the
     * peer that did not join. */
    static int key_rank(const std::string &key) {
        size_t p = key.find_last_of('/');
        std::string tail = key.substr(p == std::string::npos ? 0 : p + 1);
        if (tail.rfind("rank_", 0) == 0) tail = tail.substr(5);
        if (tail.empty() || tail.find_first_not_of("0123456789") != std::string::npos) return -1;
        return std::stoi(tail);
    }
    std::vector<char> fetch(const std::string &key, int timeout_ms) {
        auto it = seen_.find(key);
        if (it != seen_.end()) return it->second;
        void *val = nullptr;
        size_t len = 0;
        bt_diag d;
        bt_diag_init(&d);
        int rc = s_.get(s_.ctx, key.c_str(), &val, &len, timeout_ms, &d);
        if (rc == BT_ENOENT)
            throw Failure(BT_EIO, COMM_FAULT_TIMEOUT, std::string("did not join: ") + d.msg,
                          key_rank(key));
        if (rc < 0) throw Failure(rc, COMM_FAULT_STORE, d.msg);
        std::vector<char> v(static_cast<char *>(val), static_cast<char *>(val) + len);
        free(val);
        return seen_[key] = v;
    }
    comm_store s_;
    int timeout_ms_;
    std::map<std::string, std::vector<char>> seen_;
};

/* State shared by all groups of a process: the store and the TCP device. */
struct Root {
    comm_store store{};
    std::shared_ptr<gloo::transport::Device> device;
    ~Root() {
        if (store.close) store.close(store.ctx);
    }
};

/* Gloo tells a pair's failure to the receives pending on that pair, but not to an
 * unbound-buffer send already queued for transmission (tcp::Pair::signalException walks
 * its transmit queue for bound buffers only): a rank sending to a peer that just died
 * would wait out its whole timeout. So each group keeps a sentinel, an empty receive
 * posted to every peer on a slot of its own, and a thread blocked on it. When any of the
 * group's pairs fails, the sentinel's wait throws; the thread records why and then keeps
 * aborting the waits of the operation in flight, whose buffers it registers (see
 * Inflight), until the operation has returned.
 * A member that destroys the group in order first sends a one-byte goodbye on that slot
 * (say_goodbye): it completes the peers' sentinel receive from it (byte i of the
 * sentinel is rank i's), so the close that follows, which would otherwise look like a
 * failure, signals nothing. Only a member that dies, or aborts, closes without one. A
 * goodbye is not sent to a peer that already left: Gloo could not deliver it, and would
 * not report that either (the same unsignalled send as above). */
struct Watch {
    std::mutex m;
    std::condition_variable cv;
    std::vector<UBuf *> inflight; /* guarded by m */
    std::string why;              /* guarded by m; set once, when fired */
    std::vector<bool> departed;   /* guarded by m: peers whose goodbye arrived */
    bool stop = false;            /* guarded by m */
    std::atomic<bool> fired{false};
    std::vector<uint8_t> bye; /* the sentinel's memory: byte i becomes 1 when rank i leaves */
    std::unique_ptr<UBuf> sentinel;
    std::thread thread;
};

void watch_run(Watch *w) {
    std::string why;
    try {
        /* Each completed receive is a peer's goodbye; false: this group is being destroyed.
         * A goodbye's byte is written before its completion is signalled. */
        while (w->sentinel->waitRecv(nullptr, kForever)) {
            std::lock_guard<std::mutex> lock(w->m);
            for (size_t i = 0; i < w->bye.size(); i++)
                if (w->bye[i]) w->departed[i] = true;
        }
        return;
    } catch (const std::exception &e) {
        why = e.what();
    } catch (...) {
        why = "unknown failure";
    }
    std::unique_lock<std::mutex> lock(w->m);
    w->why = why;
    w->fired = true;
    while (!w->stop) {
        for (UBuf *b : w->inflight) {
            b->abortWaitSend();
            b->abortWaitRecv();
        }
        if (w->inflight.empty())
            w->cv.wait(lock, [w] { return w->stop || !w->inflight.empty(); });
        else
            w->cv.wait_for(lock, Millis(2));
    }
}

/* Registers an operation's buffers with the watchdog for the operation's lifetime;
 * declared after the buffers (or the options owning them), so it goes first. */
class Inflight {
  public:
    explicit Inflight(Watch &w) : w_(w) {}
    ~Inflight() {
        std::lock_guard<std::mutex> lock(w_.m);
        w_.inflight.clear();
    }
    UBuf *add(UBuf *b) {
        std::lock_guard<std::mutex> lock(w_.m);
        w_.inflight.push_back(b);
        w_.cv.notify_all();
        return b;
    }
    Inflight(const Inflight &) = delete;
    Inflight &operator=(const Inflight &) = delete;

  private:
    Watch &w_;
};

struct Group {
    std::shared_ptr<Root> root;
    std::shared_ptr<gloo::rendezvous::Context> ctx;
    std::string prefix;
    std::map<uint64_t, uint32_t> splits; /* member-list hash -> groups made from it */
    std::vector<char> scratch;           /* reduce-scatter ring: two chunks; reduce: one */
    bool aborted = false;
    Watch watch;

    /* The watchdog stops before the context (its sentinel lives in it) goes. */
    ~Group() {
        if (watch.thread.joinable()) {
            {
                std::lock_guard<std::mutex> lock(watch.m);
                watch.stop = true;
            }
            watch.sentinel->abortWaitRecv();
            watch.cv.notify_all();
            watch.thread.join();
        }
        watch.sentinel.reset();
        ctx.reset();
    }
};

/* Tells every peer that this rank leaves the group in order (see Watch), unless the
 * group already failed. Bounded by the timeout; a peer that is gone is ignored. */
void say_goodbye(Group &g, Millis timeout) {
    if (!g.ctx || g.aborted || g.watch.fired || g.ctx->size == 1) return;
    static const uint8_t kBye = 1;
    std::vector<int> to;
    {
        std::lock_guard<std::mutex> lock(g.watch.m);
        for (int i = 0; i < g.ctx->size; i++)
            if (i != g.ctx->rank && !g.watch.departed[i]) to.push_back(i);
    }
    std::vector<std::unique_ptr<UBuf>> sent;
    for (int i : to) {
        try { /* one by one: a peer that just left refuses, the others still hear */
            auto b = g.ctx->createUnboundBuffer(const_cast<uint8_t *>(&kBye), 1);
            b->send(i, kSlotSentinel, 0, 1);
            sent.push_back(std::move(b));
        } catch (...) {
        }
    }
    /* Normally written at once; a peer that closed just now could hold it until the
     * timeout, so this wait is short. */
    try {
        for (auto &b : sent)
            b->waitSend(std::min(timeout, Millis(1000)));
    } catch (...) {
        /* Leaving anyway: that peer will see a closed connection. */
    }
}

/* Starts g's watchdog (groups of one have nothing to watch). */
void watch_start(Group &g) {
    if (g.ctx->size == 1) return;
    g.watch.bye.assign(g.ctx->size, 0);
    g.watch.departed.assign(g.ctx->size, false);
    g.watch.sentinel = g.ctx->createUnboundBuffer(g.watch.bye.data(), g.watch.bye.size());
    for (int i = 0; i < g.ctx->size; i++)
        if (i != g.ctx->rank) g.watch.sentinel->recv(i, kSlotSentinel, i, 1);
    g.watch.thread = std::thread(watch_run, &g.watch);
}

Group &group_of(comm *c) {
    return *static_cast<Group *>(c->impl);
}

/* ---- failure reporting ----------------------------------------------------------- */

/* Gloo prefixes messages with "[file:line] "; the reader wants the rest. */
std::string strip_location(const std::string &what) {
    if (what.empty() || what[0] != '[') return what;
    size_t p = what.find("] ");
    return p == std::string::npos ? what : what.substr(p + 2);
}

comm_fault classify(const std::string &what) {
    if (what.find("imed out") != std::string::npos ||
        what.find("Application timeout") != std::string::npos ||
        what.find("Connect timeout") != std::string::npos)
        return COMM_FAULT_TIMEOUT;
    if (what.find("losed") != std::string::npos || what.find("reset") != std::string::npos ||
        what.find("Read error") != std::string::npos ||
        what.find("Write error") != std::string::npos ||
        what.find("Broken pipe") != std::string::npos)
        return COMM_FAULT_PEER_LOST;
    return COMM_FAULT_INTERNAL;
}

/* The peers whose connection is broken, found by offering each an empty message: a
 * pair that saw its peer fail refuses it. Used when a connection failed (Gloo names
 * the peer only by a socket address); the group is aborted right after, so the probe
 * messages are never matched. Not useful after a timeout, which breaks every pair. */
std::vector<int> broken_peers(Group &g) {
    std::vector<int> out;
    if (!g.ctx || g.aborted) return out;
    uint8_t none = 0;
    std::unique_ptr<UBuf> probe;
    try {
        probe = g.ctx->createUnboundBuffer(&none, 0);
    } catch (...) {
        return out;
    }
    for (int i = 0; i < g.ctx->size; i++) {
        if (i == g.ctx->rank) continue;
        try {
            probe->send(i, kSlotProbe, 0, 0);
        } catch (...) {
            out.push_back(i);
        }
    }
    return out;
}

void abort_group(Group &g) {
    if (g.aborted || !g.ctx) return;
    g.aborted = true;
    try {
        g.ctx->closeConnections();
    } catch (...) {
        /* The connections are being torn down either way. */
    }
}

/* "peer rank 1 (global 5)" or "peer ranks 1 (global 5), 3 (global 7)". */
std::string name_peers(const comm *c, const std::vector<int> &peers) {
    std::string s = peers.size() == 1 ? "peer rank " : "peer ranks ";
    for (size_t i = 0; i < peers.size(); i++) {
        s += (i ? ", " : "") + std::to_string(peers[i]) + " (global " +
             std::to_string(c->members[peers[i]]) + ")";
    }
    return s;
}

/* What went wrong in an operation, before it is reported. */
struct Outcome {
    bool failed = false;
    int code = 0;
    comm_fault fault = COMM_FAULT_NONE;
    int peer = -1;
    std::string what;
};

int report(comm *c, const char *op, const Outcome &o, const std::string &hint) {
    Group &g = group_of(c);
    std::string text = strip_location(o.what);
    if (text.empty()) text = "failed (Gloo gave no reason)"; /* never an empty cause */
    std::vector<int> peers;
    if (o.peer >= 0)
        peers.push_back(o.peer);
    else if (o.fault == COMM_FAULT_PEER_LOST)
        peers = broken_peers(g);
    abort_group(g);
    if (!peers.empty() && peers.size() < (size_t)c->size - 1)
        return comm_fail(c, o.code, o.fault, op, "%s: %s", name_peers(c, peers).c_str(),
                         text.c_str());
    return comm_fail(c, o.code, o.fault, op, "%s%s", text.c_str(), hint.c_str());
}

/* Runs body(group) and turns whatever it throws into a return code; a failure the
 * watchdog saw (now or before this operation) wins over an interrupted wait. hint is
 * appended to messages that name no peer. */
template <typename F> int guarded(comm *c, const char *op, const std::string &hint, F &&body) {
    Group &g = group_of(c);
    Outcome o;
    bool aborted = false;
    if (!g.watch.fired) {
        try {
            body(g);
        } catch (const Failure &e) {
            o = {true, e.code, e.fault, e.peer, e.what()};
            aborted = e.aborted;
        } catch (const std::bad_alloc &) {
            o = {true, BT_ENOMEM, COMM_FAULT_INTERNAL, -1, "out of memory"};
        } catch (const std::exception &e) {
            o = {true, BT_EIO, classify(e.what()), -1, e.what()};
        } catch (...) {
            o = {true, BT_EINTERNAL, COMM_FAULT_INTERNAL, -1, "unknown exception"};
        }
    }
    if (g.watch.fired && (!o.failed || aborted)) {
        std::lock_guard<std::mutex> lock(g.watch.m);
        o = {true, BT_EIO, classify(g.watch.why), -1, g.watch.why};
    }
    return o.failed ? report(c, op, o, hint) : 0;
}

std::string ring_hint(const comm *c) {
    int l = (c->rank + c->size - 1) % c->size, r = (c->rank + 1) % c->size;
    return " (ring neighbours: ranks " + std::to_string(l) + " and " + std::to_string(r) + ")";
}

/* Waits for one side of an unbound-buffer transfer with peer, naming the peer on
 * failure. */
void wait_for(UBuf *b, bool recv, int peer, Millis timeout) {
    bool done;
    try {
        done = recv ? b->waitRecv(timeout) : b->waitSend(timeout);
    } catch (const std::exception &e) {
        throw Failure(BT_EIO, classify(e.what()), strip_location(e.what()), peer);
    }
    if (!done) throw Failure(BT_EIO, COMM_FAULT_PEER_LOST, "transfer aborted", peer, true);
}

/* One side of a point-to-point transfer on an unbound buffer. */
struct Transfer {
    bool recv;
    int peer;
    UBuf *buf;
    uint64_t slot;
    size_t offset;
    size_t bytes;
};

/* Posts the receives, then the sends, then waits for each, with the buffers registered
 * with the watchdog. */
void exchange(Group &g, const std::vector<Transfer> &ts, Millis timeout) {
    Inflight reg(g.watch);
    for (const Transfer &t : ts)
        reg.add(t.buf);
    for (const Transfer &t : ts)
        if (t.recv) t.buf->recv(t.peer, t.slot, t.offset, t.bytes);
    for (const Transfer &t : ts)
        if (!t.recv) t.buf->send(t.peer, t.slot, t.offset, t.bytes);
    for (const Transfer &t : ts)
        wait_for(t.buf, t.recv, t.peer, timeout);
}

/* ---- reductions ------------------------------------------------------------------ */

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

template <typename T> void reduce_sum(void *c, const void *a, const void *b, size_t n) {
    T *o = static_cast<T *>(c);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++)
        o[i] = x[i] + y[i];
}

template <typename T> void reduce_max(void *c, const void *a, const void *b, size_t n) {
    T *o = static_cast<T *>(c);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    for (size_t i = 0; i < n; i++)
        o[i] = y[i] > x[i] ? y[i] : x[i];
}

template <typename T> ReduceFn reduce_fn(comm_redop op) {
    return op == COMM_MAX ? &reduce_max<T> : &reduce_sum<T>;
}

/* Calls f with a null pointer of the element type of dtype (for template dispatch). */
template <typename F> void with_type(comm_dtype dtype, F &&f) {
    switch (dtype) {
    case COMM_F32:
        f(static_cast<float *>(nullptr));
        break;
    case COMM_F64:
        f(static_cast<double *>(nullptr));
        break;
    case COMM_BYTE:
        f(static_cast<uint8_t *>(nullptr));
        break;
    }
}

/* ---- byte accounting ------------------------------------------------------------- */

/* Payload bytes this rank sends in Gloo's ring allreduce of total bytes: its segment
 * schedule, replayed (gloo/allreduce.cc: numSegments - numSegmentsPerRank sends in each
 * of the reduce-scatter and allgather phases, clipped at the end of the buffer). The
 * sum over ranks is the textbook 2 (size - 1) total; the share of each rank depends on
 * where the buffer's end falls. */
uint64_t ring_allreduce_bytes(int rank, int size, size_t total, size_t es) {
    if (size == 1) return 0;
    const size_t w = (size_t)size;
    const size_t max_seg = es * (gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize / es);
    const size_t seg = gloo::roundUp(std::min((total + (w * 2 - 1)) / (w * 2), max_seg), es);
    const size_t nseg = gloo::roundUp(std::max((total + seg - 1) / seg, w * 2), w);
    const size_t per = nseg / w;
    uint64_t bytes = 0;
    for (size_t phase = 0; phase < 2; phase++) {
        for (size_t i = 0; i < nseg - per; i++) {
            size_t first = phase == 0 ? ((size_t)rank + 1) * per : (size_t)rank * per;
            size_t off = ((first + i) * seg) % (nseg * seg);
            if (off < total) bytes += std::min(seg, total - off);
        }
    }
    return bytes;
}

/* Gloo's binomial broadcast: bytes times the number of children of this rank. */
uint64_t broadcast_bytes(int rank, int size, int root, size_t bytes) {
    const size_t vsize = (size_t)size, vrank = ((size_t)rank + vsize - (size_t)root) % vsize;
    const uint32_t dim = gloo::log2ceil((uint32_t)size);
    size_t mask = ((size_t)1 << dim) - 1, sends = 0;
    for (uint32_t i = 0; i < dim; i++) {
        mask ^= (size_t)1 << i;
        if ((vrank & mask) != 0) continue;
        size_t vpeer = vrank ^ ((size_t)1 << i);
        if (vpeer < vsize && (vrank & ((size_t)1 << i)) == 0) sends++;
    }
    return sends * bytes;
}

/* ---- operations ------------------------------------------------------------------ */

Millis timeout_of(const comm *c) {
    return Millis(c->timeout_ms);
}

/* An unbound buffer over caller memory (Gloo never writes through a buffer it only
 * sends from, so const input is safe to wrap). */
std::unique_ptr<UBuf> wrap(Group &g, const void *p, size_t bytes) {
    static const uint8_t kEmpty = 0; /* Gloo wants a real pointer even for 0 bytes */
    return g.ctx->createUnboundBuffer(const_cast<void *>(p ? p : &kEmpty), bytes);
}

template <typename T>
void run_allreduce(Group &g, const void *in, void *out, size_t count, comm_redop op,
                   Millis timeout) {
    gloo::AllreduceOptions o(g.ctx);
    Inflight reg(g.watch);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    if (in != out) {
        auto b = wrap(g, in, count * sizeof(T));
        reg.add(b.get());
        o.setInput<T>(std::move(b));
    }
    auto b = wrap(g, out, count * sizeof(T));
    reg.add(b.get());
    o.setOutput<T>(std::move(b));
    o.setReduceFunction(reduce_fn<T>(op));
    o.setTimeout(timeout);
    gloo::allreduce(o);
}

int gloo_allreduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                   comm_redop op, void *) {
    return guarded(c, "allreduce", ring_hint(c), [&](Group &g) {
        with_type(dtype, [&](auto *t) {
            using T = std::remove_pointer_t<decltype(t)>;
            run_allreduce<T>(g, in, out, count, op, timeout_of(c));
        });
        c->bytes_sent += ring_allreduce_bytes(c->rank, c->size, count * comm_dtype_size(dtype),
                                              comm_dtype_size(dtype));
    });
}

/* Ring reduce-scatter: at step s (0..size-2) rank r receives from r-1 the partial sum
 * of chunk r-s-2, adds its own, and passes it on; step 0 sends the own chunk r-1. The
 * last step adds into out, so chunk r holds all ranks' contributions in ring order.
 * Steps receive alternately into two chunk buffers: out and one scratch chunk, arranged
 * so that the last step lands in out, or two scratch chunks when out lies inside in
 * (in place: out is the own chunk, read only at the last step). */
template <typename T>
void run_reduce_scatter(Group &g, const T *in, T *out, size_t count, comm_redop op,
                        Millis timeout) {
    const int w = g.ctx->size, r = g.ctx->rank;
    const size_t bytes = count * sizeof(T);
    const uintptr_t o = (uintptr_t)out, i0 = (uintptr_t)in;
    const bool overlap = o + bytes > i0 && o < i0 + (size_t)w * bytes;
    const size_t scratch = (overlap ? 2 : 1) * bytes;
    if (g.scratch.size() < scratch) g.scratch.resize(scratch);
    T *s0 = reinterpret_cast<T *>(g.scratch.data());
    T *buf[2] = {s0, s0 + count};
    if (!overlap) {
        buf[(w - 2) & 1] = out;
        buf[(w - 1) & 1] = s0;
    }
    std::unique_ptr<UBuf> input = wrap(g, in, w * bytes);
    std::unique_ptr<UBuf> ub[2] = {wrap(g, buf[0], bytes), wrap(g, buf[1], bytes)};
    const int left = (r + w - 1) % w, right = (r + 1) % w;
    auto chunk = [w](int i) { return (size_t)(((i % w) + w) % w); };
    const ReduceFn fn = reduce_fn<T>(op);
    UBuf *src = input.get();
    size_t src_off = chunk(r - 1) * bytes;
    for (int s = 0; s < w - 1; s++) {
        UBuf *dst = ub[s & 1].get();
        exchange(g,
                 {{true, left, dst, kSlotRing, 0, bytes},
                  {false, right, src, kSlotRing, src_off, bytes}},
                 timeout);
        const T *own = in + chunk(r - s - 2) * count;
        fn(s == w - 2 ? out : buf[s & 1], buf[s & 1], own, count);
        src = dst;
        src_off = 0;
    }
}

int gloo_reduce_scatter(comm *c, const void *in, void *out, size_t count, comm_dtype dtype,
                        comm_redop op, void *) {
    return guarded(c, "reduce-scatter", ring_hint(c), [&](Group &g) {
        const size_t es = comm_dtype_size(dtype);
        if (c->size == 1) {
            memmove(out, in, count * es);
            return;
        }
        with_type(dtype, [&](auto *t) {
            using T = std::remove_pointer_t<decltype(t)>;
            run_reduce_scatter<T>(g, static_cast<const T *>(in), static_cast<T *>(out), count, op,
                                  timeout_of(c));
        });
        c->bytes_sent += (uint64_t)(c->size - 1) * count * es;
    });
}

/* Binomial-tree reduce to root, over ranks renumbered v = (rank - root) mod size: in round
 * i (bit i) a rank whose lowest set bit is i sends its partial result to v - 2^i and is
 * done; a rank with bits 0..i clear receives from v + 2^i (when there is one) and adds it
 * to its own, in that order. out is the running partial result on every rank. Each rank
 * but the root sends count elements once. */
template <typename T>
void run_reduce(Group &g, const T *in, T *out, size_t count, comm_redop op, int root,
                Millis timeout) {
    const int w = g.ctx->size, v = (g.ctx->rank - root + w) % w;
    const size_t bytes = count * sizeof(T);
    if (in != out) memmove(out, in, bytes);
    if (g.scratch.size() < bytes) g.scratch.resize(bytes);
    T *tmp = reinterpret_cast<T *>(g.scratch.data());
    std::unique_ptr<UBuf> acc = wrap(g, out, bytes), part = wrap(g, tmp, bytes);
    const ReduceFn fn = reduce_fn<T>(op);
    for (int bit = 1; bit < w; bit <<= 1) {
        const uint64_t slot = kSlotTree | (uint64_t)bit;
        if (v & bit) {
            exchange(g, {{false, (v - bit + root) % w, acc.get(), slot, 0, bytes}}, timeout);
            return;
        }
        if (v + bit >= w) continue;
        exchange(g, {{true, (v + bit + root) % w, part.get(), slot, 0, bytes}}, timeout);
        fn(out, out, tmp, count);
    }
}

int gloo_reduce(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, comm_redop op,
                int root, void *) {
    return guarded(c, "reduce", " (root " + std::to_string(root) + ")", [&](Group &g) {
        const size_t es = comm_dtype_size(dtype);
        with_type(dtype, [&](auto *t) {
            using T = std::remove_pointer_t<decltype(t)>;
            run_reduce<T>(g, static_cast<const T *>(in), static_cast<T *>(out), count, op, root,
                          timeout_of(c));
        });
        if (c->rank != root) c->bytes_sent += count * es;
    });
}

int gloo_allgather(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *) {
    return guarded(c, "allgather", ring_hint(c), [&](Group &g) {
        const size_t es = comm_dtype_size(dtype), bytes = count * es;
        gloo::AllgatherOptions o(g.ctx);
        Inflight reg(g.watch);
        /* In place when in is already this rank's block of out. */
        if (in != static_cast<uint8_t *>(out) + (size_t)c->rank * bytes) {
            auto b = wrap(g, in, bytes);
            reg.add(b.get());
            o.setInput<uint8_t>(std::move(b));
        }
        auto b = wrap(g, out, (size_t)c->size * bytes);
        reg.add(b.get());
        o.setOutput<uint8_t>(std::move(b));
        o.setTimeout(timeout_of(c));
        gloo::allgather(o);
        c->bytes_sent += (uint64_t)(c->size - 1) * bytes;
    });
}

int gloo_alltoall(comm *c, const void *in, void *out, size_t count, comm_dtype dtype, void *) {
    return guarded(c, "alltoall", "", [&](Group &g) {
        const size_t es = comm_dtype_size(dtype), n = (size_t)c->size * count * es;
        gloo::AlltoallOptions o(g.ctx);
        Inflight reg(g.watch);
        auto bi = wrap(g, in, n), bo = wrap(g, out, n);
        reg.add(bi.get());
        reg.add(bo.get());
        o.setInput<uint8_t>(std::move(bi));
        o.setOutput<uint8_t>(std::move(bo));
        o.setTimeout(timeout_of(c));
        gloo::alltoall(o);
        c->bytes_sent += (uint64_t)(c->size - 1) * count * es;
    });
}

int gloo_alltoallv(comm *c, const void *in, const size_t *send_counts, void *out,
                   const size_t *recv_counts, comm_dtype dtype, void *) {
    return guarded(c, "alltoallv", "", [&](Group &g) {
        const int64_t es = (int64_t)comm_dtype_size(dtype);
        std::vector<int64_t> sc(c->size), rc(c->size);
        int64_t nin = 0, nout = 0;
        uint64_t sent = 0;
        for (int i = 0; i < c->size; i++) {
            sc[i] = (int64_t)send_counts[i] * es;
            rc[i] = (int64_t)recv_counts[i] * es;
            nin += sc[i];
            nout += rc[i];
            if (i != c->rank) sent += (uint64_t)sc[i];
        }
        gloo::AlltoallvOptions o(g.ctx);
        Inflight reg(g.watch);
        auto bi = wrap(g, in, (size_t)nin), bo = wrap(g, out, (size_t)nout);
        reg.add(bi.get());
        reg.add(bo.get());
        o.setInput<uint8_t>(std::move(bi), sc);
        o.setOutput<uint8_t>(std::move(bo), rc);
        o.setTimeout(timeout_of(c));
        gloo::alltoallv(o);
        c->bytes_sent += sent;
    });
}

int gloo_broadcast(comm *c, void *buf, size_t count, comm_dtype dtype, int root, void *) {
    return guarded(c, "broadcast", " (root " + std::to_string(root) + ")", [&](Group &g) {
        const size_t bytes = count * comm_dtype_size(dtype);
        gloo::BroadcastOptions o(g.ctx);
        Inflight reg(g.watch);
        auto b = wrap(g, buf, bytes);
        reg.add(b.get());
        o.setOutput<uint8_t>(std::move(b));
        o.setRoot(root);
        o.setTimeout(timeout_of(c));
        gloo::broadcast(o);
        c->bytes_sent += broadcast_bytes(c->rank, c->size, root, bytes);
    });
}

/* Dissemination barrier: in round d (1, 2, 4, ...) rank r hears from r-d and tells r+d. */
int gloo_barrier(comm *c, void *) {
    return guarded(c, "barrier", "", [&](Group &g) {
        const int w = c->size, r = c->rank;
        for (int d = 1; d < w; d <<= 1) {
            auto in = wrap(g, nullptr, 0), out = wrap(g, nullptr, 0);
            const uint64_t slot = kSlotBarrier | (uint64_t)d;
            exchange(g,
                     {{true, (r + w - d) % w, in.get(), slot, 0, 0},
                      {false, (r + d) % w, out.get(), slot, 0, 0}},
                     timeout_of(c));
        }
    });
}

/* The batch as given: receives posted first, then sends, then all waited for. */
int gloo_p2p(comm *c, const comm_p2p_op *ops, int n, void *) {
    const char *op = n == 1 ? (ops[0].kind == COMM_SEND ? "send" : "recv") : "p2p";
    return guarded(c, op, "", [&](Group &g) {
        std::vector<std::unique_ptr<UBuf>> bufs(n);
        std::vector<Transfer> ts(n);
        uint64_t sent = 0;
        for (int i = 0; i < n; i++) {
            const comm_p2p_op &o = ops[i];
            const size_t bytes = o.count * comm_dtype_size(o.dtype);
            bufs[i] = wrap(g, o.buf, bytes);
            ts[i] = {o.kind == COMM_RECV, o.peer, bufs[i].get(), kSlotP2P | o.tag, 0, bytes};
            if (o.kind == COMM_SEND) sent += bytes;
        }
        exchange(g, ts, timeout_of(c));
        c->bytes_sent += sent;
    });
}

int gloo_wait(comm *, void *) {
    return 0; /* operations completed when they returned */
}

void gloo_abort(comm *c) {
    abort_group(group_of(c));
}

void gloo_destroy(comm *c) {
    say_goodbye(group_of(c), timeout_of(c));
    delete static_cast<Group *>(c->impl);
    c->impl = nullptr;
}

/* Creates g's context and connects it to every member through the store. */
void connect_group(Group &g, int rank, int size, int timeout_ms) {
    CStore base(g.root->store, timeout_ms);
    gloo::rendezvous::PrefixStore store(g.prefix, base);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(Millis(timeout_ms));
    ctx->connectFullMesh(store, g.root->device);
    g.ctx = ctx;
    watch_start(g);
}

int gloo_split(comm *c, const int *parent_ranks, int n, const char *name, comm **out);

/* The table, filled by name. */
comm_ops gloo_ops() {
    comm_ops o{};
    o.name = "gloo";
    o.streams = 0;
    o.allreduce = gloo_allreduce;
    o.reduce = gloo_reduce;
    o.reduce_scatter = gloo_reduce_scatter;
    o.allgather = gloo_allgather;
    o.alltoall = gloo_alltoall;
    o.alltoallv = gloo_alltoallv;
    o.broadcast = gloo_broadcast;
    o.barrier = gloo_barrier;
    o.p2p = gloo_p2p;
    o.wait = gloo_wait;
    o.split = gloo_split;
    o.abort = gloo_abort;
    o.destroy = gloo_destroy;
    return o;
}

const comm_ops kGlooOps = gloo_ops();

int gloo_split_group(comm *c, const int *parent_ranks, int n, const char *name,
                     const std::string &label, comm **out) {
    return guarded(c, "split", label, [&](Group &g) {
        std::vector<int> global(n);
        const int me = comm_split_members(c, parent_ranks, n, global.data());
        const uint64_t h = comm_members_hash(global.data(), n);
        char key[64];
        snprintf(key, sizeof key, "g%016llx.%d.%u", (unsigned long long)h, n, g.splits[h]++);
        auto sub = std::make_unique<Group>();
        sub->root = g.root;
        sub->prefix = g.prefix + "/" + key;
        try {
            connect_group(*sub, me, n, c->timeout_ms);
        } catch (Failure &f) {
            if (f.peer >= 0) f.peer = parent_ranks[f.peer];
            throw;
        }
        if (comm_create(&kGlooOps, sub.get(), me, n, global.data(), name, c->timeout_ms, out) < 0)
            throw std::bad_alloc();
        sub.release();
    });
}

/* The sub-group's prefix is the parent's plus the hash of its global member list and
 * how many groups this rank made from that list before: members agree on both, and
 * different lists (or repeated splits of one list) never share keys. A parent that failed
 * while the sub-group formed (its watchdog saw a peer die: guarded reports that though
 * the body made the group) fails the split: the sub-group is aborted and freed, *out
 * NULL, the parent's error saying why. */
int gloo_split(comm *c, const int *parent_ranks, int n, const char *name, comm **out) {
    const std::string label = std::string(" (group '") + (name ? name : "?") + "')";
    int rc = gloo_split_group(c, parent_ranks, n, name, label, out);
    if (rc != 0 && *out != nullptr) {
        comm_abort(*out);
        comm_destroy(*out);
        *out = nullptr;
    }
    return rc;
}

void ignore_sigpipe() {
    struct sigaction old;
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPIPE, &sa, nullptr);
    }
}

/* Builds the root and the world group; throws on failure. */
Group *make_world(const comm_bootstrap *bs, comm_store store) {
    auto root = std::make_shared<Root>();
    root->store = store;
    gloo::transport::tcp::attr attr;
    attr.hostname = bs->host ? bs->host : "127.0.0.1";
    root->device = gloo::transport::tcp::CreateDevice(attr);
    auto g = std::make_unique<Group>();
    g->root = root;
    g->prefix = bs->prefix;
    connect_group(*g, bs->rank, bs->size, bs->timeout_ms);
    return g.release();
}

std::string init_message(const Failure &f) {
    std::string who = f.peer >= 0 ? "peer rank " + std::to_string(f.peer) + ": " : "";
    return who + strip_location(f.what());
}

} // namespace

extern "C" int comm_gloo_init(comm **out, const comm_bootstrap *bs, bt_diag *diag) {
    *out = nullptr;
    comm_store store = bs->store;
    int rc = comm_bootstrap_check(bs, diag);
    if (rc == 0 && bs->store_dir != nullptr) {
        if (store.close) store.close(store.ctx);
        rc = comm_store_file(&store, bs->store_dir, diag);
    }
    if (rc < 0) {
        if (store.close) store.close(store.ctx);
        return rc;
    }
    ignore_sigpipe();
    const char *name = bs->name ? bs->name : "world";
    std::string msg;
    Group *g = nullptr;
    try {
        g = make_world(bs, store);
    } catch (const Failure &f) {
        rc = f.code;
        msg = init_message(f);
    } catch (const std::bad_alloc &) {
        rc = BT_ENOMEM;
        msg = "out of memory";
    } catch (const std::exception &e) {
        rc = BT_EIO;
        msg = strip_location(e.what());
    } catch (...) {
        rc = BT_EINTERNAL;
        msg = "unknown exception";
    }
    if (g != nullptr) {
        rc = comm_create(&kGlooOps, g, bs->rank, bs->size, nullptr, name, bs->timeout_ms, out);
        if (rc < 0) {
            delete g;
            msg = "out of memory";
        }
    }
    if (rc < 0 && msg.empty()) msg = "failed (Gloo gave no reason)";
    if (rc < 0)
        bt_diag_set(diag, "comm '%s' rank %d/%d: init (prefix '%s', host %s, timeout %d ms): %s",
                    name, bs->rank, bs->size, bs->prefix, bs->host ? bs->host : "127.0.0.1",
                    bs->timeout_ms, msg.c_str());
    return rc;
}
