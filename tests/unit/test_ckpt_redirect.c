/* The redirects a pull (GET, HEAD) from a plain HTTP(S) checkpoint store follows
 * (orchestrator/ckpt/ckpt_redirect.h): what remote_follow (ckpt_store_remote.c) gives
 * libcurl, the policy's protocols (CURLOPT_REDIR_PROTOCOLS_STR; the to_http and to_https
 * bits for a libcurl older than 7.85) and CKPT_REDIRECT_MAX (CURLOPT_MAXREDIRS). From
 * https only to https (a downgrade to plain http refused, whatever the host), from http
 * to http or https, never another scheme. The tests have no TLS server, so this is where
 * the https case is checked; check-http.sh follows real http redirects through nginx, the
 * password not sent to another port, and the limit of 5. */
#include <string.h>

#include "check.h"
#include "ckpt_redirect.h"

/* The protocols libcurl is told for a request to url. */
static const char *protocols_of(const char *url) {
    ckpt_redirect_policy p = ckpt_redirect_policy_of(url);
    return ckpt_redirect_protocols(&p);
}

static void check_from_https(void) {
    CHECK(strcmp(protocols_of("https://store.example:8443/ckpts"), "https") == 0);
    CHECK(strcmp(protocols_of("https://alice:pw@store.example/ckpts"), "https") == 0);
    /* the scheme's case does not matter: HTTPS:// and HtTpS:// are https */
    CHECK(strcmp(protocols_of("HTTPS://store.example/ckpts"), "https") == 0);
    CHECK(strcmp(protocols_of("HtTpS://store.example/ckpts"), "https") == 0);
    ckpt_redirect_policy p = ckpt_redirect_policy_of("https://store.example/ckpts");
    CHECK(!p.to_http && p.to_https);
}

static void check_from_http(void) {
    CHECK(strcmp(protocols_of("http://127.0.0.1:8080/store"), "http,https") == 0);
    CHECK(strcmp(protocols_of("HTTP://127.0.0.1:8080/store"), "http,https") == 0);
    /* "https" must be the scheme, not a prefix of the host */
    CHECK(strcmp(protocols_of("http://https.example/store"), "http,https") == 0);
    CHECK(strcmp(protocols_of("http://httpsx/store"), "http,https") == 0);
    ckpt_redirect_policy p = ckpt_redirect_policy_of("http://127.0.0.1:8080/store");
    CHECK(p.to_http && p.to_https);
}

int main(void) {
    check_from_https();
    check_from_http();
    CHECK_EQ_U64(CKPT_REDIRECT_MAX, 5);
    if (check_failures == 0) printf("redirect policy: all checks passed\n");
    return check_status();
}
