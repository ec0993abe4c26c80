/* The redirects a pull (GET, HEAD) from a plain HTTP(S) checkpoint store follows
 * (orchestrator/ckpt/ckpt_redirect.h), the policy ckpt_store_remote.c gives libcurl:
 * from https only to https (a downgrade to plain http refused, whatever the host), from
 * http to http (the same host or another) or https; no other scheme; the credentials
 * never sent to another host, scheme or port; at most 5 redirects. check-http.sh follows
 * real http redirects through nginx; the tests have no TLS server for the https ones. */
#include <string.h>

#include "check.h"
#include "ckpt_redirect.h"

static void check_from_https(void) {
    ckpt_redirect_policy p = ckpt_redirect_policy_of("https://store.example:8443/ckpts");
    CHECK(!ckpt_redirect_allowed(&p, "http://store.example:8443/ckpts/s00/manifest.pb"));
    CHECK(!ckpt_redirect_allowed(&p, "http://store.example/ckpts/s00/manifest.pb"));
    CHECK(!ckpt_redirect_allowed(&p, "HTTP://store.example/ckpts/s00/manifest.pb"));
    CHECK(ckpt_redirect_allowed(&p, "https://store.example:8443/moved/s00/manifest.pb"));
    CHECK(ckpt_redirect_allowed(&p, "https://cdn.example/s00/manifest.pb"));
    CHECK(!ckpt_redirect_allowed(&p, "ftp://store.example/s00/manifest.pb"));
    CHECK(strcmp(ckpt_redirect_protocols(&p), "https") == 0);
    CHECK(!p.credentials_elsewhere);
    /* the scheme's case does not matter: HTTPS:// is https */
    ckpt_redirect_policy q = ckpt_redirect_policy_of("HTTPS://store.example/ckpts");
    CHECK(!ckpt_redirect_allowed(&q, "http://store.example/ckpts/s00/manifest.pb"));
    CHECK(strcmp(ckpt_redirect_protocols(&q), "https") == 0);
}

static void check_from_http(void) {
    ckpt_redirect_policy p = ckpt_redirect_policy_of("http://127.0.0.1:8080/store");
    CHECK(ckpt_redirect_allowed(&p, "http://127.0.0.1:8080/moved/s00/manifest.pb"));
    CHECK(ckpt_redirect_allowed(&p, "http://other.example/store/s00/manifest.pb"));
    CHECK(ckpt_redirect_allowed(&p, "https://127.0.0.1:8443/store/s00/manifest.pb"));
    CHECK(!ckpt_redirect_allowed(&p, "file:///etc/passwd"));
    CHECK(!ckpt_redirect_allowed(&p, "ftp://127.0.0.1/store/s00/manifest.pb"));
    CHECK(!ckpt_redirect_allowed(&p, "gopher://127.0.0.1/"));
    CHECK(strcmp(ckpt_redirect_protocols(&p), "http,https") == 0);
    /* the userinfo and ~/.netrc's password go to 127.0.0.1:8080 only */
    CHECK(!p.credentials_elsewhere);
}

int main(void) {
    check_from_https();
    check_from_http();
    CHECK_EQ_U64(CKPT_REDIRECT_MAX, 5);
    if (check_failures == 0) printf("redirect policy: all checks passed\n");
    return check_status();
}
