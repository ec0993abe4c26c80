/* A remote checkpoint store reached through libcurl: a plain HTTP(S) server that takes
 * PUT and GET (WebDAV style: nginx dav_methods PUT, create_full_put_path), or an
 * S3-compatible one (path-style addressing, requests signed with AWS SigV4 by libcurl).
 * The object of file F of checkpoint N is BASE/N/F, BASE being the URL given for
 * http(s), or ENDPOINT/BUCKET[/PREFIX] for s3://BUCKET[/PREFIX].
 *
 * Every request is tried up to three times, with a short backoff, when the failure is
 * transient (connection, timeout, a transfer cut short, HTTP 408/429/5xx); errors name
 * the method, the URL (its password shown as ***, ckpt_url_shown) and the HTTP status or
 * curl's reason. Credentials for plain HTTP(S): the URL's userinfo, else ~/.netrc's entry
 * for the host (libcurl's netrc, optional). */
#ifndef BATON_CKPT_STORE_REMOTE_H
#define BATON_CKPT_STORE_REMOTE_H

#include <stdint.h>

#include "ckpt/ckpt.h"
#include "ckpt_store_crc.h"

/* The default of --stall-time: seconds without a byte moved before a request fails. */
#define REMOTE_STALL_S 60

typedef struct ckpt_remote {
    char base[CKPT_PATH_MAX]; /* no trailing '/' */
    char sigv4[160];          /* CURLOPT_AWS_SIGV4, "" for plain HTTP */
    char userpwd[1024];       /* access key:secret for SigV4 */
    long max_time_ms;         /* per-request time limit, 0 for none */
    long stall_time_s;        /* a request moving no byte for this long fails, 0 for never */
    int64_t limit_rate;       /* bytes per second, 0 for none */
    int tries;
    const char *prog; /* "baton ckpt push": the retry notes' prefix (NULL: "baton ckpt") */
    void *curl;       /* CURL * */
    void *headers;    /* struct curl_slist *: x-amz-content-sha256 for S3 */
} ckpt_remote;

/* url: http(s)://HOST[:PORT][/PREFIX] or s3://BUCKET[/PREFIX]; endpoint (s3 only, may be
 * NULL: https://s3.REGION.amazonaws.com) is http(s)://HOST[:PORT]. Credentials come
 * from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION (default us-east-1). */
int ckpt_remote_init(ckpt_remote *r, const char *url, const char *endpoint, bt_diag *diag);
void ckpt_remote_free(ckpt_remote *r);
/* url as it may be shown (messages, logs): its whole userinfo replaced by *** ("***@HOST"
 * after the scheme, whatever it held: a user and password, a token; up to the last '@'
 * before the query) and every query value too (?token=***&X-Amz-Signature=***). */
void ckpt_url_shown(const char *url, char *out, size_t cap);
/* Splits URL .../NAME into the store URL and the checkpoint name NAME (into out). */
int ckpt_remote_split(const char *url, char *store, size_t store_cap, char *name, size_t name_cap,
                      bt_diag *diag);
/* Whether the store has object NAME/FILE: 1 when it has (*size its size, or -1 when the
 * answer gives none: a HEAD without Content-Length), 0 when not (404; *size -1), or an
 * error code. */
int ckpt_remote_head(ckpt_remote *r, const char *name, const char *file, int64_t *size,
                     bt_diag *diag);
/* Removes object NAME/FILE; one the store does not have is no error. BT_EUNSUPPORTED
 * (diag: the request and its status) when the store does not take DELETE (HTTP 405, 501)
 * or refuses it (401, 403: these credentials may not delete); *status: the answer's HTTP
 * status (0: none came). */
int ckpt_remote_delete(ckpt_remote *r, const char *name, const char *file, long *status,
                       bt_diag *diag);
/* Uploads path as NAME/FILE; chk (may be NULL) checks the bytes as they are sent. */
int ckpt_remote_put(ckpt_remote *r, const char *name, const char *file, const char *path,
                    ckpt_file_check *chk, bt_diag *diag);
/* Downloads NAME/FILE into path. resume != 0 continues an existing partial path with a
 * Range request (from scratch when the server ignores ranges); else path is rewritten. */
int ckpt_remote_get(ckpt_remote *r, const char *name, const char *file, const char *path,
                    int resume, bt_diag *diag);

#endif
