"""Cost of munge authentication between the node hooks and the agent.

    PYTHONPATH=. .venv/bin/python benchmarks/transport_bench.py [--n 2000] [--n-cli 200]

Starts two private munged instances with one key (a "head node" and a "GPU node", so each
has its own replay cache, as on a cluster) and measures, per message:

* one munge encode + one decode, with libmunge (ctypes) and with the munge/unmunge programs;
* a whole round trip to a tiny agent stand-in that answers at once: plain line on a unix
  socket (today), and TCP on loopback with a munge envelope and a signed reply, with each
  backend on the node side (the agent side always uses libmunge);
* what a hook process pays once (it makes one request per run): importing
  slurm_colo.contracts.transport beside the client, loading libmunge, the first munge calls.

Needs munged (Debian: apt-get install munge). Run as root or as the user owning the keys.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

import private_munged  # noqa: E402

from slurm_colo.contracts import munge, transport  # noqa: E402
from slurm_colo.contracts.protocol import format_reply, format_request, parse_request  # noqa: E402

CLUSTER = "bench"
REQUEST = format_request(
    "JOBSTART", {"job": 1234567, "node": "gpu001", "gpus": [0, 1], "user": "alice", "uid": 1001}
)


def answer(line: bytes, uid: int) -> bytes:
    verb, _ = parse_request(line)
    return format_reply(verb, {"placement": {"gpu": 0, "mps_pct": 50, "mem_limit_mib": 8192}})


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1e3


def line(name: str, xs: list[float]) -> None:
    print(
        f"  {name:<34} median {pct(xs, 0.5):7.3f} ms   p90 {pct(xs, 0.9):7.3f} ms   "
        f"p99 {pct(xs, 0.99):7.3f} ms   (n={len(xs)})"
    )


def bench_munge(sock: str, n: int, backend: str) -> None:
    payload = b"slurm-colo/1 request\n" + CLUSTER.encode() + b"\n" + REQUEST
    enc, dec = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        c = munge.encode(payload, sock, transport.REQUEST_TTL_S, backend=backend)
        t1 = time.perf_counter()
        munge.decode(c, sock, backend=backend)
        t2 = time.perf_counter()
        enc.append(t1 - t0)
        dec.append(t2 - t1)
    line(f"{backend}: encode", enc)
    line(f"{backend}: decode", dec)
    line(f"{backend}: encode + decode", [a + b for a, b in zip(enc, dec)])


def serve(server_cls, address, respond):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            while True:
                got = self.rfile.readline(transport.MAX_REQUEST_ENVELOPE + 1)
                if not got:
                    return
                self.wfile.write(respond(got))

    class Server(socketserver.ThreadingMixIn, server_cls):
        daemon_threads = True
        allow_reuse_address = True

    s = Server(address, Handler)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def bench_round_trips(head, node, n: int, n_cli: int) -> None:
    d = tempfile.mkdtemp(prefix="transport-bench-")
    unix_path = os.path.join(d, "agent.sock")
    us = serve(socketserver.UnixStreamServer, unix_path, lambda got: answer(got, 0))
    tcp = serve(
        socketserver.TCPServer,
        ("127.0.0.1", 0),
        lambda got: transport.serve_line(
            got,
            CLUSTER,
            answer,
            decode=functools.partial(munge.decode, socket_path=head.socket),
            encode=functools.partial(
                munge.encode, socket_path=head.socket, ttl_s=transport.REPLY_TTL_S
            ),
        ),
    )
    tcp_addr = f"tcp:127.0.0.1:{tcp.server_address[1]}"
    signers = {0, os.getuid()}
    try:
        for name, address, count, backend in (
            ("unix, plain line", f"unix:{unix_path}", n, "lib"),
            ("tcp + munge, libmunge", tcp_addr, n, "lib"),
            ("tcp + munge, programs", tcp_addr, n_cli, "cli"),
        ):
            xs = []
            for _ in range(count):
                t0 = time.perf_counter()
                transport.round_trip(
                    address, REQUEST, 5.0, CLUSTER, node.socket, signers=signers, backend=backend
                )
                xs.append(time.perf_counter() - t0)
            line(f"round trip: {name}", xs)
    finally:
        for s in (us, tcp):
            s.shutdown()
            s.server_close()
        shutil.rmtree(d, ignore_errors=True)


def bench_startup(node_socket: str) -> None:
    """What a hook process pays once: it makes one request per run."""
    code = (
        "import time; t0=time.perf_counter(); import slurm_colo.contracts.client; "
        "t1=time.perf_counter(); from slurm_colo.contracts import munge, transport; "
        "t2=time.perf_counter(); munge.backend_in_use(); t3=time.perf_counter(); "
        f"munge.decode(munge.encode(b'x', {node_socket!r}), {node_socket!r}); "
        "t4=time.perf_counter(); print(t2-t1, t3-t2, t4-t3)"
    )
    runs: list[list[float]] = [[], [], []]
    # as installed: byte-code compiled once (the first run writes it, and is not counted)
    pyc = tempfile.mkdtemp(prefix="transport-bench-pyc-")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": pyc}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        for _ in range(20):
            out = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
            ).stdout.split()
            for xs, v in zip(runs, out):
                xs.append(float(v))
    finally:
        shutil.rmtree(pyc, ignore_errors=True)
    line("import transport (after client)", runs[0])
    line("load libmunge (ctypes)", runs[1])
    line("first encode + decode", runs[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="messages with libmunge")
    ap.add_argument("--n-cli", type=int, default=200, help="messages with the programs")
    args = ap.parse_args()
    head = private_munged.start()
    node = private_munged.start(key=head.key)
    try:
        version = subprocess.run(
            [private_munged.munged_binary(), "--version"], capture_output=True, text=True
        ).stdout.split()[0]
        print(f"{version}, {os.cpu_count()} CPUs")
        bench_munge(node.socket, args.n, "lib")
        bench_munge(node.socket, args.n_cli, "cli")
        bench_round_trips(head, node, args.n, args.n_cli)
        bench_startup(node.socket)
    finally:
        node.stop()
        head.stop()


if __name__ == "__main__":
    main()
