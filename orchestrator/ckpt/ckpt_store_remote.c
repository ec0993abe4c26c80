/* HEAD, PUT and GET of checkpoint objects through libcurl, with retries. */
#include "ckpt_store_remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_redirect.h"
#include "ckpt_store_fs.h"

#define REMOTE_TRIES      3
#define REMOTE_BACKOFF_MS 200

/* ---- the store's address ---- */

static int is_http(const char *s) {
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

static void strip_slashes(char *s) {
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '/')
        s[--n] = '\0';
}

/* Appends n bytes of p to out (cap, *at used so far), cut short where it is full. */
static void shown_put(char *out, size_t cap, size_t *at, const char *p, size_t n) {
    if (*at + 1 >= cap) return;
    if (n > cap - 1 - *at) n = cap - 1 - *at;
    memcpy(out + *at, p, n);
    *at += n;
    out[*at] = '\0';
}

void ckpt_url_shown(const char *url, char *out, size_t cap) {
    size_t at = 0;
    if (cap == 0) return;
    out[0] = '\0';
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    shown_put(out, cap, &at, url, (size_t)(host - url));
    /* the userinfo, whatever it holds, ends at the last '@' before the query: a '/' in
     * an unencoded password must not end it early (a path with an '@' is hidden too) */
    size_t head = strcspn(host, "?#");
    const char *user_end = NULL;
    for (size_t i = 0; i < head; i++)
        if (host[i] == '@') user_end = host + i;
    if (user_end) {
        shown_put(out, cap, &at, "***", 3);
        host = user_end;
        head = strcspn(host, "?#");
    }
    shown_put(out, cap, &at, host, head);
    /* query values (tokens, presigned signatures) hidden, their names kept */
    for (const char *q = host + head; *q;) {
        size_t name = strcspn(q, "=&#"), value = q[name] == '=' ? strcspn(q + name, "&#") : 0;
        shown_put(out, cap, &at, q, name);
        if (value) shown_put(out, cap, &at, "=***", 4);
        q += name + value;
        if (*q == '#') {
            shown_put(out, cap, &at, q, strlen(q));
            break;
        }
        if (*q) shown_put(out, cap, &at, q++, 1);
    }
}

/* SigV4 credentials and scope from the environment. */
static int remote_s3_auth(ckpt_remote *r, char *region, size_t cap, bt_diag *diag) {
    const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *reg = getenv("AWS_REGION");
    if (reg == NULL || reg[0] == '\0') reg = getenv("AWS_DEFAULT_REGION");
    if (reg == NULL || reg[0] == '\0') reg = "us-east-1";
    if (id == NULL || secret == NULL || id[0] == '\0' || secret[0] == '\0') {
        bt_diag_set(diag, "s3:// needs credentials in AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY");
        return BT_EINVAL;
    }
    if (strchr(reg, ':') || strlen(reg) >= cap) {
        bt_diag_set(diag, "AWS_REGION '%s' is not a region name", reg);
        return BT_EINVAL;
    }
    snprintf(region, cap, "%s", reg);
    snprintf(r->sigv4, sizeof r->sigv4, "aws:amz:%s:s3", reg);
    snprintf(r->userpwd, sizeof r->userpwd, "%s:%s", id, secret);
    return 0;
}

/* s3://BUCKET[/PREFIX] → ENDPOINT/BUCKET[/PREFIX] (path-style addressing). */
static int remote_s3_base(ckpt_remote *r, const char *url, const char *endpoint, bt_diag *diag) {
    char region[64];
    int rc = remote_s3_auth(r, region, sizeof region, diag);
    if (rc < 0) return rc;
    const char *bucket = url + 5;
    if (bucket[0] == '\0' || bucket[0] == '/') {
        bt_diag_set(diag, "%s: no bucket (expected s3://BUCKET[/PREFIX])", url);
        return BT_EINVAL;
    }
    char ep[512];
    if (endpoint)
        snprintf(ep, sizeof ep, "%s", endpoint);
    else
        snprintf(ep, sizeof ep, "https://s3.%s.amazonaws.com", region);
    strip_slashes(ep);
    if (!is_http(ep)) {
        char shown[600];
        ckpt_url_shown(ep, shown, sizeof shown);
        bt_diag_set(diag, "--endpoint %s: expected http://HOST[:PORT] or https://...", shown);
        return BT_EINVAL;
    }
    snprintf(r->base, sizeof r->base, "%s/%s", ep, bucket);
    return 0;
}

