"""A minimal S3-compatible object server for the `baton ckpt push/pull` tests.

It implements what the checkpoint store uses — PUT, GET (with `Range: bytes=N-`) and
HEAD of objects, path-style (/BUCKET/KEY) — and checks the AWS Signature Version 4 of
every request with its own implementation of the algorithm, written from AWS's
specification and checked here against AWS's published test vectors (`--selftest`).
A request whose signature, credential scope or payload hash does not verify is answered
403 SignatureDoesNotMatch, as S3 does.

    s3_server.py --selftest
    s3_server.py ROOT BUCKET ACCESS_KEY SECRET REGION PORT_FILE LOG_FILE

Objects are files under ROOT/BUCKET/KEY. The port it listens on (127.0.0.1, chosen by
the kernel) is written to PORT_FILE; LOG_FILE gets one line per request:
    METHOD PATH STATUS BYTES RANGE SIGNED_HEADERS
"""
import datetime
import hashlib
import hmac
import http.server
import os
import sys
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _hmac(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret, date, region, service):
    k = _hmac(("AWS4" + secret).encode(), date)
    k = _hmac(k, region)
    k = _hmac(k, service)
    return _hmac(k, "aws4_request")


def canonical_request(method, path, query, headers, signed, payload_hash):
    """headers: lower-case name -> value; signed: sorted lower-case names."""
    uri = urllib.parse.quote(path, safe="/-_.~")
    pairs = sorted(urllib.parse.parse_qsl(query, keep_blank_values=True))
    q = "&".join(urllib.parse.quote(k, safe="-_.~") + "=" + urllib.parse.quote(v, safe="-_.~")
                 for k, v in pairs)
    canon = "".join(f"{h}:{' '.join(headers[h].split())}\n" for h in signed)
    return "\n".join([method, uri, q, canon, ";".join(signed), payload_hash])


def signature(secret, amz_date, region, service, creq):
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                     hashlib.sha256(creq.encode()).hexdigest()])
    return hmac.new(signing_key(secret, amz_date[:8], region, service), sts.encode(),
                    hashlib.sha256).hexdigest()


