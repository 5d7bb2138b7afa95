"""Transport between node hooks and the agent (slurm_colo.contracts.transport): addresses,
munge envelopes, signed replies, and real unix and TCP round trips.

Two private munged instances share one key and stand for two hosts of one cluster (the
head node and a GPU node: separate replay caches); a third has another key (a foreign
cluster)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import socketserver
import threading
import time
import types
from pathlib import Path

import private_munged
import pytest

from slurm_colo.config import parse_config
from slurm_colo.contracts import munge, transport
from slurm_colo.contracts.protocol import format_reply, format_request, parse_reply, parse_request
from slurm_colo.contracts.transport import Address, parse_address
from slurm_colo.errors import (
    AgentError,
    AuthError,
    ConfigError,
    CredentialExpired,
    CredentialForeign,
    CredentialInvalid,
    CredentialReplayed,
    MungeUnavailable,
    Unauthenticated,
    UntrustedSigner,
    WrongCluster,
)

CLUSTER = "alpha"


@pytest.fixture(scope="module")
def head():
    m = private_munged.start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def node(head):
    """A GPU node of the same cluster: same key, its own munged."""
    m = private_munged.start(key=head.key)
    yield m
    m.stop()


@pytest.fixture(scope="module")
def foreign():
    m = private_munged.start()
    yield m
    m.stop()


def enc(m, ttl=None, backend="auto"):
    return functools.partial(munge.encode, socket_path=m.socket, ttl_s=ttl, backend=backend)


def dec(m, backend="auto"):
    return functools.partial(munge.decode, socket_path=m.socket, backend=backend)


JOBSTART = format_request(
    "JOBSTART", {"job": 42, "node": "gpu01", "gpus": [0], "user": "a", "uid": 1000}
)


# ---- addresses and config ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, want",
    [
        ("/run/slurm-colo/agent.sock", Address("unix", path="/run/slurm-colo/agent.sock")),
        ("unix:/run/x.sock", Address("unix", path="/run/x.sock")),
        ("relative.sock", Address("unix", path="relative.sock")),
        ("tcp:head:6830", Address("tcp", host="head", port=6830)),
        ("tcp:0.0.0.0:6830", Address("tcp", host="0.0.0.0", port=6830)),
        ("tcp:head.example.org:1", Address("tcp", host="head.example.org", port=1)),
        ("tcp:[::1]:65535", Address("tcp", host="::1", port=65535)),
    ],
)
def test_parse_address(text, want):
    assert parse_address(text) == want
    assert parse_address(str(want)) == want


@pytest.mark.parametrize(
    "text, why",
    [
        ("tcp:head:0", "port must be a number from 1 to 65535"),
        ("tcp:head:65536", "port must be a number from 1 to 65535"),
        ("tcp:head:http", "port must be"),
        ("tcp:head", "write tcp:HOST:PORT"),
        ("tcp::6830", "write tcp:HOST:PORT"),
        ("tcp:fe80::1:6830", "IPv6 address in brackets"),
        ("tcp:bad host:1", "bad host name"),
        ("head:6830", "unknown scheme 'head'"),
        ("udp:head:6830", "unknown scheme 'udp'"),
        ("unix:", "no socket path"),
        ("", "empty address"),
        (" tcp:head:1", "blanks"),
    ],
)
def test_bad_address_is_a_config_error(text, why):
    with pytest.raises(ConfigError, match=why):
        parse_address(text)


def test_config_defaults_and_following_the_socket():
    a = parse_config("").agent
    assert a.listen == ("unix:/run/slurm-colo/agent.sock",)
    assert a.address == "unix:/run/slurm-colo/agent.sock" and a.munge_socket == ""
    a = parse_config('[agent]\nsocket = "/tmp/a.sock"\n').agent
    assert a.listen == ("unix:/tmp/a.sock",) and a.address == "unix:/tmp/a.sock"
    a = parse_config(
        '[agent]\nlisten = ["unix:/run/slurm-colo/agent.sock", "tcp:0.0.0.0:6830"]\n'
        'address = "tcp:head:6830"\nmunge_socket = "/run/munge/m.sock"\n'
    ).agent
    assert a.listen == ("unix:/run/slurm-colo/agent.sock", "tcp:0.0.0.0:6830")
    assert a.address == "tcp:head:6830" and a.munge_socket == "/run/munge/m.sock"


@pytest.mark.parametrize(
    "body, why",
    [
        (
            'listen = ["unix:/run/slurm-colo/agent.sock", "tcp:0.0.0.0:70000"]',
            r"agent.listen\[1\]: .*port must be",
        ),
        ('listen = ["tcp:0.0.0.0:6830"]', 'must include "unix:/run/slurm-colo/agent.sock"'),
        ("listen = []", "agent.listen is empty"),
        ('listen = "tcp:0.0.0.0:6830"', "must be an array of strings"),
        ('address = "head:6830"', r"agent.address: .*did you mean tcp:head:6830"),
        ('address = "ftp:head:6830"', "unknown scheme 'ftp'"),
    ],
)
def test_bad_agent_addresses_fail_at_config_load(body, why):
    with pytest.raises(ConfigError, match=why) as e:
        parse_config(f"[agent]\n{body}\n", "/etc/slurm-colo/config.toml")
    assert str(e.value).startswith("/etc/slurm-colo/config.toml: ")


# ---- envelopes ------------------------------------------------------------------------------


def test_request_envelope_round_trip_across_hosts(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    assert env.startswith(b"MUNGE\tMUNGE:") and env.endswith(b"\n") and env.count(b"\n") == 1
    line, uid = transport.open_envelope(env, CLUSTER, dec(head))
    assert line == JOBSTART and uid == os.getuid()
    assert parse_request(line)[0] == "JOBSTART"


@pytest.mark.parametrize("plain", [JOBSTART, b"PING\t{}\n", b"hello\n", b"\n"])
def test_plain_line_on_tcp_is_unauthenticated(head, plain):
    with pytest.raises(Unauthenticated) as e:
        transport.open_envelope(plain, CLUSTER, dec(head))
    assert e.value.reason == "unauthenticated"


def test_replayed_envelope_is_refused(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    transport.open_envelope(env, CLUSTER, dec(head))
    with pytest.raises(CredentialReplayed):
        transport.open_envelope(env, CLUSTER, dec(head))


def test_expired_envelope_is_refused(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node, ttl=1))
    time.sleep(2.5)
    with pytest.raises(CredentialExpired):
        transport.open_envelope(env, CLUSTER, dec(head))


def test_envelope_of_a_foreign_cluster_key_is_refused(head, foreign):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(foreign))
    with pytest.raises(CredentialForeign):
        transport.open_envelope(env, CLUSTER, dec(head))


def test_envelope_for_another_cluster_name_is_refused(head, node):
    env = transport.seal_request(JOBSTART, "beta", enc(node))
    with pytest.raises(WrongCluster, match="'beta'.*'alpha'"):
        transport.open_envelope(env, CLUSTER, dec(head))


@pytest.mark.parametrize(
    "payload", [b"JOBSTART\t{}\n", b"slurm-colo/1 reply\nalpha\nx\n", b"slurm-colo/1 request"]
)
def test_credential_that_is_no_slurm_colo_request_is_invalid(head, node, payload):
    # any user can wrap any bytes in a credential: only our request format is accepted
    env = b"MUNGE\t" + munge.encode(payload, node.socket).encode() + b"\n"
    with pytest.raises(CredentialInvalid):
        transport.open_envelope(env, CLUSTER, dec(head))


def test_garbled_envelope_is_invalid(head):
    with pytest.raises(CredentialInvalid):
        transport.open_envelope(b"MUNGE\tnot-a-credential\n", CLUSTER, dec(head))
    with pytest.raises(CredentialInvalid):
        transport.open_envelope(b"MUNGE\t\xff\xfe\n", CLUSTER, dec(head))


def test_signed_reply_is_tied_to_its_request(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    reply = format_reply("JOBSTART", {"placement": {"mps_pct": 50}})
    signed = transport.seal_reply(reply, env, CLUSTER, enc(head))
    assert transport.open_reply(signed, env, CLUSTER, {0, os.getuid()}, dec(node)) == reply
    # the same signed reply, replayed to another node for another request: refused by the
    # binding (the other node's munged has not seen the credential)
    other = private_munged.start(key=head.key)
    try:
        env2 = transport.seal_request(JOBSTART, CLUSTER, enc(other))
        with pytest.raises(CredentialInvalid, match="another request"):
            transport.open_reply(signed, env2, CLUSTER, {0, os.getuid()}, dec(other))
    finally:
        other.stop()


def test_reply_by_an_untrusted_signer_is_refused(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    signed = transport.seal_reply(b"OK\t{}\n", env, CLUSTER, enc(head))
    with pytest.raises(UntrustedSigner, match=f"uid {os.getuid()}"):
        transport.open_reply(signed, env, CLUSTER, {4242}, dec(node))


def test_reply_for_another_cluster_is_refused(head, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    signed = transport.seal_reply(b"OK\t{}\n", env, "beta", enc(head))
    with pytest.raises(WrongCluster):
        transport.open_reply(signed, env, CLUSTER, {os.getuid()}, dec(node))


def test_unsigned_reply_is_refused_and_a_refusal_is_raised_as_its_kind(node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    with pytest.raises(Unauthenticated):
        transport.open_reply(b'OK\t{"placement":{"mps_pct":100}}\n', env, CLUSTER, {0}, dec(node))
    line = transport.refusal(CredentialReplayed("munge credential replayed", hint="look"))
    assert line.startswith(b"ERR\tauth replayed: ") and line.count(b"\n") == 1
    with pytest.raises(CredentialReplayed, match="the agent refused the request"):
        transport.open_reply(line, env, CLUSTER, {0}, dec(node))
    with pytest.raises(AuthError):
        transport.open_reply(b"ERR\tauth something-new: x\n", env, CLUSTER, {0}, dec(node))


def test_request_of_a_user_carries_that_users_uid(head, node):
    """Munge vouches for the uid, so the agent's trusted-uid rule applies over TCP too."""
    if os.getuid() != 0:
        pytest.fail(
            "this test runs as root (as the suite does) to encode as another user", pytrace=False
        )
    nobody = 65534
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: become nobody, encode, hand the envelope back through the pipe
        code = 1
        try:
            os.close(rfd)
            os.setgroups([])
            os.setgid(nobody)
            os.setuid(nobody)
            os.write(wfd, transport.seal_request(b"PROBE\t{}\n", CLUSTER, enc(node)))
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        env = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0
    line, uid = transport.open_envelope(env, CLUSTER, dec(head))
    assert (line, uid) == (b"PROBE\t{}\n", nobody)