int ckpt_remote_init(ckpt_remote *r, const char *url, const char *endpoint, bt_diag *diag) {
    memset(r, 0, sizeof *r);
    r->tries = REMOTE_TRIES;
    r->stall_time_s = REMOTE_STALL_S;
    int rc = 0;
    if (strncmp(url, "s3://", 5) == 0) {
        rc = remote_s3_base(r, url, endpoint, diag);
    } else if (is_http(url) && endpoint == NULL) {
        snprintf(r->base, sizeof r->base, "%s", url);
    } else {
        char shown[CKPT_PATH_MAX];
        ckpt_url_shown(url, shown, sizeof shown);
        bt_diag_set(diag, "%s: expected http(s)://HOST[:PORT]/PREFIX or s3://BUCKET/PREFIX%s",
                    shown, endpoint ? " (--endpoint is for s3:// only)" : "");
        rc = BT_EINVAL;
    }
    if (rc < 0) return rc;
    strip_slashes(r->base);
    r->curl = curl_easy_init();
    /* S3 wants the payload hash in a signed header, which libcurl (before 8.x) does not
     * add; bodies are streamed, so they are sent unsigned (integrity: the CRC32Cs). */
    if (r->sigv4[0]) r->headers = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (r->curl == NULL || (r->sigv4[0] && r->headers == NULL)) {
        bt_diag_set(diag, "cannot start libcurl");
        return BT_ENOMEM;
    }
    return 0;
}

void ckpt_remote_free(ckpt_remote *r) {
    if (r->curl) curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    r->curl = NULL, r->headers = NULL;
    memset(r->userpwd, 0, sizeof r->userpwd);
}

int ckpt_remote_split(const char *url, char *store, size_t store_cap, char *name, size_t name_cap,
                      bt_diag *diag) {
    char tmp[CKPT_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", url);
    strip_slashes(tmp);
    char *slash = strrchr(tmp, '/');
    const char *scheme_end = strstr(tmp, "://");
    if (slash == NULL || scheme_end == NULL || slash <= scheme_end + 2 ||
        !ckpt_name_is_plain(slash + 1) || strlen(slash + 1) >= name_cap) {
        ckpt_url_shown(url, tmp, sizeof tmp);
        bt_diag_set(diag,
                    "%s: expected a URL ending in the checkpoint's name, "
                    "e.g. http://HOST/PREFIX/s00-step00000300",
                    tmp);
        return BT_EINVAL;
    }
    snprintf(name, name_cap, "%s", slash + 1);
    *slash = '\0';
    snprintf(store, store_cap, "%s", tmp);
    return 0;
}

/* ---- requests ---- */

/* One request: `setup` configures the handle for an attempt (files rewound or reopened),
 * `fatal` is set by callbacks that must not be retried (a CRC mismatch). */
typedef struct remote_req {
    const char *method, *url;
    int (*setup)(struct remote_req *q, CURL *c, bt_diag *diag);
    void (*finish)(struct remote_req *q);
    int fd, fatal, resume, restart;
    int follow; /* GET and HEAD of a plain HTTP(S) store follow redirects (remote_follow) */
    int64_t off;
    long status;
    ckpt_file_check *chk;
    CURL *curl;
    const char *path;
    bt_diag *diag;
} remote_req;

static int transient_curl(CURLcode e) {
    return e == CURLE_COULDNT_CONNECT || e == CURLE_OPERATION_TIMEDOUT || e == CURLE_RECV_ERROR ||
           e == CURLE_SEND_ERROR || e == CURLE_PARTIAL_FILE || e == CURLE_GOT_NOTHING ||
           e == CURLE_COULDNT_RESOLVE_HOST;
}

/* A status worth another try: a timeout, a rate limit, a server error; not 501 (Not
 * Implemented) nor 505 (HTTP Version Not Supported), which say the same every time. */
static int transient_status(long s) {
    return s == 408 || s == 429 || (s >= 500 && s != 501 && s != 505);
}

static void backoff(int attempt) {
    long ms = REMOTE_BACKOFF_MS << attempt;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void remote_common(ckpt_remote *r, CURL *c, const char *url) {
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    if (r->sigv4[0]) {
        curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r->sigv4);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
    } else { /* credentials not in the URL: ~/.netrc's for the host, if it has any */
        curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
    }
    if (r->max_time_ms > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, r->max_time_ms);
    if (r->stall_time_s > 0) { /* a server that accepts and never answers */
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, r->stall_time_s);
    }
    if (r->limit_rate > 0) {
        curl_easy_setopt(c, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)r->limit_rate);
        curl_easy_setopt(c, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)r->limit_rate);
    }
}

