"""The agent's listeners: its unix socket, the munge-authenticated TCP ports of
``agent.listen`` and the Prometheus page. Sockets and threads only; every line is answered
by the :class:`~slurm_colo.agent.server.Agent` handed in.
"""

from __future__ import annotations

import logging
import os
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from slurm_colo.config import AgentConfig
from slurm_colo.errors import ColoError

log = logging.getLogger("slurm_colo.agent")
#: an idle connection is closed after this long (the Lua hook keeps its connection open)
IDLE_CONNECTION_S = 300.0
MAX_LINE = 64 * 1024

#: a request line and the caller's uid -> the reply, and what to run once it is sent (told
#: whether it was delivered)
Answer = Callable[[bytes, "int | None"], "tuple[bytes, Callable[[bool], None]]"]


def peer_uid(sock: socket.socket) -> int | None:
    try:
        data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", data)[1]
    except OSError:
        return None


#: connections one user may hold open on the unix socket at once (the Lua hook and the
#: node hooks, run by trusted users, are not counted)
MAX_CONNECTIONS_PER_USER = 32


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """A thread per connection, at most ``per_user`` at once for a user ``exempt`` does not
    clear: the socket is world-connectable, and a user holding connections open must not
    take the threads the hooks need. One more is closed at once (and logged once a
    minute at most)."""

    daemon_threads = True

    def __init__(
        self,
        path: str,
        handler: type[socketserver.BaseRequestHandler],
        per_user: int,
        exempt: Callable[[int | None], bool],
    ) -> None:
        super().__init__(path, handler)
        self.per_user = per_user
        self.exempt = exempt
        self._open: dict[int | None, int] = {}
        #: each counted connection's user
        self._uid_of: dict[Any, int | None] = {}
        self._count_lock = threading.Lock()
        self._said = 0.0

    def process_request(self, request: Any, client_address: Any) -> None:
        uid = peer_uid(request)
        if not self.exempt(uid):
            with self._count_lock:
                n = self._open.get(uid, 0)
                full = n >= self.per_user
                if not full:
                    self._open[uid] = n + 1
                    self._uid_of[request] = uid
                say = full and time.monotonic() - self._said > 60
                if say:
                    self._said = time.monotonic()
            if full:
                if say:
                    log.warning(
                        "uid %s holds %d connections to the agent's socket open; one more "
                        "closed (at most %d per user)",
                        uid,
                        n,
                        self.per_user,
                    )
                self.shutdown_request(request)
                return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to start: nothing will end this connection
            self._closed(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed(request)

    def _closed(self, request: Any) -> None:
        with self._count_lock:
            if request in self._uid_of:
                uid = self._uid_of.pop(request)
                left = self._open.get(uid, 1) - 1
                if left > 0:
                    self._open[uid] = left
                else:
                    self._open.pop(uid, None)


class _TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def unix_server(
    path: Path,
    answer: Answer,
    stop: threading.Event,
    per_user: int = MAX_CONNECTIONS_PER_USER,
    exempt: Callable[[int | None], bool] = lambda uid: False,
) -> socketserver.UnixStreamServer:
    """The agent's unix socket (world-connectable: anyone may ask EXPLAIN/STATUS; the
    caller's uid, from SO_PEERCRED, decides the rest), with at most ``per_user``
    connections open per user that ``exempt`` does not clear. A socket left by a dead
    agent is replaced; a live one is an error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            raise ColoError(f"another agent is already listening on {path}")
        except (ConnectionRefusedError, FileNotFoundError):
            path.unlink()
        finally:
            probe.close()

    class Handler(socketserver.StreamRequestHandler):
        timeout = IDLE_CONNECTION_S

        def handle(self) -> None:
            uid = peer_uid(self.request)
            while not stop.is_set():
                try:
                    line = self.rfile.readline(MAX_LINE + 1)
                except (TimeoutError, OSError):
                    return
                if not line:
                    return
                reply, after = answer(line, uid)
                delivered = False
                try:
                    self.wfile.write(reply)  # to a caller that gave up: EPIPE
                    delivered = True
                except OSError:
                    return
                finally:
                    after(delivered)

    server = _UnixServer(str(path), Handler, per_user, exempt)
    os.chmod(path, 0o666)
    return server


def tcp_servers(
    cfg: AgentConfig, handle: Callable[[bytes, int | None], bytes], stop: threading.Event
) -> list[socketserver.TCPServer]:
    """A running server thread per ``tcp:`` address of ``agent.listen``: each line is a
    munge envelope, answered by ``handle`` with the uid munged vouches for, and the reply
    is signed (:func:`slurm_colo.contracts.transport.serve_line`)."""
    from slurm_colo.contracts import munge, transport
    from slurm_colo.contracts.address import TCP, parse_address

    sock = cfg.munge_socket or None

    def decode(cred: str) -> munge.Credential:
        return munge.decode(cred, sock)

    def encode(payload: bytes) -> str:
        return munge.encode(payload, sock, transport.REPLY_TTL_S)

    class Handler(socketserver.StreamRequestHandler):
        timeout = IDLE_CONNECTION_S

        def handle(self) -> None:
            peer = f"{self.client_address[0]}:{self.client_address[1]}"
            refused = transport.refusal_logger(log, peer)
            while not stop.is_set():
                try:
                    line = self.rfile.readline(transport.MAX_REQUEST_ENVELOPE + 1)
                except (TimeoutError, OSError):
                    return
                if not line:
                    return
                reply = transport.serve_line(
                    line, cfg.cluster, handle, decode=decode, encode=encode, on_refusal=refused
                )
                try:
                    self.wfile.write(reply)
                except OSError:
                    return

    out: list[socketserver.TCPServer] = []
    for text in cfg.listen:
        addr = parse_address(text)
        if addr.scheme != TCP:
            continue
        family = socket.AF_INET6 if ":" in addr.host else socket.AF_INET
        server_cls = type("TcpServer", (_TcpServer,), {"address_family": family})
        srv = server_cls((addr.host, addr.port), Handler)
        out.append(srv)
        threading.Thread(
            target=srv.serve_forever, kwargs={"poll_interval": 0.2}, name=f"tcp {text}", daemon=True
        ).start()
        log.info("agent listening on %s (munge-authenticated, cluster %s)", text, cfg.cluster)
    return out


def metrics_server(listen: str, status: Callable[[], dict[str, Any]]) -> ThreadingHTTPServer:
    """The Prometheus text page at ``http://LISTEN/metrics``, in a thread of its own."""
    host, _, port = listen.rpartition(":")

    class MetricsHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            from slurm_colo.metrics import render

            body = render(status()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    http = ThreadingHTTPServer((host or "127.0.0.1", int(port)), MetricsHandler)
    threading.Thread(target=http.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics on http://%s/metrics", listen)
    return http