# ---- real round trips -----------------------------------------------------------------------


def answer(request_line: bytes, uid: int) -> bytes:
    """The agent's answer, reduced to: who asked what."""
    verb, payload = parse_request(request_line)
    return format_reply(verb, {"verb": verb, "uid": uid, "job": payload.get("job")})


class TcpAgent:
    """A tiny threaded TCP server built from transport.serve_line, as the agent will be."""

    def __init__(self, munged, cluster=CLUSTER, respond=None):
        self.refused: list[AuthError] = []
        outer = self
        respond = respond or (
            lambda line: transport.serve_line(
                line,
                cluster,
                answer,
                decode=dec(munged),
                encode=enc(munged, transport.REPLY_TTL_S),
                on_refusal=outer.refused.append,
            )
        )

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                while True:
                    line = self.rfile.readline(transport.MAX_REQUEST_ENVELOPE + 1)
                    if not line:
                        return
                    self.wfile.write(respond(line))

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.address = f"tcp:127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def tcp_agent(head):
    a = TcpAgent(head)
    yield a
    a.close()


@pytest.mark.parametrize("backend", ["lib", "cli"])
def test_tcp_round_trip(tcp_agent, node, backend):
    reply = transport.round_trip(
        tcp_agent.address,
        JOBSTART,
        5.0,
        CLUSTER,
        node.socket,
        signers={0, os.getuid()},
        backend=backend,
    )
    assert parse_reply("JOBSTART", reply) == {"verb": "JOBSTART", "uid": os.getuid(), "job": 42}
    assert tcp_agent.refused == []


