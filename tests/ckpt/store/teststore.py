"""A small HTTP checkpoint store for check-http.sh: PUT/GET/HEAD of files under ROOT.

teststore.py PORT ROOT [MODE [ARG...]], MODE one of
  nodelete            no DELETE at all (501 Not Implemented, http.server's answer)
  deny CODE           DELETE refused with CODE (401, 403 ...)
  deny CODE manifest  ... but for an existing manifest.pb (per-object rights)
  nolen               DELETE works; a manifest.pb's HEAD answers 200 with no
                      Content-Length; a manifest.pb PUT under /lost/ is kept but
                      answered 500 (its answer lost); a manifest.pb HEAD under
                      /headfail/ answers 400 once it was asked before
Each request is logged to stderr as "METHOD PATH CODE".
"""
import http.server, os, sys

port, root, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3:] or ["nodelete"]
asked = set()


class Store(http.server.BaseHTTPRequestHandler):
    # HTTP/1.1: a PUT's "Expect: 100-continue" answered at once (an HTTP/1.0 server makes
    # curl wait a second per PUT for the 100 Continue it never sends)
    protocol_version = "HTTP/1.1"

    def path_of(self):
        return os.path.join(root, self.path.lstrip("/"))

    def log_message(self, *a):
        pass

    def log_request(self, code="-", size="-"):
        sys.stderr.write("%s %s %s\n" % (self.command, self.path, code))

    def reply(self, code, data=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def put_status(self):
        return 201

    def do_PUT(self):
        f = self.path_of()
        os.makedirs(os.path.dirname(f), exist_ok=True)
        with open(f, "wb") as o:
            o.write(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply(self.put_status())

    def do_GET(self):
        f = self.path_of()
        if not os.path.isfile(f):
            return self.reply(404)
        self.reply(200, open(f, "rb").read())

    do_HEAD = do_GET


class Deny(Store):
    def do_DELETE(self):
        f = self.path_of()
        if mode[2:] == ["manifest"] and f.endswith("/manifest.pb") and os.path.isfile(f):
            os.remove(f)
            return self.reply(204)
        self.reply(int(mode[1]))


class NoLength(Store):
    def put_status(self):
        lost = self.path.startswith("/lost/") and self.path.endswith("/manifest.pb")
        return 500 if lost else 201

    def do_HEAD(self):
        if not self.path.endswith("/manifest.pb"):
            return self.do_GET()
        if self.path.startswith("/headfail/") and self.path in asked:
            return self.reply(400)
        asked.add(self.path)
        if not os.path.isfile(self.path_of()):
            return self.reply(404)
        self.send_response(200)  # no Content-Length
        self.end_headers()

    def do_DELETE(self):
        f = self.path_of()
        if not os.path.isfile(f):
            return self.reply(404)
        os.unlink(f)
        self.reply(204)


handler = {"nodelete": Store, "deny": Deny, "nolen": NoLength}[mode[0]]
http.server.ThreadingHTTPServer(("127.0.0.1", port), handler).serve_forever()
