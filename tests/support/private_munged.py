"""A private munged for tests: its own key, socket and files in a temporary directory.

Tests never use the host's munged (a lab or a site may depend on it). :func:`start` fails
the test, with the reason, when munged is not installed or does not come up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Munged:
    dir: Path
    key: Path
    socket: str
    proc: subprocess.Popen

    def stop(self) -> None:
        """Stop this munged (by its own PID) and remove its directory."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def munged_binary() -> str:
    path = shutil.which("munged") or next(
        (p for p in ("/usr/sbin/munged", "/usr/local/sbin/munged") if os.access(p, os.X_OK)), None
    )
    if not path:
        pytest.fail(
            "munged is not installed; these tests need a real munged "
            "(Debian: apt-get install munge libmunge2)",
            pytrace=False,
        )
    return path


def make_key(path: Path) -> Path:
    """A 1024-byte random key, as the munge docs make it (dd from /dev/urandom)."""
    subprocess.run(
        ["dd", "if=/dev/urandom", f"of={path}", "bs=1024", "count=1", "status=none"], check=True
    )
    path.chmod(0o600)
    return path


def start(key: Path | None = None, max_ttl: int | None = None) -> Munged:
    """Start munged in the foreground as the current user. ``key``: share another
    instance's key (two "hosts" of one cluster); None makes a new one (another cluster)."""
    binary = munged_binary()
    # short path: a unix socket path is limited to 108 bytes; munged wants the socket's
    # directory searchable by all
    d = Path(tempfile.mkdtemp(prefix="munged-", dir="/tmp"))
    d.chmod(0o755)
    key_file = d / "munge.key"
    if key is None:
        make_key(key_file)
    else:
        shutil.copyfile(key, key_file)
        key_file.chmod(0o600)
    sock = str(d / "munge.socket")
    argv = [
        binary,
        "--foreground",
        f"--socket={sock}",
        f"--key-file={key_file}",
        f"--pid-file={d / 'munged.pid'}",
        f"--seed-file={d / 'munged.seed'}",
        f"--log-file={d / 'munged.log'}",
    ]
    if max_ttl is not None:
        argv.append(f"--max-ttl={max_ttl}")
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    m = Munged(d, key_file, sock, proc)
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None else ""
            log_file = d / "munged.log"
            log = log_file.read_text(errors="replace") if log_file.exists() else ""
            m.stop()
            pytest.fail(f"private munged did not start: {out.strip()} {log[-600:]}", pytrace=False)
        time.sleep(0.02)
    return m