def test_tcp_round_trip_with_a_parsed_address_and_no_newline(tcp_agent, node):
    addr = parse_address(tcp_agent.address)
    reply = transport.round_trip(
        addr, b"PING\t{}", 5.0, CLUSTER, node.socket, signers={os.getuid()}
    )
    assert parse_reply("PING", reply)["verb"] == "PING"


def test_plain_request_on_tcp_is_refused_and_reported(tcp_agent):
    host, port = tcp_agent.server.server_address
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(JOBSTART)
        reply = s.makefile("rb").readline()
    assert reply.startswith(b"ERR\tauth unauthenticated: ")
    assert [e.reason for e in tcp_agent.refused] == ["unauthenticated"]


def test_refusals_are_logged_with_peer_and_reason(caplog):
    log = logging.getLogger("slurm_colo.agent")
    report = transport.refusal_logger(log, "10.0.0.7:51234")
    with caplog.at_level(logging.WARNING, logger="slurm_colo.agent"):
        report(CredentialReplayed("munge credential replayed"))
        report(MungeUnavailable("cannot reach munged"))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "refused a TCP message from 10.0.0.7:51234: munge credential replayed [replayed]",
        ),
        (
            "ERROR",
            "refused a TCP message from 10.0.0.7:51234: cannot reach munged [munge-unavailable]",
        ),
    ]


