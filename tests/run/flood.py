#!/usr/bin/python3
"""flood.py HOST PORT N: holds N TCP connections to HOST:PORT that never send a byte, as
anyone on the host could: each one the server closes is opened again. Runs until killed;
prints "holding K" to stdout once K connections are open at once for the first time
(K = N, or as many as the server let in after a while)."""
import select
import socket
import sys
import time

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks, said, start = [], False, time.monotonic()


def top_up():
    while len(socks) < n:
        s = socket.socket()
        s.settimeout(0.2)
        try:
            s.connect((host, port))
        except OSError:
            s.close()
            return
        socks.append(s)


while True:
    top_up()
    if not said and (len(socks) >= n or time.monotonic() - start > 3):
        print("holding", len(socks), flush=True)
        said = True
    p = select.poll()
    for s in socks:
        p.register(s, select.POLLIN)
    by_fd = {s.fileno(): s for s in socks}
    for fd, _ in p.poll(100):  # readable: closed by the server (it sends nothing else)
        s = by_fd[fd]
        try:
            gone = s.recv(1) == b""
        except OSError:
            gone = True
        if gone:
            socks.remove(s)
            s.close()
