#!/usr/bin/env python3
"""Slow HTTP clients for a `ferry server`: each opens a connection, sends one
request (the watch stream as server-sent events, the watch stream as a long
poll, or GET /metrics) and then reads very slowly (16 bytes a second) or
not at all. A client whose connection ends opens a new one, so the pressure
stays. One thread drives them all (selectors). Used by
bench/fleet/watch_run.sh and tests/python/fleet/test_watch.py.

    slow_clients.py --port 8700 --token-file admin.token --clients 1000 --seconds 60
"""

import argparse
import selectors
import socket
import sys
import threading
import time

KINDS = {
    "sse": "GET /v1/jobs:watch HTTP/1.1\r\nAccept: text/event-stream\r\n",
    "poll": "GET /v1/jobs:watch?since=0&timeout_s=60&state=CANCELLED HTTP/1.1\r\n",
    "metrics": "GET /metrics HTTP/1.1\r\n",
}
DEFAULT_MIX = (("sse", 0.6), ("metrics", 0.2), ("poll", 0.2))


class SlowClients:
    """`count` slow clients against 127.0.0.1:`port`; `mix` gives each kind's share.
    Every second client never reads; the others read 16 bytes a second."""

    def __init__(self, port, token, count, mix=DEFAULT_MIX, open_per_second=200):
        self.port = port
        self.token = token
        self.kinds = []
        for kind, share in mix:
            self.kinds += [kind] * round(count * share)
        self.kinds = (self.kinds + [mix[0][0]] * count)[:count]
        self.open_per_second = open_per_second
        self.selector = selectors.DefaultSelector()
        self.opened = 0          # connections opened, reconnections included
        self.connect_errors = 0
        self.statuses = {}       # status code -> responses whose status line was read
        self.bytes_read = 0
        self.sitting = []        # sockets of clients that stopped reading
        self._stop = threading.Event()
        self._thread = None
        self._all_open = threading.Event()

    def _request(self, kind):
        return (KINDS[kind] + f"Host: 127.0.0.1:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\n\r\n").encode()

    def _open(self, index):
        kind = self.kinds[index]
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(self._request(kind))
            sock.setblocking(False)
        except OSError:
            self.connect_errors += 1
            return
        self.opened += 1
        reads = index % 2 == 1
        self.selector.register(sock, selectors.EVENT_READ,
                               {"index": index, "reads": reads, "head": b"", "next_read": 0.0})

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def wait_open(self, timeout=60):
        """True once every client has opened its first connection."""
        return self._all_open.wait(timeout)

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        self.selector.close()
        for sock in self.sitting:
            sock.close()

    def _run(self):
        started = time.monotonic()
        for index in range(len(self.kinds)):
            if self._stop.is_set():
                return
            # Paced, so the listen backlog never drops a SYN.
            delay = started + index / self.open_per_second - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._open(index)
        self._all_open.set()
        while not self._stop.is_set():
            now = time.monotonic()
            for key, _ in self.selector.select(timeout=0.2):
                data = key.data
                if now < data["next_read"]:
                    continue
                data["next_read"] = now + 1.0
                try:
                    chunk = key.fileobj.recv(16)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    self.selector.unregister(key.fileobj)
                    key.fileobj.close()
                    self._open(data["index"])
                    continue
                self.bytes_read += len(chunk)
                if len(data["head"]) < 12:
                    data["head"] += chunk
                    if len(data["head"]) >= 12:
                        status = data["head"][9:12].decode(errors="replace")
                        self.statuses[status] = self.statuses.get(status, 0) + 1
                if not data["reads"]:
                    # A client that never reads took its status line only
                    # (16 bytes); it sits, its buffers filling.
                    self.selector.unregister(key.fileobj)
                    self.sitting.append(key.fileobj)
            time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60, help="then exit (0: until killed)")
    parser.add_argument("--ready-file", help="written once every client is connected")
    args = parser.parse_args()
    token = open(args.token_file).read().strip()
    clients = SlowClients(args.port, token, args.clients).start()
    if not clients.wait_open(120):
        print("slow_clients: not every client connected", file=sys.stderr)
        return 1
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write(f"{clients.opened}\n")
    try:
        deadline = time.monotonic() + args.seconds if args.seconds > 0 else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    print(f"slow_clients: {clients.opened} connections opened ({clients.connect_errors} failed), "
          f"statuses {dict(sorted(clients.statuses.items()))}", file=sys.stderr)
    clients.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