def selftest():
    """AWS's published examples: the SigV4 test suite's get-vanilla request and the S3
    documentation's GET Object example with a Range header."""
    creq = canonical_request("GET", "/", "", {
        "host": "example.amazonaws.com", "x-amz-date": "20150830T123600Z"},
        ["host", "x-amz-date"], EMPTY_SHA256)
    got = signature("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20150830T123600Z",
                    "us-east-1", "service", creq)
    want = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
    ok = got == want
    print(f"{'ok  ' if ok else 'FAIL'} SigV4 test suite get-vanilla: {got}")
    creq = canonical_request("GET", "/test.txt", "", {
        "host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9",
        "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": "20130524T000000Z"},
        ["host", "range", "x-amz-content-sha256", "x-amz-date"], EMPTY_SHA256)
    got = signature("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "20130524T000000Z",
                    "us-east-1", "s3", creq)
    want = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    print(f"{'ok  ' if got == want else 'FAIL'} S3 GET Object example: {got}")
    return ok and got == want


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    cfg = {}

    def log_message(self, fmt, *args):
        pass

    def _log(self, status, nbytes, signed):
        with open(self.cfg["log"], "a") as f:
            rng = self.headers.get("Range", "-")
            f.write(f"{self.command} {self.path} {status} {nbytes} {rng} {signed}\n")

    def _reply(self, status, body=b"", headers=(), signed="-", send_body=True):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)) if send_body else
                         dict(headers).get("X-Length", "0"))
        self.end_headers()
        if send_body and body:
            self.wfile.write(body)
        self._log(status, len(body) if send_body else 0, signed)

    def _error(self, status, code, signed="-"):
        body = f"<?xml version=\"1.0\"?><Error><Code>{code}</Code></Error>".encode()
        self._reply(status, body, [("Content-Type", "application/xml")], signed,
                    self.command != "HEAD")

    def _verify(self, body):
        """None when the request's SigV4 signature verifies, else the reason."""
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return "no SigV4 Authorization header", "-"
        fields = dict(p.strip().split("=", 1) for p in auth[17:].split(","))
        signed = fields.get("SignedHeaders", "")
        cred = fields.get("Credential", "").split("/")
        amz_date = self.headers.get("x-amz-date", "")
        payload = self.headers.get("x-amz-content-sha256", "")
        if len(cred) != 5 or cred[0] != self.cfg["key"] or cred[2] != self.cfg["region"] \
                or cred[3] != "s3" or cred[4] != "aws4_request" or cred[1] != amz_date[:8]:
            return f"bad credential scope {'/'.join(cred)}", signed
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
        if abs((datetime.datetime.utcnow() - when).total_seconds()) > 900:
            return f"x-amz-date {amz_date} is not now", signed
        names = signed.split(";")
        if "host" not in names or "x-amz-date" not in names or not payload:
            return "host, x-amz-date and x-amz-content-sha256 must be signed", signed
        if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
            return "payload hash mismatch", signed
        headers = {k.lower(): v for k, v in self.headers.items()}
        if any(n not in headers for n in names):
            return "a signed header is missing", signed
        url = urllib.parse.urlsplit(self.path)
        creq = canonical_request(self.command, url.path, url.query, headers, names, payload)
        want = signature(self.cfg["secret"], amz_date, self.cfg["region"], "s3", creq)
        if not hmac.compare_digest(want, fields.get("Signature", "")):
            return "signature mismatch", signed
        return None, signed

    def _object(self):
        path = urllib.parse.urlsplit(self.path).path
        parts = path.lstrip("/").split("/", 1)
        if len(parts) != 2 or parts[0] != self.cfg["bucket"] or not parts[1] \
                or ".." in parts[1].split("/"):
            return None
        return os.path.join(self.cfg["root"], parts[0], parts[1])

    def _start(self, body=b""):
        why, signed = self._verify(body)
        if why:
            sys.stderr.write(f"s3_server: {self.command} {self.path}: {why}\n")
            self._error(403, "SignatureDoesNotMatch", signed)
            return None, signed
        obj = self._object()
        if obj is None:
            self._error(404, "NoSuchBucket", signed)
        return obj, signed

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        obj, signed = self._start(body)
        if obj is None:
            return
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        with open(obj + ".tmp", "wb") as f:
            f.write(body)
        os.replace(obj + ".tmp", obj)
        self._reply(200, b"", [("ETag", '"%s"' % hashlib.md5(body).hexdigest())], signed)

    def do_DELETE(self):
        obj, signed = self._start()
        if obj is None:
            return
        if os.path.isfile(obj):
            os.remove(obj)
        self._reply(204, b"", [], signed)  # S3 answers 204 whether or not the key was there

    def _read(self):
        obj, signed = self._start()
        if obj is None:
            return None, None, signed
        if not os.path.isfile(obj):
            self._error(404, "NoSuchKey", signed)
            return None, None, signed
        with open(obj, "rb") as f:
            return obj, f.read(), signed

    def do_HEAD(self):
        obj, data, signed = self._read()
        if obj is not None:
            self._reply(200, b"", [("X-Length", str(len(data)))], signed, send_body=False)

    def do_GET(self):
        obj, data, signed = self._read()
        if obj is None:
            return
        rng = self.headers.get("Range")
        if rng is None:
            self._reply(200, data, [], signed)
            return
        start = int(rng.removeprefix("bytes=").split("-")[0])
        if start >= len(data):
            self._error(416, "InvalidRange", signed)
            return
        self._reply(206, data[start:], [
            ("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")], signed)


def main():
    if sys.argv[1:] == ["--selftest"]:
        sys.exit(0 if selftest() else 1)
    root, bucket, key, secret, region, port_file, log = sys.argv[1:8]
    Handler.cfg = dict(root=root, bucket=bucket, key=key, secret=secret, region=region,
                       log=log)
    os.makedirs(os.path.join(root, bucket), exist_ok=True)
    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
