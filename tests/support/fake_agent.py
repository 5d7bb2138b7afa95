"""A stand-in agent on a unix socket that answers every request with a fixed reply
(or nothing), for the tests of the hook's fault handling. Each connection is served by a
thread of its own, so a slow answer on one does not hold up the next."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path


class FakeAgent:
    def __init__(
        self,
        path: Path,
        reply: bytes | None,
        delay: float = 0.0,
        keep_open: bool = False,
        delays: list[float] | None = None,
    ) -> None:
        """``delays``: the wait before the answer to the first, second, ... request (the
        last one for every request after them); ``delay`` for all of them otherwise."""
        self.path = Path(path)
        self.keep_open = keep_open
        self.connections = 0
        self.reply = reply
        self.delays = delays or [delay]
        self.requests: list[str] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(self.path))
        os.chmod(self.path, 0o666)
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c: socket.socket) -> None:
        with c:
            c.settimeout(2)
            try:
                while True:
                    data = c.recv(65536)
                    if not data:
                        break
                    n = len(self.requests)
                    self.requests.append(data.decode("utf-8", "replace"))
                    time.sleep(self.delays[min(n, len(self.delays) - 1)])
                    if self.reply is not None:
                        c.sendall(self.reply)
                    if not self.keep_open:
                        break
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()
        self.path.unlink(missing_ok=True)
