#!/usr/bin/python3
"""The "internet" of the network tests: servers on TEST-NET addresses inside a network
namespace the test makes. Each listener logs every connection and request it sees, one JSON
object a line, so a test can prove that nothing reached a blocked destination.

Standard library only; run with Debian's /usr/bin/python3.

  fakenet_server.py --log FILE [--http ADDR:PORT]... [--https ADDR:PORT:CERT:KEY]...
                    [--banner ADDR:PORT]... [--udp ADDR:PORT]... [--ws ADDR:PORT]...
"""
import argparse
import json
import os
import socket
import ssl
import sys
import threading
import time

LOCK = threading.Lock()
LOG = None


FILE_BLOCK_DATA = b"x" * (16 << 20)
_file_block = []
_file_block_lock = threading.Lock()


def file_block():
    """A memfd holding FILE_BLOCK_DATA, made on first use."""
    with _file_block_lock:
        if not _file_block:
            fd = os.memfd_create("fakenet-bytes")
            os.write(fd, FILE_BLOCK_DATA)
            _file_block.append(fd)
        return _file_block[0]


def log(**kv):
    kv["t"] = time.time()
    with LOCK:
        LOG.write(json.dumps(kv) + "\n")
        LOG.flush()


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
        if len(data) > 1 << 20:
            return None, b""
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), rest


def serve_http(conn, listen, tls_name=None):
    try:
        while True:
            head, rest = read_head(conn)
            if head is None:
                return
            lines = head.split("\r\n")
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            body = rest
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            log(kind="request", listen=listen, sni=tls_name, line=lines[0], headers=headers,
                body=body.decode("latin-1"))
            path = lines[0].split(" ")[1] if " " in lines[0] else "/"
            if path.startswith("/file-bytes/") and tls_name is None:
                # The same bytes sent with sendfile(2) from memory: a producer that costs
                # little CPU, so a benchmark measures the path, not Python.
                n = int(path.split("/")[2])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                while n > 0:
                    k = min(n, len(FILE_BLOCK_DATA))
                    off = 0
                    while off < k:
                        off += os.sendfile(conn.fileno(), file_block(), off, k - off)
                    n -= k
                continue
            if path.startswith("/bytes/"):
                n = int(path.split("/")[2])
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                block = b"x" * 65536
                while n > 0:
                    conn.sendall(block[:min(n, len(block))])
                    n -= min(n, len(block))
                continue
            if path.startswith("/slow"):
                # A long response in pieces, for the live-update test.
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(600):
                    conn.sendall(b"6\r\ntick.\n\r\n")
                    time.sleep(0.1)
                conn.sendall(b"0\r\n\r\n")
                continue
            reply = json.dumps({"server": listen, "sni": tls_name, "line": lines[0],
                                "headers": headers, "body": body.decode("latin-1")}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(reply) + reply)
            if headers.get("connection", "").lower() == "close":
                return
    except (OSError, ssl.SSLError, ValueError):
        return
    finally:
        conn.close()


def tcp_listener(addr, port, handler):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(128)

    def loop():
        while True:
            conn, peer = s.accept()
            threading.Thread(target=handler, args=(conn, peer), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def main():
    global LOG
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--http", action="append", default=[])
    ap.add_argument("--https", action="append", default=[])
    ap.add_argument("--banner", action="append", default=[])
    ap.add_argument("--udp", action="append", default=[])
    ap.add_argument("--ready", required=True)
    a = ap.parse_args()
    LOG = open(a.log, "a")

    for spec in a.http:
        addr, port = spec.rsplit(":", 1)
        listen = spec

        def h(conn, peer, listen=listen):
            log(kind="connect", listen=listen, peer=peer[0])
            serve_http(conn, listen)

        tcp_listener(addr, int(port), h)

    for spec in a.https:
        addr, port, cert, key = spec.split(":")
        listen = addr + ":" + port
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        def sni(sslsock, name, _ctx):
            sslsock.sni_seen = name

        ctx.sni_callback = sni

        def h(conn, peer, ctx=ctx, listen=listen):
            log(kind="connect", listen=listen, peer=peer[0])
            try:
                tls = ctx.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError) as e:
                log(kind="tls_error", listen=listen, error=str(e))
                conn.close()
                return
            name = getattr(tls, "sni_seen", None)
            log(kind="tls", listen=listen, sni=name)
            serve_http(tls, listen, tls_name=name)

        tcp_listener(addr, int(port), h)

    for spec in a.banner:
        addr, port = spec.rsplit(":", 1)
        listen = spec

        def h(conn, peer, listen=listen):
            log(kind="connect", listen=listen, peer=peer[0])
            try:
                conn.sendall(b"SSH-2.0-fakenet\r\n")
                data = conn.recv(4096)
                log(kind="banner_reply", listen=listen, data=data.decode("latin-1"))
            except OSError:
                pass
            conn.close()

        tcp_listener(addr, int(port), h)

    for spec in a.udp:
        addr, port = spec.rsplit(":", 1)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, int(port)))

        def loop(s=s, listen=spec):
            while True:
                data, peer = s.recvfrom(65536)
                log(kind="udp", listen=listen, peer=peer[0], data=data.decode("latin-1"))
                s.sendto(b"echo:" + data, peer)

        threading.Thread(target=loop, daemon=True).start()

    with open(a.ready, "w") as f:
        f.write("ready\n")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
