/* Which redirects a GET or HEAD of a plain HTTP(S) checkpoint store follows: libcurl
 * follows them as ckpt_store_remote.c configures it from this policy. From an http URL to
 * http or https, from an https one to https only (never a downgrade to plain text), at
 * most CKPT_REDIRECT_MAX; the credentials (the URL's userinfo, ~/.netrc's) go to the URL's
 * own host, scheme and port only, never to where a redirect points. PUT and DELETE, and
 * an s3:// store, follow none (ckpt_store_remote.c). */
#ifndef BATON_CKPT_REDIRECT_H
#define BATON_CKPT_REDIRECT_H

#define CKPT_REDIRECT_MAX 5L

typedef struct ckpt_redirect_policy {
    int to_http, to_https; /* a redirect may go to http://, to https:// */
} ckpt_redirect_policy;

/* The policy for a request to url (its scheme, ASCII case ignored). */
ckpt_redirect_policy ckpt_redirect_policy_of(const char *url);

/* p's schemes as CURLOPT_REDIR_PROTOCOLS_STR takes them: "https", "http,https" ("" none). */
const char *ckpt_redirect_protocols(const ckpt_redirect_policy *p);

#endif
