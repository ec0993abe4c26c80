/* The wire format of the rendezvous store that `baton run` serves to the workers of a
 * Slurm run (orchestrator/launch/kv_store.c serves it, worker/comm/comm_store_tcp.c asks
 * it), so that ranks on different hosts rendezvous without a shared filesystem.
 *
 * One TCP connection per client carries requests and answers in turn. All integers are
 * 32-bit, network byte order.
 *   request: op (KV_OP_SET, KV_OP_GET or KV_OP_AUTH), token length, key length, value
 *            length (0 for a get; both 0 for an auth), then the token, the key and the
 *            value bytes.
 * A client sends KV_OP_AUTH right after it connects, so that the server counts it as
 * the run's at once (it caps and times out connections that have not shown the token).
 *   answer:  status (KV_*), value length, then the value (a get that found the key).
 * The token is the run's control secret: a request with another token is answered
 * KV_DENIED and the connection closed. A key is its bytes, compared whole (a NUL is one
 * like any other). A key is set once (KV_EXISTS after that); a get
 * of a key not set yet answers KV_MISSING at once: the client polls until its timeout. */
#ifndef BATON_KV_WIRE_H
#define BATON_KV_WIRE_H

#define KV_OP_SET  1u
#define KV_OP_GET  2u
#define KV_OP_AUTH 3u /* no key, no value: shows the token (answered KV_OK) */

#define KV_OK      0u
#define KV_EXISTS  1u
#define KV_MISSING 2u
#define KV_DENIED  3u
#define KV_BAD     4u /* a malformed request: the connection is closed */

#define KV_MAX_TOKEN 256u
#define KV_MAX_KEY   1024u
#define KV_MAX_VALUE (1u << 20)

/* The environment variable that gives a worker the store's "host:port". */
#define KV_ENV_ADDRESS "BATON_STORE_ADDRESS"

#endif
