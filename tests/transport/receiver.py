#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A test receiver for memprofd's HTTP backends.

Listens on 127.0.0.1 (an ephemeral port, printed as "listening PORT"),
optionally with TLS, stores request N as DIR/N.head (request line and
headers) and DIR/N.body, and answers request N with the N-th response of
a JSON list (the last one repeats): {"status": 503, "headers": {...},
"body": "text"} or "body_hex". The answers the tests give follow each
server's documented behaviour (Connect unary errors, OTLP/HTTP, gRPC-Web).
"""
import argparse
import http.server
import json
import os
import ssl
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("responses")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = ap.parse_args()
    with open(a.responses) as f:
        responses = json.load(f)
    count = [0]

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            n = count[0]
            count[0] += 1
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            head = self.requestline + "\r\n" + str(self.headers)
            path = os.path.join(a.dir, "%d" % n)
            with open(path + ".body", "wb") as f:
                f.write(body)
            # The head last: its presence says the request is whole.
            with open(path + ".head.tmp", "w") as f:
                f.write(head)
            os.rename(path + ".head.tmp", path + ".head")
            r = responses[min(n, len(responses) - 1)]
            out = bytes.fromhex(r["body_hex"]) if "body_hex" in r \
                else r.get("body", "").encode()
            self.send_response(r["status"])
            for k, v in r.get("headers", {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(out)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(out)

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print("listening %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
