"""Maildir-like delivery: 400 small messages, each written to its own file and fsynced, then
the directory fsynced."""
import os

d = os.path.join(os.environ["D"], "mail")
os.makedirs(d, exist_ok=True)
dfd = os.open(d, os.O_RDONLY)
for i in range(400):
    fd = os.open(os.path.join(d, f"m{i}"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"message body " * 20)
    os.fsync(fd)
    os.close(fd)
    os.fsync(dfd)