/* A GET or HEAD of a plain HTTP(S) store follows redirects as ckpt_redirect.h's policy
 * says (to https only from https, credentials to the URL's own host only). PUT and DELETE
 * do not follow (an upload or a removal goes where the URL says), nor does an s3:// store
 * (SigV4 signs for one host). */
static void remote_follow(CURL *c, const char *url) {
    ckpt_redirect_policy p = ckpt_redirect_policy_of(url);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, CKPT_REDIRECT_MAX);
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L); /* credentials to the URL's host only */
#if LIBCURL_VERSION_NUM >= 0x075500                     /* 7.85: the protocols by name */
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, ckpt_redirect_protocols(&p));
#else
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS,
                     (p.to_http ? (long)CURLPROTO_HTTP : 0L) |
                         (p.to_https ? (long)CURLPROTO_HTTPS : 0L));
#endif
}

/* curl's reason for a failed request, with what a redirect it would not follow means. */
static void remote_why(const remote_req *q, CURLcode e, const char *err, char *why, size_t cap) {
    const char *reason = err[0] ? err : curl_easy_strerror(e);
    if (q->follow && e == CURLE_UNSUPPORTED_PROTOCOL)
        snprintf(why, cap,
                 "%s (a redirect to another scheme is not followed: from https:// only to "
                 "https://, from http:// to http:// or https://)",
                 reason);
    else if (q->follow && e == CURLE_TOO_MANY_REDIRECTS)
        snprintf(why, cap, "%s (at most %ld redirects are followed)", reason, CKPT_REDIRECT_MAX);
    else
        snprintf(why, cap, "%s", reason);
}

/* Runs q with retries; 0 with q->status set once the server answered with a
 * non-transient status, else BT_EIO with the reason in diag. */
static int remote_run(ckpt_remote *r, remote_req *q, bt_diag *diag) {
    char why[CURL_ERROR_SIZE + 256] = "", shown[CKPT_PATH_MAX + 512];
    ckpt_url_shown(q->url, shown, sizeof shown);
    for (int attempt = 0; attempt < r->tries; attempt++) {
        if (attempt > 0) backoff(attempt - 1);
        char err[CURL_ERROR_SIZE] = "";
        remote_common(r, r->curl, q->url);
        curl_easy_setopt(r->curl, CURLOPT_ERRORBUFFER, err);
        q->status = 0;
        q->curl = r->curl;
        int rc = q->setup(q, r->curl, diag);
        if (rc < 0) return rc;
        if (q->follow) remote_follow(r->curl, q->url);
        CURLcode e = curl_easy_perform(r->curl);
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &q->status);
        if (q->finish) q->finish(q);
        if (q->fatal) return BT_EIO;
        if (e == CURLE_OK && !transient_status(q->status)) return 0;
        if (e == CURLE_OK)
            snprintf(why, sizeof why, "HTTP %ld", q->status);
        else
            remote_why(q, e, err, why, sizeof why);
        if (e == CURLE_RANGE_ERROR)
            q->restart = 1; /* the server ignores Range */
        else if (e != CURLE_OK && !transient_curl(e))
            break;
        if (attempt + 1 < r->tries)
            fprintf(stderr, "%s: %s %s: %s; retrying\n", r->prog ? r->prog : "baton ckpt",
                    q->method, shown, why);
    }
    bt_diag_set(diag, "%s %s: %s", q->method, shown, why);
    return BT_EIO;
}

static int remote_url(ckpt_remote *r, const char *name, const char *file, char *out, size_t cap,
                      bt_diag *diag) {
    if (!ckpt_name_is_plain(name) || !ckpt_name_is_plain(file)) {
        bt_diag_set(diag, "'%s/%s': not a plain checkpoint/file name", name, file);
        return BT_EINVAL;
    }
    int n = snprintf(out, cap, "%s/%s/%s", r->base, name, file);
    if (n < 0 || (size_t)n >= cap) {
        char shown[CKPT_PATH_MAX];
        ckpt_url_shown(r->base, shown, sizeof shown);
        bt_diag_set(diag, "%s/%s/%s: URL too long", shown, name, file);
        return BT_EINVAL;
    }
    return 0;
}

