"""The ``nvidia-cuda-mps-control`` gate: build a command, run it in one place, parse apart.

Every call has a timeout, never uses a shell, and maps failures to :class:`MPSError`
subclasses: :class:`MpsNotRunning` (no daemon answers) and :class:`MpsHung` (the call
timed out). The same class drives the real NVIDIA binary and the emulator
(:mod:`slurm_colo.emulators.mps_control`); only the argv differs (:func:`control_argv`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from slurm_colo.errors import MPSError

PID_FILE = "nvidia-cuda-mps-control.pid"
_NOT_RUNNING_MARKERS = ("cannot find mps control daemon", "connection refused")
#: the control program answers a command it does not know with this and exit status 0
_UNKNOWN_COMMAND = "Unknown command"


class MpsNotRunning(MPSError):
    """No MPS control daemon answers on the pipe directory."""


class MpsHung(MPSError):
    """An MPS control call did not finish within its timeout."""


class MpsReplyMismatch(MPSError):
    """A batched control session did not give one reply line per command."""


def emulator_argv() -> list[str]:
    """The emulator run as a plain file with -I -S: standard library only, fast start (it
    stands in for NVIDIA's small C program; its command path imports only ``os`` and
    ``_socket``)."""
    return [
        sys.executable,
        "-I",
        "-S",
        str(Path(__file__).parents[2] / "emulators" / "mps_control.py"),
    ]


def control_argv(backend: str, mps_control: str) -> list[str]:
    """argv prefix for the control program. ``emulator`` with the default binary name runs
    the bundled emulator; otherwise ``mps_control`` is used as given (the lab points it at
    contrib/lab/bin/nvidia-cuda-mps-control)."""
    if backend == "emulator" and mps_control == "nvidia-cuda-mps-control":
        return emulator_argv()
    return [mps_control]


# -- parsing (pure) -------------------------------------------------------------------------


def parse_pid_list(text: str) -> list[int]:
    """``get_server_list`` / ``get_client_list``: one PID per line."""
    return [int(w) for line in text.splitlines() for w in line.split() if w.isdigit()]


def parse_server_status(text: str) -> str:
    """``get_server_status PID``: ACTIVE, FAULT, INITIALIZING (or UNKNOWN)."""
    word = text.strip().split()[0].upper() if text.strip() else ""
    return word if word in ("ACTIVE", "FAULT", "INITIALIZING") else "UNKNOWN"


def parse_device_client_list(text: str) -> dict[int, list[int]]:
    """``get_device_client_list``: per device the daemon sees, the PIDs of its clients.

    The reply is a header per device, ``[<index>] <PCI bus>, <name>``, followed by one
    ``<client PID>.<context>`` line per client context (index as the daemon numbers its
    visible devices: 0 for a daemon of one GPU). A PID with several contexts is listed once.
    """
    out: dict[int, list[int]] = {}
    device: int | None = None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            index = line[1 : line.find("]")]
            device = int(index) if index.isdigit() else None
            if device is not None:
                out.setdefault(device, [])
            continue
        pid = line.partition(".")[0]
        if device is not None and pid.isdigit() and int(pid) not in out[device]:
            out[device].append(int(pid))
    return out


def parse_fault_lines(log_text: str) -> list[str]:
    """Lines of ``control.log`` or ``server.log`` that report a fatal fault or a server
    that died, one line per event.

    A fatal GPU error shows in ``server.log`` as ``Client {PID: …} encountered a fatal GPU
    error.``, followed by ``Server is handling a fatal GPU error.`` (the same event, left
    out here) and the clients torn down; the server itself keeps running. A server that
    dies (killed, crashed) shows in ``control.log`` as ``Server PID exited with status 0``
    like one that was stopped: only a stopped one has ``Try shutting down server PID``
    logged before it, so an exit without that line, or with a non-zero status, is a fault.
    """
    out = []
    asked: set[str] = set()
    for line in log_text.splitlines():
        low = line.lower()
        words = low.replace(",", " ").split()
        stopping = _next_word(words, "server") if "try shutting down server" in low else None
        if stopping is not None:
            asked.add(stopping)
            continue
        fault = ("fatal" in low or " fault" in low) and "server is handling" not in low
        died = False
        if "exited with status" in low and "] server " in low:
            # server.log is the job user's file: a line need not have the usual words
            pid = _next_word(words[::-1], "exited")
            died = not low.rstrip().endswith("status 0") or pid is None or pid not in asked
        if fault or died:
            out.append(line.strip())
    return out


def _next_word(words: list[str], word: str) -> str | None:
    """The word after the first ``word`` in ``words``; None when there is none."""
    try:
        i = words.index(word)
    except ValueError:
        return None
    return words[i + 1] if i + 1 < len(words) else None


def log_line_time(line: str) -> float | None:
    """Epoch seconds of a ``[YYYY-MM-DD HH:MM:SS.mmm ...]`` log line (local time), or None."""
    import time

    if len(line) < 24 or line[0] != "[":
        return None
    try:
        base = time.mktime(time.strptime(line[1:20], "%Y-%m-%d %H:%M:%S"))
        ms = int(line[21:24]) if line[20] == "." else 0
    except (ValueError, OverflowError):
        return None
    return base + ms / 1000.0


def format_mem_limit(gib: float) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` value for device 0, e.g. ``0=12G`` / ``0=1536M``."""
    mib = max(1, int(round(gib * 1024)))
    return f"0={mib // 1024}G" if mib % 1024 == 0 else f"0={mib}M"


