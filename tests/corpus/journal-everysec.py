"""A logger that writes every line at once but makes the file durable once a second (rsyslog's
or journald's SyncIntervalSec= shape): ~1,000 lines a second, one fsync per second, for
argv[1] seconds."""
import os
import random
import sys
import time

path = os.path.join(os.environ["D"], "system.journal")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
rnd = random.Random(5)
start = time.time()
end = start + float(sys.argv[1] if len(sys.argv) > 1 else 3)
last_sync = start
n = 0
while True:
    now = time.time()
    if now >= end:
        break
    n += 1
    line = "%s host app[%d]: request %d served in %d ms %s\n" % (
        time.strftime("%b %d %H:%M:%S"), 4242, n, rnd.randint(1, 900), "x" * rnd.randint(0, 130))
    os.write(fd, line.encode())
    if now - last_sync >= 1.0:
        os.fsync(fd)
        last_sync = now
    time.sleep(0.001)
os.fsync(fd)
os.close(fd)
