"""Emulator of ``nvidia-cuda-mps-control`` for tests and the lab (standard library only).

Run exactly like the NVIDIA binary: ``-d`` starts the control daemon in the background,
``-f`` in the foreground, and with no option the program reads commands on stdin, one per
line, sends each to the daemon found through ``CUDA_MPS_PIPE_DIRECTORY`` and prints the
replies in order. Logs go to ``$CUDA_MPS_LOG_DIRECTORY/control.log``. See docs/node.md
for which behaviours follow NVIDIA's documentation and which are our guesses.

Per-UID semantics: at most one MPS server runs at a time; a client of another UID is
queued until the active server has no clients, then that server is stopped and a server
for the queued UID is started. Servers are real (forked, idle) processes named
``nvidia-cuda-mps-server`` so process scans see them.

``slurm-colo-mps-emulator run -- CMD`` makes CMD an MPS client (the lab's stand-in for a
CUDA program under MPS: it registers its PID, waits in the queue if another UID is
served, then execs CMD).

Emulator-only commands (prefix ``emu_``): ``emu_client_connect UID PID``,
``emu_client_exit PID``, ``emu_fault hang|crash|client_fatal|client_fatal_slow``,
``emu_state`` (JSON).
Start-up fault switch: ``SLURM_COLO_MPS_EMU_FAULT`` = ``hang`` (never answers),
``crash-after=SECONDS`` (dies without cleanup; repeated starts give a restart loop).
Call trace (benchmarks): with ``SLURM_COLO_MPS_EMU_TRACE=FILE`` every run appends
``<parent pid> <mode> <commands>`` to FILE (mode ``cmd``, ``-d``, ``-f`` or ``run``).

Start-up cost: this file stands in for a small C program that every MPS control call
runs, so it is kept small (it is compiled on every run as a script) and its command path
imports only ``os`` and ``_socket``. The daemon (``-d``/``-f``) and ``run`` live in
:mod:`.mps_server`, loaded (from cached bytecode) only for those.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs every call
if TYPE_CHECKING:
    from types import ModuleType

PID_FILE = "nvidia-cuda-mps-control.pid"
SOCKET = "control"
NOT_RUNNING = "Cannot find MPS control daemon process"
TRACE_ENV = "SLURM_COLO_MPS_EMU_TRACE"


def _trace(mode: str, commands: int) -> None:
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{os.getppid()} {mode} {commands}\n".encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _daemon_module() -> ModuleType:
    """:mod:`.mps_server`: by import when this file was imported as
    ``slurm_colo.emulators.mps_control``, else (run as a file with ``-I -S``, nothing of ours
    on ``sys.path``) loaded from the same directory by path."""
    if __package__:
        from slurm_colo.emulators import mps_server

        return mps_server
    import importlib.util

    name = "mps_server"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"{name}.py not found next to {__file__}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _client() -> int:
    """Interactive mode: each non-empty stdin line is one command, one connection to the
    daemon each (the daemon closes it after its reply); replies printed in order."""
    import _socket

    path = os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"), SOCKET)
    rc = 0
    out_lines: list[str] = []
    not_running = False
    sent = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        sent += 1
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.sendall(line.rstrip("\n").encode() + b"\n")
            chunks: list[bytes] = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except OSError:
            not_running = True
            rc = 1
            break
        finally:
            s.close()
        if not chunks:  # the daemon died while answering
            out_lines.append("Lost connection to the MPS control daemon")
            rc = 1
            break
        text = b"".join(chunks).decode(errors="replace").rstrip("\n")
        if text:
            out_lines.append(text)
        if text.startswith("Invalid arguments"):
            rc = 1  # an unknown command exits 0, as NVIDIA's program does
    if out_lines:
        sys.stdout.write("\n".join(out_lines) + "\n")
    if not_running:  # on stderr, as NVIDIA's program prints it
        sys.stderr.write(NOT_RUNNING + "\n")
    _trace("cmd", sent)
    return rc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "-h" in args or "--help" in args:
        print(__doc__)
        return 0
    if args[:1] == ["run"]:
        _trace("run", 1)
        rest = args[1:]
        return int(_daemon_module()._run_client(rest[1:] if rest[:1] == ["--"] else rest))
    if "-d" in args or "-f" in args:
        _trace("-d" if "-d" in args else "-f", 0)
        return int(_daemon_module()._run_daemon(background="-d" in args))
    return _client()


if __name__ == "__main__":
    sys.exit(main())