def test_replayed_request_on_tcp_is_refused(tcp_agent, node):
    env = transport.seal_request(JOBSTART, CLUSTER, enc(node))
    host, port = tcp_agent.server.server_address
    with socket.create_connection((host, port), timeout=5) as s:
        f = s.makefile("rb")
        s.sendall(env)
        assert f.readline().startswith(b"MUNGE\t")
        s.sendall(env)  # a captured envelope sent again
        assert f.readline().startswith(b"ERR\tauth replayed: ")
    assert [e.reason for e in tcp_agent.refused] == ["replayed"]


def test_tcp_request_for_another_cluster_is_refused(tcp_agent, node):
    with pytest.raises(WrongCluster, match="the agent refused"):
        transport.round_trip(
            tcp_agent.address, JOBSTART, 5.0, "beta", node.socket, signers={os.getuid()}
        )
    assert isinstance(tcp_agent.refused[0], WrongCluster)


def test_tcp_request_from_a_foreign_cluster_is_refused(tcp_agent, foreign):
    with pytest.raises(CredentialForeign, match="the agent refused"):
        transport.round_trip(
            tcp_agent.address, JOBSTART, 5.0, CLUSTER, foreign.socket, signers={os.getuid()}
        )


BIG_SHARE = format_reply("JOBSTART", {"placement": {"mps_pct": 100}})


@pytest.mark.parametrize("how", ["signed with another key", "unsigned"])
def test_tcp_reply_from_an_impostor_is_refused(foreign, node, how):
    """Something else answers on the agent's port: it cannot hand out placements."""

    def respond(line: bytes) -> bytes:
        if how == "unsigned":
            return BIG_SHARE
        return transport.seal_reply(BIG_SHARE, line, CLUSTER, enc(foreign))

    err = Unauthenticated if how == "unsigned" else CredentialForeign
    impostor = TcpAgent(foreign, respond=respond)
    try:
        with pytest.raises(err):
            transport.round_trip(
                impostor.address, JOBSTART, 5.0, CLUSTER, node.socket, signers={0, os.getuid()}
            )
    finally:
        impostor.close()


def _big_status(request_line: bytes, uid: int) -> bytes:
    """A STATUS the size of a site with 2,000 shared GPUs and 10,000 jobs (2.6 MB):
    above what munged seals in one credential (about 1 MiB)."""
    gpus = [
        {"node": f"g{k:04d}", "index": k % 8, "occupants": ["x" * 200] * 5} for k in range(2500)
    ]
    return format_reply("STATUS", {"gpus": gpus, "uid": uid})


@pytest.mark.parametrize("backend", ["lib", "cli"])
def test_a_status_larger_than_a_munge_credential_comes_whole_over_tcp(head, node, backend):
    agent = TcpAgent(
        head,
        respond=lambda line: transport.serve_line(
            line, CLUSTER, _big_status, decode=dec(head), encode=enc(head, transport.REPLY_TTL_S)
        ),
    )
    try:
        reply = transport.round_trip(
            agent.address,
            format_request("STATUS", {}),
            10.0,
            CLUSTER,
            node.socket,
            signers={0, os.getuid()},
            backend=backend,
        )
    finally:
        agent.close()
    want = _big_status(b"", os.getuid())
    assert len(want) > 2_000_000 and reply == want


