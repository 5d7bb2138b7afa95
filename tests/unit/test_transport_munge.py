"""The munge gate (slurm_colo.contracts.munge) against real, private munged instances:
libmunge through ctypes and the munge/unmunge programs behave the same."""

from __future__ import annotations

import os
import time

import private_munged
import pytest

from slurm_colo.contracts import munge
from slurm_colo.errors import (
    AgentError,
    AuthError,
    CredentialExpired,
    CredentialForeign,
    CredentialInvalid,
    CredentialReplayed,
    MungeUnavailable,
)

BACKENDS = ["lib", "cli"]


@pytest.fixture(scope="module")
def home():
    """This cluster's munged (max TTL 5 s, to check the cut-down)."""
    m = private_munged.start(max_ttl=5)
    yield m
    m.stop()


@pytest.fixture(scope="module")
def foreign():
    """A munged with another key: another cluster."""
    m = private_munged.start()
    yield m
    m.stop()


def test_both_backends_are_usable_here():
    # CI installs munge with libmunge2; the programs come with it
    assert munge.backend_in_use("lib") == "lib"
    assert munge.backend_in_use("cli") == "cli"
    assert munge.backend_in_use() == "lib"
    assert munge.default_socket().endswith("munge.socket.2")


@pytest.mark.parametrize("enc", BACKENDS)
@pytest.mark.parametrize("dec", BACKENDS)
def test_round_trip_carries_payload_and_identity(home, enc, dec):
    payload = b'cluster\nJOBSTART\t{"job":1}\n\x00\xff binary too'
    before = int(time.time())
    cred = munge.encode(payload, home.socket, ttl_s=3, backend=enc)
    assert cred.startswith("MUNGE:") and "\n" not in cred
    c = munge.decode(cred, home.socket, backend=dec)
    assert c == munge.Credential(payload, os.getuid(), os.getgid(), c.encoded_at, 3)
    assert before - 1 <= c.encoded_at <= time.time() + 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_payload(home, backend):
    c = munge.decode(munge.encode(b"", home.socket, backend=backend), home.socket, backend=backend)
    assert c.payload == b""


@pytest.mark.parametrize("backend", BACKENDS)
def test_ttl_above_munged_max_is_cut_down_and_zero_is_the_default(home, backend):
    c = munge.decode(munge.encode(b"x", home.socket, ttl_s=60, backend=backend), home.socket)
    assert c.ttl == 5  # --max-ttl=5
    c = munge.decode(munge.encode(b"x", home.socket, ttl_s=0, backend=backend), home.socket)
    assert 0 < c.ttl <= 5  # munged's default (300 s), cut to the maximum


@pytest.mark.parametrize("backend", BACKENDS)
def test_replayed_credential_is_refused(home, backend):
    cred = munge.encode(b"once", home.socket, backend=backend)
    assert munge.decode(cred, home.socket, backend=backend).payload == b"once"
    with pytest.raises(CredentialReplayed) as e:
        munge.decode(cred, home.socket, backend=backend)
    assert e.value.code == munge.EMUNGE_CRED_REPLAYED == 17
    assert e.value.reason == "replayed" and e.value.hint


@pytest.mark.parametrize("backend", BACKENDS)
def test_credential_of_another_key_is_refused_as_foreign(home, foreign, backend):
    cred = munge.encode(b"from cluster B", foreign.socket, backend=backend)
    with pytest.raises(CredentialForeign) as e:
        munge.decode(cred, home.socket, backend=backend)
    assert e.value.code == munge.EMUNGE_CRED_INVALID == 14
    assert "munge key" in e.value.hint


@pytest.mark.parametrize("backend", BACKENDS)
def test_expired_credential_is_refused(home, backend):
    cred = munge.encode(b"late", home.socket, ttl_s=1, backend=backend)
    time.sleep(2.5)  # expiry is checked in whole seconds
    with pytest.raises(CredentialExpired) as e:
        munge.decode(cred, home.socket, backend=backend)
    assert e.value.code == munge.EMUNGE_CRED_EXPIRED == 15
    assert "clock" in e.value.hint


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", ["garbage", "MUNGE:not base64 at all:", "x" * 100])
def test_malformed_credential_is_invalid(home, backend, bad):
    with pytest.raises(CredentialInvalid) as e:
        munge.decode(bad, home.socket, backend=backend)
    assert e.value.code in (munge.EMUNGE_BAD_CRED, munge.EMUNGE_BAD_VERSION)


def test_altered_credential_is_refused(home):
    cred = munge.encode(b"original payload " * 4, home.socket)
    body = cred[len("MUNGE:") : -1]
    mid = len(body) // 2
    altered = "MUNGE:" + body[:mid] + ("A" if body[mid] != "A" else "B") + body[mid + 1 :] + ":"
    with pytest.raises((CredentialForeign, CredentialInvalid)):
        munge.decode(altered, home.socket)


@pytest.mark.parametrize("bad", ["", "MUNGE:a\nb:", "MUNGE:ä:", "x" * (munge.MAX_CREDENTIAL + 1)])
def test_impossible_credentials_never_reach_munged(bad):
    with pytest.raises(CredentialInvalid):
        munge.decode(bad, "/nonexistent/munge.socket")


@pytest.mark.parametrize("backend", BACKENDS)
def test_munged_not_running_is_reported_with_a_hint(tmp_path, backend):
    sock = str(tmp_path / "no-munged.socket")
    t0 = time.monotonic()
    with pytest.raises(MungeUnavailable) as e:
        munge.encode(b"x", sock, backend=backend)
    assert time.monotonic() - t0 < 1.0  # a missing socket fails at once
    assert e.value.code == munge.EMUNGE_SOCKET == 6
    assert sock in str(e.value) and "munged" in e.value.hint
    with pytest.raises(MungeUnavailable):
        munge.decode("MUNGE:AAAA:", sock, backend=backend)


def test_payload_over_munged_limit_is_an_auth_error(home):
    with pytest.raises(AuthError) as e:
        munge.encode(b"a" * (1024 * 1024), home.socket)
    assert e.value.code == munge.EMUNGE_BAD_LENGTH


def test_auth_errors_are_agent_errors():
    # the clients catch AgentError and carry on without the agent; so they do for these
    for cls in (
        MungeUnavailable,
        CredentialExpired,
        CredentialReplayed,
        CredentialForeign,
        CredentialInvalid,
    ):
        assert issubclass(cls, AuthError) and issubclass(cls, AgentError)


def test_auto_falls_back_to_the_programs_without_libmunge(home, monkeypatch):
    monkeypatch.setattr(munge, "_lib", None)
    monkeypatch.setattr(munge, "_lib_error", "libmunge.so.2: cannot open shared object file")
    assert munge.backend_in_use() == "cli"
    c = munge.decode(munge.encode(b"via the tools", home.socket), home.socket)
    assert c.payload == b"via the tools"
    with pytest.raises(MungeUnavailable, match="cannot load libmunge"):
        munge.backend_in_use("lib")


def test_unknown_backend_and_non_bytes_payload_are_programming_errors(home):
    with pytest.raises(ValueError):
        munge.encode(b"x", home.socket, backend="ssh")
    with pytest.raises(TypeError):
        munge.encode("text", home.socket)  # type: ignore[arg-type]
