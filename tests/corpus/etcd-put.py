"""One etcd client: waits for the server's socket and a leader, then puts 16-byte values one
after another for the given seconds (each put acknowledged, so each is its own WAL append and
fdatasync), through the v3 gRPC gateway's JSON API over a unix socket."""
import base64
import http.client
import json
import socket
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(self.unix_path)


def b64(s):
    return base64.b64encode(s.encode()).decode()


def put(conn, key, value):
    body = json.dumps({"key": b64(key), "value": b64(value)})
    conn.request("POST", "/v3/kv/put", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status == 200


path, seconds = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + 20
conn = None
while True:
    # Until the server listens and has elected itself leader (the first put then succeeds).
    try:
        conn = UnixConnection(path)
        if put(conn, "ready", "1"):
            break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("etcd did not answer within 20 s")
    time.sleep(0.05)
end = time.monotonic() + seconds
i = 0
while time.monotonic() < end:
    if not put(conn, f"key/{i % 1000}", "v" * 16):
        sys.exit("a put failed")
    i += 1
print(f"{i} puts", file=sys.stderr)
