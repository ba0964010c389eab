"""A Ray-like process leaking the kernel's memory, not its own (issue 59, 1):
run as ``ray::Leaker`` in the kit pod's Ray container. Like leak.py it first
writes a file (page cache, as a Ray node holds), then every step it sends
RATE MiB a second over loopback TCP connections it opened to itself and
never reads: the bytes wait in the receiving sockets' queues (and the
sending ones'), socket buffers the kernel charges to the cgroup
(memory.stat ``sock``), while anon stays flat. A connection whose buffers
are full is kept open and a new one opened. It also allocates and frees
1 MiB each step, as a worker does: once the sockets have taken the
cgroup's memory, that allocation is what the kernel cannot satisfy, and
its OOM killer ends the process."""
import os
import socket
import sys
import time

rate, cache_mib = float(sys.argv[1]), int(sys.argv[2])
with open(f"/var/tmp/cache-{os.getuid()}-{os.getpid()}.bin", "wb") as f:
    for _ in range(cache_mib):
        f.write(b"\x02" * (1 << 20))
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(4096)
kept = []  # every connection, both ends: never read, never closed


def connection():
    out = socket.create_connection(server.getsockname())
    inn, _ = server.accept()
    out.setblocking(False)
    kept.append((out, inn))
    return out


sender = connection()
chunk = b"\x03" * 65536
step = 1.0
next_t = time.monotonic()
while True:
    want = int(rate * (1 << 20) * step)
    while want > 0:
        try:
            want -= sender.send(chunk[:min(len(chunk), want)])
        except BlockingIOError:  # this connection's buffers are full: another
            sender = connection()
    churn = bytearray(1 << 20)
    churn[::4096] = b"\x01" * 256
    del churn
    next_t += step
    time.sleep(max(0.0, next_t - time.monotonic()))