# -- the gate -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MpsControl:
    """One GPU's MPS control daemon, addressed by its pipe and log directories."""

    argv: tuple[str, ...]
    pipe_dir: Path
    log_dir: Path
    #: what the daemon sees as CUDA_VISIBLE_DEVICES (the GPU's UUID on a real node)
    device: str
    timeout_s: float = 5.0
    extra_env: tuple[tuple[str, str], ...] = ()

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        env.update(
            CUDA_MPS_PIPE_DIRECTORY=str(self.pipe_dir),
            CUDA_MPS_LOG_DIRECTORY=str(self.log_dir),
            CUDA_VISIBLE_DEVICES=self.device,
        )
        env.update(dict(self.extra_env))
        return env

    def _run(self, args: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        argv = [*self.argv, *args]
        try:
            return subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self.env(),
                close_fds=True,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise MpsHung(
                f"MPS control '{' '.join(args) or (stdin or '').strip()}' on "
                f"{self.pipe_dir} timed out after {self.timeout_s:.1f}s"
            ) from None
        except OSError as e:
            raise MPSError(
                f"cannot run MPS control program {argv[0]}: {e.strerror}",
                hint="set node.mps_control to the nvidia-cuda-mps-control path",
            ) from None

    def start(self) -> None:
        """Start the control daemon (``-d``); it forks and the call returns at once."""
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cp = self._run(["-d"], None)
        if cp.returncode != 0:
            raise MPSError(
                f"MPS control daemon for {self.device} did not start (exit "
                f"{cp.returncode}): {(cp.stderr or cp.stdout).strip()[:200]}"
            )

    def _session(self, lines: list[str]) -> str:
        """One control session (one program start, one timeout): the commands on stdin, one
        per line, as in NVIDIA's interactive mode; the replies, in order, without
        delimiters. Raises MpsNotRunning / MpsHung / MPSError."""
        cp = self._run([], "".join(line.rstrip("\n") + "\n" for line in lines))
        out = cp.stdout.strip()
        if any(m in (out + cp.stderr).lower() for m in _NOT_RUNNING_MARKERS):
            raise MpsNotRunning(f"no MPS control daemon answers on {self.pipe_dir}")
        refused = next((r for r in out.splitlines() if r.startswith(_UNKNOWN_COMMAND)), "")
        if cp.returncode != 0 or refused:
            raise MPSError(
                f"MPS control '{'; '.join(x.strip() for x in lines)}' failed (exit "
                f"{cp.returncode}): {(refused or out or cp.stderr).strip()[:200]}"
            )
        return out

    def command(self, line: str) -> str:
        """Send one command on stdin; the reply text. Raises MpsNotRunning / MpsHung."""
        return self._session([line])

    def commands(self, lines: list[str]) -> list[str]:
        """Several one-line-reply commands in one session: one program start instead of
        ``len(lines)``. Replies carry no delimiter, so this is only for commands whose
        reply is exactly one line (``get_server_status``, the ``get_*_percentage`` ones);
        a reply count that does not match raises :class:`MpsReplyMismatch`."""
        if not lines:
            return []
        out = self._session(lines)
        replies = out.splitlines() if out else []
        if len(replies) != len(lines):
            raise MpsReplyMismatch(
                f"{len(lines)} MPS control commands got {len(replies)} reply lines: {out[:200]!r}"
            )
        return [r.strip() for r in replies]

    def server_list(self) -> list[int]:
        return parse_pid_list(self.command("get_server_list"))

    def server_status(self, pid: int) -> str:
        return parse_server_status(self.command(f"get_server_status {pid}"))

    def server_statuses(self, pids: list[int]) -> dict[int, str]:
        """Status of each server, asked in one session; one call per server only if the
        replies cannot be told apart."""
        try:
            replies = self.commands([f"get_server_status {pid}" for pid in pids])
        except MpsReplyMismatch:
            return {pid: self.server_status(pid) for pid in pids}
        return {pid: parse_server_status(r) for pid, r in zip(pids, replies)}

    def client_list(self, server_pid: int) -> list[int]:
        return parse_pid_list(self.command(f"get_client_list {server_pid}"))

    def device_clients(self) -> dict[int, list[int]]:
        return parse_device_client_list(self.command("get_device_client_list"))

    def start_server(self, uid: int) -> None:
        self.command(f"start_server -uid {uid}")

    def set_default_thread_pct(self, pct: int) -> None:
        self.command(f"set_default_active_thread_percentage {pct}")

    def quit(self) -> None:
        self.command("quit")

    def daemon_pid(self) -> int | None:
        """PID from the daemon's pid file in the pipe directory (None if absent).

        The pipe directory belongs to the job user, so the file is read without following
        symlinks and with a size cap; callers prefer the PID kept in root's state file."""
        from slurm_colo.fsutil import read_small

        raw = read_small(self.pipe_dir / PID_FILE, 64)
        try:
            return int(raw.strip()) if raw else None
        except ValueError:
            return None

    def log_text(self, since_offset: int = 0, name: str = "control.log") -> str:
        """What the daemon (or, ``server.log``, its servers) logged after ``since_offset``;
        at most 4 MiB, never through a symlink."""
        try:
            fd = os.open(self.log_dir / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return ""
        try:
            os.lseek(fd, since_offset, os.SEEK_SET)
            return os.read(fd, 4 * 1024 * 1024).decode(errors="replace")
        except OSError:
            return ""
        finally:
            os.close(fd)

    def log_size(self, name: str = "control.log") -> int:
        try:
            return (self.log_dir / name).stat().st_size
        except OSError:
            return 0
