"""A Ray-like leaking process, run in the kit pod's Ray container as
``ray::Leaker`` (the sidecar finds Ray's processes by that name). It writes a
file first, so the cgroup holds page cache as a Ray node does, then keeps
1 MiB a step, written so the pages are charged, at RATE MiB/s (0: none)."""
import os
import sys
import time

rate, cache_mib = float(sys.argv[1]), int(sys.argv[2])
# A file of its own (the container's disk is kept from case to case, and
# each case's Ray runs as another user).
with open(f"/var/tmp/cache-{os.getuid()}-{os.getpid()}.bin", "wb") as f:
    for _ in range(cache_mib):
        f.write(b"\x02" * (1 << 20))
kept = []
step = 1.0 / rate if rate > 0 else 3600.0
next_t = time.monotonic()
while True:
    if rate > 0:
        kept.append(b"\x01" * (1 << 20))
    next_t += step
    time.sleep(max(0.0, next_t - time.monotonic()))