def _big_reply(head, node) -> tuple[bytes, bytes, bytes]:
    """A request, and the envelope line and reply line of its large answer (each call makes
    new credentials: munge decodes one only once per host)."""
    env = transport.seal_request(b"STATUS\t{}\n", CLUSTER, enc(node))
    signed = transport.seal_reply(_big_status(b"", 0), env, CLUSTER, enc(head))
    line, _, body = signed.partition(b"\n")
    assert transport.body_length(line) == len(body)
    return env, line + b"\n", body


def test_a_large_reply_is_refused_when_its_line_was_changed_or_cut(head, node):
    env, line, body = _big_reply(head, node)
    assert transport.open_reply(line, env, CLUSTER, {0, os.getuid()}, dec(node), body) == body
    for forged in (body.replace(b"g0001", b"g0002", 1), body[:-10], None):
        env, line, _ = _big_reply(head, node)
        with pytest.raises(CredentialInvalid, match="does not match the signed digest"):
            transport.open_reply(line, env, CLUSTER, {0, os.getuid()}, dec(node), forged)


def test_a_large_replys_length_in_clear_is_bounded(head, node):
    _, line, _ = _big_reply(head, node)
    cred = line.rstrip(b"\n").rpartition(b"\t")[0]
    with pytest.raises(CredentialInvalid, match="not a number"):
        transport.body_length(cred + b"\t" + str(transport.MAX_REPLY_BODY + 1).encode())
    with pytest.raises(CredentialInvalid, match="not a number"):
        transport.body_length(cred + b"\t-5")
    assert transport.body_length(cred) is None and transport.body_length(b"OK\t{}") is None


def test_tcp_reply_signed_by_an_untrusted_user_is_refused(tcp_agent, node):
    with pytest.raises(UntrustedSigner):
        transport.round_trip(tcp_agent.address, JOBSTART, 5.0, CLUSTER, node.socket, signers={4242})


def test_tcp_agent_not_listening(node):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(AgentError, match="nothing listens on tcp:127.0.0.1"):
        transport.round_trip(f"tcp:127.0.0.1:{port}", JOBSTART, 2.0, CLUSTER, node.socket)


def test_tcp_agent_that_does_not_answer_times_out(node):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        t0 = time.monotonic()
        with pytest.raises(AgentError, match="did not answer within 0.3s"):
            transport.round_trip(
                f"tcp:127.0.0.1:{s.getsockname()[1]}", JOBSTART, 0.3, CLUSTER, node.socket
            )
        assert time.monotonic() - t0 < 2.0
    finally:
        s.close()


def test_munged_down_on_the_node_is_reported(tcp_agent, tmp_path):
    with pytest.raises(MungeUnavailable):
        transport.round_trip(
            tcp_agent.address, JOBSTART, 2.0, CLUSTER, str(tmp_path / "gone.socket")
        )


def test_unix_round_trip_sends_the_plain_line(tmp_path):
    path = tmp_path / "agent.sock"
    seen: list[bytes] = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            line = self.rfile.readline()
            seen.append(line)
            self.wfile.write(answer(line, 0))

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

    server = Server(str(path), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for address in (str(path), f"unix:{path}"):
            reply = transport.round_trip(address, JOBSTART, 2.0, CLUSTER)
            assert parse_reply("JOBSTART", reply)["job"] == 42
        assert seen == [JOBSTART, JOBSTART]
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(AgentError, match="does not exist"):
        transport.round_trip(f"unix:{Path(tmp_path) / 'none.sock'}", JOBSTART, 1.0, CLUSTER)


def test_munged_down_on_the_head_node_refuses_every_tcp_message(node, tmp_path):
    down = TcpAgent(types.SimpleNamespace(socket=str(tmp_path / "gone.socket")))
    try:
        with pytest.raises(MungeUnavailable, match="the agent refused"):
            transport.round_trip(down.address, JOBSTART, 5.0, CLUSTER, node.socket)
        assert [e.reason for e in down.refused] == ["munge-unavailable"]
    finally:
        down.close()
