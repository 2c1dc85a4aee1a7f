"""A journald-like logger that makes every line durable: a syslog-style line (60-200 bytes)
appended to system.journal, then fsync, as fast as it goes, for argv[1] seconds."""
import os
import random
import sys
import time

path = os.path.join(os.environ["D"], "system.journal")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
rnd = random.Random(3)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
n = 0
while time.time() < end:
    n += 1
    line = "%s host app[%d]: request %d served in %d ms %s\n" % (
        time.strftime("%b %d %H:%M:%S"), 4242, n, rnd.randint(1, 900), "x" * rnd.randint(0, 130))
    os.write(fd, line.encode())
    os.fsync(fd)
os.close(fd)
