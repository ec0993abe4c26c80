/* The redirect policy of a plain HTTP(S) checkpoint store (ckpt_redirect.h). */
#include "ckpt_redirect.h"

#include <strings.h>

static int is_scheme(const char *url, const char *scheme, size_t len) {
    return strncasecmp(url, scheme, len) == 0;
}

ckpt_redirect_policy ckpt_redirect_policy_of(const char *url) {
    int https = is_scheme(url, "https://", 8);
    return (ckpt_redirect_policy){.to_http = !https, .to_https = 1};
}

const char *ckpt_redirect_protocols(const ckpt_redirect_policy *p) {
    return p->to_http && p->to_https ? "http,https"
           : p->to_https             ? "https"
           : p->to_http              ? "http"
                                     : "";
}
