"""A logger that opens its file O_DSYNC instead of calling fsync: records of 64 to 512
bytes, each durable when write() returns."""
import os
import random
import sys
import time

path = os.path.join(os.environ["D"], "dsync.log")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_DSYNC, 0o644)
rnd = random.Random(11)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 3)
while time.time() < end:
    os.write(fd, b"r" * rnd.randint(64, 512))
os.close(fd)
