"""The daemon side of the ``nvidia-cuda-mps-control`` emulator (standard library only).

:mod:`.mps_control` is the executable: it answers control commands itself (the common,
fast case) and loads this module only to run a control daemon (``-d`` / ``-f``) or to make
a command an MPS client (``run -- CMD``). Kept apart so that each control call, which
stands in for NVIDIA's small C program, starts an interpreter that compiles and imports
as little as possible. No relative imports: the executable loads this file by path.

Per-UID semantics: at most one MPS server runs at a time; a client of another UID is
queued until the active server has no clients, then that server is stopped and a server
for the queued UID is started. Servers are real (forked, idle) processes named
``nvidia-cuda-mps-server`` so process scans see them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

FAULT_ENV = "SLURM_COLO_MPS_EMU_FAULT"
PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"


def _dirs() -> tuple[str, str]:
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    log = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
    return pipe, log


def _set_name(name: str) -> None:
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


class Daemon:
    def __init__(self, pipe_dir: str, log_dir: str) -> None:
        self.pipe_dir, self.log_dir = pipe_dir, log_dir
        self.servers: dict[int, dict] = {}  # pid -> {"uid", "clients": set, "status", "pct"}
        self.queue: list[tuple[int, int]] = []  # (uid, client pid) waiting for a server
        self.default_pct = 100.0
        self.default_mem: dict[str, str] = {}
        self.hang = False
        self.crash_at: float | None = None
        fault = os.environ.get(FAULT_ENV, "")
        if fault == "hang":
            self.hang = True
        elif fault.startswith("crash-after="):
            self.crash_at = time.time() + float(fault.split("=", 1)[1])
        self.uuid = os.environ.get("CUDA_VISIBLE_DEVICES", "0")

    # -- logging ---------------------------------------------------------------------------
    def log(self, msg: str, file: str = "control.log", who: str = "") -> None:
        """One line as NVIDIA's daemon writes it: ``[time Control   PID] msg`` in
        control.log, ``[time Server   PID] msg`` (``who``) in server.log."""
        t = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"
        try:
            with open(os.path.join(self.log_dir, file), "a") as f:
                f.write(f"[{stamp} {who or f'Control {os.getpid():5d}'}] {msg}\n")
        except OSError:
            pass

    # -- servers ---------------------------------------------------------------------------
    def _start_server(self, uid: int) -> int:
        pid = os.fork()
        if pid == 0:  # the server: an idle process until told to stop
            os.closerange(3, 4096)  # drop the daemon's sockets (a held reply would never end)
            _set_name("nvidia-cuda-mps-server")
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            while True:
                signal.pause()
        self.servers[pid] = {
            "uid": uid,
            "clients": set(),
            "status": "ACTIVE",
            "pct": self.default_pct,
        }
        self.log(f"Starting new server {pid} for user {uid}")
        return pid

    def _stop_server(self, pid: int) -> None:
        self.log(f"Try shutting down server {pid}, backoff is disabled")
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self.servers.pop(pid, None)
        self.log(f"Server {pid} exited with status 0")

    def _server_for(self, uid: int) -> int | None:
        return next(
            (p for p, s in self.servers.items() if s["uid"] == uid and s["status"] == "ACTIVE"),
            None,
        )

    def _housekeeping(self) -> None:
        for pid, s in list(self.servers.items()):
            s["clients"] = {c for c in s["clients"] if _alive(c)}
            if s["status"] == "FAULT" and not s["clients"]:
                # as on a real GPU: the server outlives the fault; once the clients it
                # tore down are gone it drops its context and serves new clients again
                s["status"] = "ACTIVE"
                self.log("Destroy server context on device 0", "server.log", f"Server {pid:5d}")
        busy = any(s["clients"] for s in self.servers.values())
        if self.queue and not busy:
            uid = self.queue[0][0]
            for pid in list(self.servers):
                if self.servers[pid]["uid"] != uid:
                    self._stop_server(pid)
            spid = self._server_for(uid) or self._start_server(uid)
            for quid, cpid in [q for q in self.queue if q[0] == uid]:
                self.servers[spid]["clients"].add(cpid)
                self.log(f"New client {cpid} connected to server {spid} (was queued)")
            self.queue = [q for q in self.queue if q[0] != uid]

    def _connect(self, uid: int, cpid: int) -> str:
        spid = self._server_for(uid)
        if spid is None:
            if any(s["clients"] and s["uid"] != uid for s in self.servers.values()):
                self.queue.append((uid, cpid))
                self.log(
                    f"NEW CLIENT {cpid} from user {uid}: Server is not ready, push client "
                    "to pending list"
                )
                return "QUEUED"
            for pid in [p for p, s in self.servers.items() if s["uid"] != uid]:
                self._stop_server(pid)
            spid = self._start_server(uid)
        self.servers[spid]["clients"].add(cpid)
        self.log(f"New client {cpid} connected to server {spid}")
        return f"OK {spid}"

    # -- commands --------------------------------------------------------------------------
    def handle(self, line: str) -> str | None:
        """The reply to one command; None means quit after replying."""
        self._reap()  # a server that died is gone from every reply, as NVIDIA's daemon knows
        self._housekeeping()
        words = line.split()
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        if not cmd.startswith("emu_"):  # the emulator's own hooks are not NVIDIA commands
            self.log(f"Cmd:{line.strip()}")
        try:
            if cmd == "get_server_list":
                return "\n".join(str(p) for p in self.servers)
            if cmd == "get_server_status":
                s = self.servers.get(int(args[0]))
                return s["status"] if s else f"Server {args[0]} not found"
            if cmd == "start_server":
                uid = int(args[args.index("-uid") + 1])
                if self._server_for(uid):
                    return ""
                if any(s["clients"] and s["uid"] != uid for s in self.servers.values()):
                    self.queue.append((uid, -1))
                    return ""
                for pid in [p for p, s in self.servers.items() if s["uid"] != uid]:
                    self._stop_server(pid)
                self._start_server(uid)
                return ""
            if cmd == "get_client_list":
                s = self.servers.get(int(args[0]))
                return "\n".join(str(c) for c in sorted(s["clients"])) if s else ""
            if cmd == "get_device_client_list":
                pids = [int(args[0])] if args else list(self.servers)
                clients = sorted(
                    c for p in pids for c in self.servers.get(p, {}).get("clients", ())
                )
                # a header per device, then a PID.context line per client (context 1:
                # a CUDA client's first context on the device)
                return "\n".join(
                    [f"[0] 00:00.0, MPS emulator {self.uuid}", *(f"{c}.1" for c in clients)]
                )
            if cmd == "set_default_active_thread_percentage":
                self.default_pct = max(0.0, min(100.0, float(args[0])))
                return f"{self.default_pct:.1f}"
            if cmd == "get_default_active_thread_percentage":
                return f"{self.default_pct:.1f}"
            if cmd == "set_active_thread_percentage":
                s = self.servers[int(args[0])]
                s["pct"] = max(0.0, min(100.0, float(args[1])))
                return f"{s['pct']:.1f}"
            if cmd == "get_active_thread_percentage":
                return f"{self.servers[int(args[0])]['pct']:.1f}"
            if cmd == "set_default_device_pinned_mem_limit":
                self.default_mem[args[0]] = args[1]
                return ""
            if cmd == "get_default_device_pinned_mem_limit":
                return self.default_mem.get(args[0], "0")
            if cmd == "terminate_client":
                self.servers[int(args[0])]["clients"].discard(int(args[1]))
                _kill(int(args[1]))
                return ""
            if cmd == "quit":
                return None
            if cmd == "emu_client_connect":
                return self._connect(int(args[0]), int(args[1]))
            if cmd == "emu_client_exit":
                for s in self.servers.values():
                    s["clients"].discard(int(args[0]))
                self.queue = [q for q in self.queue if q[1] != int(args[0])]
                self._housekeeping()
                return ""
            if cmd == "emu_fault":
                return self._fault(args[0])
            if cmd == "emu_state":
                return json.dumps(
                    {
                        "servers": {
                            str(p): {
                                "uid": s["uid"],
                                "status": s["status"],
                                "clients": sorted(s["clients"]),
                                "pct": s["pct"],
                            }
                            for p, s in self.servers.items()
                        },
                        "queue": self.queue,
                        "default_pct": self.default_pct,
                        "default_mem": self.default_mem,
                    }
                )
        except (IndexError, ValueError, KeyError):
            return f"Invalid arguments for {cmd}"
        return f'Unknown command "{cmd}"'

    def _fault(self, kind: str) -> str:
        if kind == "hang":
            self.hang = True
        elif kind == "crash":
            self.log("emulator: simulated crash")
            os._exit(137)
        elif kind in ("client_fatal", "client_fatal_slow"):
            # _slow: the clients get the error but take their time to exit (the server
            # stays in FAULT state meanwhile)
            for pid, s in self.servers.items():
                if s["clients"]:
                    s["status"] = "FAULT"
                    clients = sorted(s["clients"])
                    for msg in (
                        f"Client {{PID: {clients[0]}, Context: 1}} encountered a fatal GPU error.",
                        "Server is handling a fatal GPU error.",
                        *(
                            f"Client {{PID: {c}, Context ID: 1}} on device 0 to be torn down"
                            for c in clients
                        ),
                        "The following client process have a sticky error set:",
                        *(str(c) for c in clients),
                    ):
                        self.log(msg, "server.log", who=f"Server {pid:5d}")
                    if kind == "client_fatal":
                        for c in s["clients"]:
                            _kill(c)
        else:
            return f"Unknown fault: {kind}"
        return ""

    def shutdown(self) -> None:
        for pid in list(self.servers):
            self._stop_server(pid)
        for name in (SOCKET, PID_FILE):
            try:
                os.unlink(os.path.join(self.pipe_dir, name))
            except OSError:
                pass
        self.log("Exit")

    # -- main loop -------------------------------------------------------------------------
    def serve(self, ready_fd: int | None = None) -> int:
        path = os.path.join(self.pipe_dir, SOCKET)
        try:
            os.unlink(path)
        except OSError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        sock.listen(16)
        sock.settimeout(0.1)
        with open(os.path.join(self.pipe_dir, PID_FILE), "w") as f:
            f.write(f"{os.getpid()}\n")
        self.log(f"Starting control daemon using socket {path}")
        self.log(
            f"To connect CUDA client to control daemon, set env "
            f"CUDA_MPS_PIPE_DIRECTORY={self.pipe_dir}"
        )
        if ready_fd is not None:
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        while True:
            if self.crash_at is not None and time.time() >= self.crash_at:
                self.log("emulator: simulated crash")
                os._exit(137)
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                self._reap()
                self._housekeeping()
                continue
            with conn:
                if self.hang:
                    while True:
                        time.sleep(3600)
                conn.settimeout(2.0)
                try:
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    continue
                reply = self.handle(data.decode(errors="replace"))
                try:
                    conn.sendall(((reply or "") + "\n").encode())
                except OSError:
                    pass
                if reply is None:
                    sock.close()
                    self.shutdown()
                    return 0

    def _reap(self) -> None:
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid in self.servers:
                    # as NVIDIA's daemon logs a server that died unasked (killed, say):
                    # status 0, with no "Try shutting down" before it
                    self.servers.pop(pid)
                    self.log(f"Server {pid} exited with status 0")
        except ChildProcessError:
            pass


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _daemon_running(pipe_dir: str) -> bool:
    try:
        with open(os.path.join(pipe_dir, PID_FILE)) as f:
            return _alive(int(f.read().strip()))
    except (OSError, ValueError):
        return False


def _run_daemon(background: bool) -> int:
    pipe_dir, log_dir = _dirs()
    for d in (pipe_dir, log_dir):
        os.makedirs(d, exist_ok=True)
    if _daemon_running(pipe_dir):
        print("An instance of this daemon is already running")  # on stdout, as NVIDIA's
        return 1
    if not background:
        _set_name("nvidia-cuda-mps-control")
        return Daemon(pipe_dir, log_dir).serve()
    r, w = os.pipe()
    if os.fork() > 0:  # the caller: wait until the daemon listens
        os.close(w)
        ok = os.read(r, 1)
        return 0 if ok == b"1" else 1
    os.close(r)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _set_name("nvidia-cuda-mps-control")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    try:
        os._exit(Daemon(pipe_dir, log_dir).serve(ready_fd=w))
    except BaseException:
        os._exit(1)


def _ask(line: str) -> str | None:
    """One command to the daemon of $CUDA_MPS_PIPE_DIRECTORY; None if none answers."""
    pipe_dir, _ = _dirs()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5.0)
            s.connect(os.path.join(pipe_dir, SOCKET))
            s.sendall(line.encode() + b"\n")
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
    except OSError:
        return None
    return out.decode(errors="replace").strip()


def _run_client(cmd: list[str]) -> int:
    """``run -- CMD``: become an MPS client of the daemon, then exec CMD (same PID).

    Like a CUDA program under MPS: with no daemon the command runs without MPS; a client
    of another UID than the active server's waits in the queue until it is served.
    """
    if not cmd:
        print("usage: slurm-colo-mps-emulator run -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    pid = os.getpid()
    reply = _ask(f"emu_client_connect {os.getuid()} {pid}")
    while reply == "QUEUED":
        time.sleep(0.2)
        state = _ask("emu_state")
        if state is None:
            break
        try:
            servers = json.loads(state)["servers"].values()
        except (ValueError, KeyError):
            break
        if any(pid in s["clients"] for s in servers):
            break
    os.execvp(cmd[0], cmd)
    return 127  # not reached
