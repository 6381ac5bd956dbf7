#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A test receiver for memprofd's HTTP backends.

Listens on 127.0.0.1 (an ephemeral port, printed as "listening PORT"),
optionally with TLS, stores request N as DIR/N.head (request line and
headers) and DIR/N.body, and answers request N with the N-th response of
a JSON list (the last one repeats): {"status": 503, "headers": {...},
"body": "text"} or "body_hex". The answers the tests give follow each
server's documented behaviour (Connect unary errors, OTLP/HTTP, gRPC-Web).

With --hostile MODE (the responses file is then not read) it is a
collector that misbehaves, on every connection: "silent" reads the
request and never answers, "huge" answers 200 with a 1 GB Content-Length
and sends zeros for as long as it is read, "endless" answers a chunked 503
that never ends, "garbage" answers bytes that are not HTTP and closes, "headers"
answers a status line and then header lines without end,
"close" closes once the request's head is read (its body not), "noread" (for tcp:// streams)
accepts and never reads, "babble" (tcp://) says nothing for 6 s (no
hello: a collector without acknowledgements) and then sends bytes without
end. Connection N leaves DIR/N.head once its request
was read (for "noread": once accepted) and DIR/N.sent, the bytes it wrote,
when it ends.
"""
import argparse
import http.server
import json
import os
import select
import socket
import socketserver
import ssl
import sys
import threading

HOSTILE = ("silent", "huge", "endless", "garbage", "close", "noread", "babble", "headers")


def read_request(sock, with_body=True, limit=64 << 20):
    """The head and the Content-Length body of one request (bounded)."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(65536)
        if not got or len(data) > limit:
            return None
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    if not with_body:
        return head
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = min(int(v.strip()), limit)
    while len(body) < length:
        got = sock.recv(65536)
        if not got:
            break
        body += got
    return head


def hostile(mode, sock, path, st):
    """Misbehaves on one connection; st["sent"]: the bytes written (at
    most one block more, counted before it goes)."""
    if mode == "noread":
        open(path + ".head", "w").close()
        p = select.poll()
        p.register(sock, select.POLLRDHUP)
        while not p.poll(200):
            pass  # until the client closes, unread data or not
        return 0
    if mode == "babble":
        open(path + ".head", "w").close()
        threading.Event().wait(6)
        block = b"\0" * 65536
        while True:
            st["sent"] += len(block)
            sock.sendall(block)
    head = read_request(sock, mode != "close")
    if head is None:
        return 0
    with open(path + ".head.tmp", "wb") as f:
        f.write(head)
    os.rename(path + ".head.tmp", path + ".head")
    if mode == "silent":
        sock.recv(1)  # until the client gives up
        return
    if mode == "close":
        return
    if mode == "garbage":
        out = b"\x00\xffNOT HTTP AT ALL\r\n\r\n" + os.urandom(4096)
        st["sent"] += len(out)
        sock.sendall(out)
        return
    if mode == "headers":
        head = b"HTTP/1.1 200 OK\r\n"
        block, left = b"X-Junk: " + b"a" * 1000 + b"\r\n", float("inf")
    elif mode == "huge":
        head = (b"HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n"
                b"Content-Type: application/proto\r\n\r\n")
        block, left = b"\0" * 65536, 1 << 30
    else:
        head = (b"HTTP/1.1 503 Service Unavailable\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        block, left = b"10000\r\n" + b"x" * 65536 + b"\r\n", float("inf")
    st["sent"] += len(head)
    sock.sendall(head)
    while left > 0:
        st["sent"] += len(block)
        sock.sendall(block)
        left -= len(block)


def serve_hostile(mode, out_dir):
    count = [0]
    lock = threading.Lock()

    class H(socketserver.BaseRequestHandler):
        def handle(self):
            with lock:
                n = count[0]
                count[0] += 1
            path = os.path.join(out_dir, "%d" % n)
            st = {"sent": 0}
            try:
                hostile(mode, self.request, path, st)
            except OSError:
                pass
            finally:
                with open(path + ".sent", "w") as f:
                    f.write("%d\n" % st["sent"])

    class S(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = S(("127.0.0.1", 0), H, bind_and_activate=False)
    if mode == "noread":
        # A small window: what is not read soon stays in the sender.
        srv.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    srv.server_bind()
    srv.server_activate()
    print("listening %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("responses")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--hostile", choices=HOSTILE)
    a = ap.parse_args()
    if a.hostile:
        return serve_hostile(a.hostile, a.dir)
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