/* An answer that is not the one wanted; a redirect not followed says where it points and
 * why it is not followed (remote_follow). */
static int status_error(const remote_req *q, const char *file, bt_diag *diag) {
    char shown[CKPT_PATH_MAX + 512], to[CKPT_PATH_MAX + 512] = "";
    ckpt_url_shown(q->url, shown, sizeof shown);
    char *loc = NULL;
    if (q->status >= 300 && q->status < 400 && q->curl &&
        curl_easy_getinfo(q->curl, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
        ckpt_url_shown(loc, to, sizeof to);
    if (q->status < 300 || q->status >= 400)
        bt_diag_set(diag, "%s %s: HTTP %ld (file %s)", q->method, shown, q->status, file);
    else
        bt_diag_set(diag, "%s %s: HTTP %ld, a redirect%s%s (file %s), not followed: %s", q->method,
                    shown, q->status, to[0] ? " to " : " without a Location", to, file,
                    q->follow ? "it names no place to go"
                    : strcmp(q->method, "GET") == 0 || strcmp(q->method, "HEAD") == 0
                        ? "an s3:// store is never redirected (SigV4 signs for one host; give "
                          "the endpoint the bucket is at, --endpoint)"
                        : "PUT and DELETE go only where the URL says (give the store's own URL)");
    return BT_EIO;
}

/* ---- HEAD ---- */

static int head_setup(remote_req *q, CURL *c, bt_diag *diag) {
    (void)q, (void)diag;
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    return 0;
}

int ckpt_remote_head(ckpt_remote *r, const char *name, const char *file, int64_t *size,
                     bt_diag *diag) {
    char url[CKPT_PATH_MAX + 512];
    int rc = remote_url(r, name, file, url, sizeof url, diag);
    if (rc < 0) return rc;
    remote_req q = {
        .method = "HEAD", .url = url, .setup = head_setup, .fd = -1, .follow = !r->sigv4[0]};
    *size = -1;
    rc = remote_run(r, &q, diag);
    if (rc < 0) return rc;
    if (q.status == 404) return 0;
    if (q.status != 200) return status_error(&q, file, diag);
    curl_off_t len = -1;
    curl_easy_getinfo(r->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    *size = len;
    return 1;
}

/* ---- DELETE ---- */

static int delete_setup(remote_req *q, CURL *c, bt_diag *diag) {
    (void)q, (void)diag;
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    return 0;
}

/* A DELETE the store will never do: Method Not Allowed, Not Implemented, or refused to
 * these credentials (Unauthorized, Forbidden). */
static int delete_refused(long s) {
    return s == 405 || s == 501 || s == 401 || s == 403;
}

int ckpt_remote_delete(ckpt_remote *r, const char *name, const char *file, long *status,
                       bt_diag *diag) {
    char url[CKPT_PATH_MAX + 512];
    *status = 0;
    int rc = remote_url(r, name, file, url, sizeof url, diag);
    if (rc < 0) return rc;
    remote_req q = {.method = "DELETE", .url = url, .setup = delete_setup, .fd = -1};
    rc = remote_run(r, &q, diag);
    if (rc == 0) *status = q.status;
    if (rc == 0 && delete_refused(q.status)) {
        char shown[CKPT_PATH_MAX + 512];
        ckpt_url_shown(q.url, shown, sizeof shown);
        bt_diag_set(diag, "%s %s: HTTP %ld", q.method, shown, q.status);
        return BT_EUNSUPPORTED;
    }
    if (rc == 0 && q.status != 404 && (q.status < 200 || q.status >= 300))
        rc = status_error(&q, file, diag);
    return rc;
}

/* ---- PUT ---- */

static size_t put_read(char *buf, size_t size, size_t nitems, void *ud) {
    remote_req *q = ud;
    ssize_t got;
    do
        got = pread(q->fd, buf, size * nitems, q->off);
    while (got < 0 && errno == EINTR);
    if (got < 0) {
        bt_diag_set(q->diag, "%s: read error: %s", q->path, strerror(errno));
        q->fatal = 1;
        return CURL_READFUNC_ABORT;
    }
    if (q->chk && ckpt_check_feed(q->chk, buf, (size_t)got, q->path, q->diag) < 0) {
        q->fatal = 1;
        return CURL_READFUNC_ABORT;
    }
    q->off += got;
    return (size_t)got;
}

static int put_setup(remote_req *q, CURL *c, bt_diag *diag) {
    struct stat st;
    if (fstat(q->fd, &st) != 0) {
        bt_diag_set(diag, "%s: %s", q->path, strerror(errno));
        return BT_EIO;
    }
    q->off = 0;
    if (q->chk) ckpt_check_reset(q->chk);
    curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, put_read);
    curl_easy_setopt(c, CURLOPT_READDATA, q);
    return 0;
}

static void put_finish(remote_req *q) {
    if (q->fatal || q->status < 200 || q->status >= 300 || q->chk == NULL) return;
    if (ckpt_check_end(q->chk, q->path, q->diag) < 0) q->fatal = 1;
}

int ckpt_remote_put(ckpt_remote *r, const char *name, const char *file, const char *path,
                    ckpt_file_check *chk, bt_diag *diag) {
    char url[CKPT_PATH_MAX + 512];
    int rc = remote_url(r, name, file, url, sizeof url, diag);
    if (rc < 0) return rc;
    remote_req q = {.method = "PUT",
                    .url = url,
                    .setup = put_setup,
                    .finish = put_finish,
                    .chk = chk,
                    .path = path,
                    .diag = diag};
    q.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (q.fd < 0) {
        bt_diag_set(diag, "%s: cannot open: %s", path, strerror(errno));
        return BT_EIO;
    }
    rc = remote_run(r, &q, diag);
    close(q.fd);
    if (rc == 0 && (q.status < 200 || q.status >= 300)) rc = status_error(&q, path, diag);
    return rc;
}

/* ---- GET ---- */

/* Writes the body of a 2xx answer at the end of the file; the body of an error answer
 * is dropped. A 200 to a Range request means the server sent the whole object. */
static size_t get_write(char *buf, size_t size, size_t nitems, void *ud) {
    remote_req *q = ud;
    size_t n = size * nitems;
    long status = 0;
    curl_easy_getinfo(q->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200 && status != 206) return n;
    if (status == 200 && q->off > 0) {
        if (ftruncate(q->fd, 0) != 0 || lseek(q->fd, 0, SEEK_SET) != 0) return 0;
        q->off = 0;
    }
    if (ckpt_write_all(q->fd, buf, n, q->path, q->diag) < 0) {
        q->fatal = 1;
        return 0;
    }
    return n;
}

/* Each attempt continues from what the file holds (resume) or starts it afresh. */
static int get_setup(remote_req *q, CURL *c, bt_diag *diag) {
    int fresh = !q->resume || q->restart;
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_TRUNC : 0);
    q->fd = open(q->path, flags, 0600);
    off_t end = q->fd >= 0 ? lseek(q->fd, 0, SEEK_END) : -1;
    if (end < 0) {
        bt_diag_set(diag, "%s: cannot open for writing: %s", q->path, strerror(errno));
        if (q->fd >= 0) close(q->fd);
        q->fd = -1;
        return BT_EIO;
    }
    q->resume = 1, q->restart = 0; /* a retry continues what this attempt wrote */
    q->off = end;
    q->curl = c;
    if (end > 0) curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)end);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, get_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, q);
    return 0;
}

static void get_finish(remote_req *q) {
    if (q->fd >= 0 && fsync(q->fd) != 0 && !q->fatal) {
        bt_diag_set(q->diag, "%s: fsync: %s", q->path, strerror(errno));
        q->fatal = 1;
    }
    if (q->fd >= 0) close(q->fd);
    q->fd = -1;
}

int ckpt_remote_get(ckpt_remote *r, const char *name, const char *file, const char *path,
                    int resume, bt_diag *diag) {
    char url[CKPT_PATH_MAX + 512];
    int rc = remote_url(r, name, file, url, sizeof url, diag);
    if (rc < 0) return rc;
    remote_req q = {.method = "GET",
                    .url = url,
                    .setup = get_setup,
                    .finish = get_finish,
                    .fd = -1,
                    .resume = resume,
                    .follow = !r->sigv4[0],
                    .path = path,
                    .diag = diag};
    rc = remote_run(r, &q, diag);
    if (rc == 0 && q.status == 416) {
        /* The partial file is not a prefix of this object (it is longer): start over. */
        q.resume = 0;
        rc = remote_run(r, &q, diag);
    }
    if (rc == 0 && q.status != 200 && q.status != 206) rc = status_error(&q, file, diag);
    return rc;
}
