"""How node hooks reach the agent: a unix socket on one host, TCP with munge across hosts.

Addresses are ``unix:/path`` or ``tcp:HOST:PORT`` (``tcp:[::1]:6830`` for IPv6); a bare
path means unix. :func:`parse_address` checks one (the config does so at load).

On a unix socket a request is the plain line of :mod:`slurm_colo.contracts.protocol` and
the agent knows the sender from ``SO_PEERCRED``. On TCP nothing says who sent a line, so
each line travels inside a munge credential, the envelope::

    MUNGE<TAB><credential>\\n

The request credential's payload is ``slurm-colo/1 request\\n<cluster>\\n<request line>``;
its uid (vouched for by munged on the sending node) takes the place of the peer uid, so
the agent keeps its rule: PLACE/JOBSTART/JOBEND/PROBE/RELOAD only from root, its own user
and ``slurm``. Munge only proves *which uid* made a credential, not which program: any
user on any node can wrap any line, so that uid check is what keeps users out.
:func:`open_envelope` (server side, no sockets) refuses a plain line (``Unauthenticated``),
a replayed, expired, foreign-key or malformed credential, and one for another cluster
(``WrongCluster``): a node of cluster B that shares the key with cluster A, or a hook
pointed at the wrong head node, is refused instead of steering A's placements.

Replies on TCP are signed too: the agent wraps the reply line in a credential whose
payload is ``slurm-colo/1 reply\\n<cluster>\\n<sha256 of the request credential>\\n<reply
line>``, and :func:`round_trip` accepts it only when munged vouches that root or the
agent's user made it, for this cluster, in answer to this very request. Why: the JOBSTART
reply carries the placement from which the Prolog, as root, sets the job's MPS thread and
memory limits, and the PROBE verdict is written into the job's record. Port 6830 is not a privileged
port; while the agent is down any user on the head node could listen on it, and anyone
on the network path could answer in the agent's place. An unsigned reply could give a
job a whole GPU's threads next to a partner, or starve it. The hash ties a reply to one
request, so a reply recorded on one node cannot be replayed to another node (munge's
replay cache is per host). A refusal before authentication (``ERR<TAB>auth <reason>:
...``) is sent unsigned: it carries no data, is raised as the matching ``AuthError``,
never returned as a reply, and a forged one only denies service, which anyone on the
path can do anyway.

munged seals at most 1 MiB, and a ``STATUS`` of a large site is more (2.6 MB for 2,000
shared GPUs and 10,000 jobs). A reply line longer than ``INLINE_REPLY_MAX`` follows its
envelope as it is::

    MUNGE<TAB><credential><TAB><length>\\n<reply line>

and the credential's payload, ``slurm-colo/1 reply-digest\\n<cluster>\\n<sha256 of the
request credential>\\n<sha256 of the reply line>\\n<length>\\n``, signs it just as well.
Shorter replies keep the first form, which older clients read.

Cost (``benchmarks/transport_bench.py``: two private munged with one key, munge 0.5.15,
a 2-CPU build host shared with other work; medians, the range over five runs):

* one encode + one decode: libmunge 0.09-0.15 ms; the ``munge``/``unmunge`` programs
  1.9-3.5 ms (a process each);
* a whole round trip on loopback to an agent stand-in that answers at once: unix socket,
  plain line 0.11-0.19 ms; TCP with envelope and signed reply (two encodes, two decodes)
  0.56-0.77 ms with libmunge, 3.6-5.3 ms with the programs;
* once per hook process (a hook makes one request per run): importing this module beside
  the client about 1.4 ms, loading libmunge through ctypes about 1.8 ms.

The programs are a fallback for hosts without libmunge only.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from slurm_colo.contracts import munge
from slurm_colo.contracts.address import UNIX, Address, parse_address
from slurm_colo.errors import (
    AgentError,
    AuthError,
    CredentialExpired,
    CredentialForeign,
    CredentialInvalid,
    CredentialReplayed,
    MungeUnavailable,
    Unauthenticated,
    UntrustedSigner,
    WrongCluster,
)

if TYPE_CHECKING:
    import logging

#: what starts an enveloped line on TCP
ENVELOPE = b"MUNGE\t"
MAGIC = b"slurm-colo/1"
#: time-to-live of request and reply credentials: used within milliseconds, the margin is
#: for clocks that disagree a little; munged forgets its replay cache when it restarts, so a
#: short TTL also bounds how long a captured message could be replayed after that
REQUEST_TTL_S = 60
REPLY_TTL_S = 60
#: longest enveloped request line the agent need read (protocol.MAX_LINE of payload)
MAX_REQUEST_ENVELOPE = 128 * 1024
#: longest envelope line a client reads
MAX_REPLY_LINE = munge.MAX_CREDENTIAL + 64
#: a reply line longer than this goes beside its envelope, which signs its SHA-256 and
#: length (munged refuses a payload over 1 MiB: "length ... exceeds max of 1048576")
INLINE_REPLY_MAX = 512 * 1024
#: longest reply line a client reads beside its envelope
MAX_REPLY_BODY = 256 * 1024 * 1024


def _as_address(address: str | Address) -> Address:
    return address if isinstance(address, Address) else parse_address(address)


def agent_signers(user: str) -> frozenset[int]:
    """Who may sign the agent's replies: root and ``user`` (the agent's user), when it exists."""
    import pwd

    uids = {0}
    try:
        uids.add(pwd.getpwnam(user).pw_uid)
    except KeyError:
        pass
    return frozenset(uids)


# ---- envelopes (pure: no sockets) ---------------------------------------------------------

Decode = Callable[[str], munge.Credential]
Encode = Callable[[bytes], str]


def _check_cluster(cluster: str) -> bytes:
    if not cluster or any(c in cluster for c in "\n\r\t\0"):
        raise ValueError(f"bad cluster name {cluster!r}")
    return cluster.encode()


def _binding(cred: bytes) -> bytes:
    """Ties a reply to the request credential it answers."""
    import hashlib  # TCP only: the unix path of the hooks never loads it

    return hashlib.sha256(cred.strip()).hexdigest().encode()


def _credential_of(line: bytes, what: str) -> str:
    line = line.rstrip(b"\r\n")
    if not line.startswith(ENVELOPE):
        verb = line.partition(b"\t")[0][:20].decode("ascii", "replace")
        shown = f"a plain {verb!r} line" if verb.isalpha() else "a line that is no munge envelope"
        raise Unauthenticated(
            f"{what} on TCP is {shown}: TCP carries munge credentials only",
            hint="point agent.address of that host at the agent's tcp: address, with the same "
            "slurm-colo version, or use the unix socket on the head node",
        )
    try:  # (a large reply's length may follow: see seal_reply)
        return line[len(ENVELOPE) :].partition(b"\t")[0].decode("ascii")
    except UnicodeDecodeError:
        raise CredentialInvalid(f"{what}: the credential is not ASCII") from None


def _split(payload: bytes, kind: bytes, n: int) -> list[bytes]:
    parts = payload.split(b"\n", n)
    if len(parts) != n + 1 or parts[0] != MAGIC + b" " + kind:
        raise CredentialInvalid(f"the credential's payload is not a slurm-colo {kind.decode()}")
    return parts


def _seal(kind: str, fields: list[bytes], body: bytes, encode: Encode) -> bytes:
    payload = b"\n".join([MAGIC + b" " + kind.encode(), *fields, body])
    return ENVELOPE + encode(payload).encode("ascii") + b"\n"


def seal_request(request_line: bytes, cluster: str, encode: Encode) -> bytes:
    """The envelope line carrying ``request_line`` (client side)."""
    return _seal("request", [_check_cluster(cluster)], _line(request_line), encode)


def open_envelope(line: bytes, cluster: str, decode: Decode = munge.decode) -> tuple[bytes, int]:
    """The request line inside an envelope, and the uid munge vouches sent it.

    Raises ``Unauthenticated`` (a plain line), ``CredentialReplayed``, ``CredentialExpired``,
    ``CredentialForeign`` (another munge key), ``CredentialInvalid`` (undecodable, or not a
    slurm-colo request), ``WrongCluster`` or ``MungeUnavailable`` (this host's munged), all
    :class:`~slurm_colo.errors.AuthError`. The caller applies the same trusted-uid rule to
    the uid as to a unix peer's ``SO_PEERCRED`` uid."""
    cred = decode(_credential_of(line, "request"))
    _, their_cluster, request_line = _split(cred.payload, b"request", 2)
    if their_cluster != _check_cluster(cluster):
        raise WrongCluster(
            f"request from uid {cred.uid} is for cluster "
            f"{their_cluster.decode('utf-8', 'replace')!r}, this agent serves {cluster!r}",
            hint="the sending node shares this cluster's munge key but belongs to another "
            "cluster, or its agent.address points at the wrong head node",
        )
    if not request_line.endswith(b"\n"):
        request_line += b"\n"
    return request_line, cred.uid


def seal_reply(reply_line: bytes, request_envelope: bytes, cluster: str, encode: Encode) -> bytes:
    """The signed envelope line carrying ``reply_line``, the answer to ``request_envelope``;
    a line longer than ``INLINE_REPLY_MAX`` follows the envelope, which signs its digest."""
    cred = _credential_of(request_envelope, "request").encode("ascii")
    fields = [_check_cluster(cluster), _binding(cred)]
    body = _line(reply_line)
    if len(body) <= INLINE_REPLY_MAX:
        return _seal("reply", fields, body, encode)
    import hashlib

    size = str(len(body)).encode()
    envelope = _seal(
        "reply-digest", [*fields, hashlib.sha256(body).hexdigest().encode(), size], b"", encode
    )
    return envelope[:-1] + b"\t" + size + b"\n" + body


def refusal(err: AuthError) -> bytes:
    """The unsigned line the agent answers a refused envelope with."""
    msg = str(err).translate(str.maketrans("\t\r\n", "   "))
    return f"ERR\tauth {err.reason}: {msg}\n".encode()


_BY_REASON: dict[str, type[AuthError]] = {
    cls.reason: cls
    for cls in (
        MungeUnavailable,
        CredentialExpired,
        CredentialReplayed,
        CredentialForeign,
        CredentialInvalid,
        Unauthenticated,
        WrongCluster,
        UntrustedSigner,
    )
}


def open_reply(
    line: bytes,
    request_envelope: bytes,
    cluster: str,
    signers: Collection[int],
    decode: Decode = munge.decode,
    body: bytes | None = None,
) -> bytes:
    """The reply line inside the agent's signed envelope (client side); ``body``: the line
    that followed an envelope signing a large reply's digest.

    A refusal raises the ``AuthError`` it names; an unsigned reply raises
    ``Unauthenticated``; a reply signed by a uid not in ``signers`` raises
    ``UntrustedSigner``; one for another cluster or another request ``WrongCluster`` /
    ``CredentialInvalid``, and so does a large reply whose line is not the one signed."""
    text = line.rstrip(b"\r\n")
    if text.startswith(b"ERR\tauth "):
        reason, _, msg = text[len(b"ERR\tauth ") :].decode("utf-8", "replace").partition(": ")
        cls = _BY_REASON.get(reason, AuthError)
        raise cls(f"the agent refused the request: {msg}")
    cred = decode(_credential_of(line, "reply"))
    if cred.uid not in signers:
        raise UntrustedSigner(
            f"reply signed by uid {cred.uid}, expected one of {sorted(signers)}: not the agent",
            hint="something else answers on the agent's TCP port, or agent.user does not name "
            "the user the agent runs as",
        )
    if cred.payload.startswith(MAGIC + b" reply-digest\n"):
        _, their_cluster, binding, digest, size, _ = _split(cred.payload, b"reply-digest", 5)
        reply_line = _signed_body(body, digest, size)
    else:
        _, their_cluster, binding, reply_line = _split(cred.payload, b"reply", 3)
    if their_cluster != _check_cluster(cluster):
        raise WrongCluster(
            f"reply is from the agent of cluster "
            f"{their_cluster.decode('utf-8', 'replace')!r}, not {cluster!r}"
        )
    cred_sent = _credential_of(request_envelope, "request").encode("ascii")
    if binding != _binding(cred_sent):
        raise CredentialInvalid("the signed reply answers another request (replayed reply?)")
    return reply_line


def serve_line(
    line: bytes,
    cluster: str,
    answer: Callable[[bytes, int], bytes],
    *,
    decode: Decode = munge.decode,
    encode: Encode = munge.encode,
    on_refusal: Callable[[AuthError], Any] | None = None,
) -> bytes:
    """One enveloped request line in, one line out: the whole TCP side of the agent but the
    socket. ``answer(request_line, uid)`` is what the unix side does with a line and its
    peer uid; its reply is signed. A refused line is answered with :func:`refusal` and
    passed to ``on_refusal`` (to log it with the peer's address)."""
    try:
        request_line, uid = open_envelope(line, cluster, decode)
    except AuthError as e:
        if on_refusal:
            on_refusal(e)
        return refusal(e)
    reply = answer(request_line, uid)
    try:
        return seal_reply(reply, line, cluster, encode)
    except AuthError as e:  # this host's munged went away between decode and encode
        if on_refusal:
            on_refusal(e)
        return refusal(e)


def refusal_logger(log: logging.Logger, peer: str) -> Callable[[AuthError], None]:
    """An ``on_refusal`` for :func:`serve_line` that logs one line per refused message:
    a warning naming the peer and the reason word, an error when this host's munged is down
    (then every TCP message is refused)."""
    import logging

    def report(err: AuthError) -> None:
        level = logging.ERROR if isinstance(err, MungeUnavailable) else logging.WARNING
        log.log(level, "refused a TCP message from %s: %s [%s]", peer, err, err.reason)

    return report


def _line(b: bytes) -> bytes:
    return b if b.endswith(b"\n") else b + b"\n"


def _signed_body(body: bytes | None, digest: bytes, size: bytes) -> bytes:
    import hashlib

    if (
        body is None
        or str(len(body)).encode() != size
        or hashlib.sha256(body).hexdigest().encode() != digest
    ):
        got = "no reply line" if body is None else f"{len(body)} bytes"
        signed = size.decode("ascii", "replace")
        raise CredentialInvalid(
            f"the reply line ({got}) does not match the signed digest of {signed} bytes"
        )
    return body


def body_length(line: bytes) -> int | None:
    """The length of the reply line that follows an envelope signing its digest, from the
    envelope line (None: the reply is in the envelope). Checked again against the signed
    length; here only bounded (``MAX_REPLY_BODY``)."""
    if not line.startswith(ENVELOPE):
        return None
    _, tab, size = line.rstrip(b"\r\n")[len(ENVELOPE) :].partition(b"\t")
    if not tab:
        return None
    if not size.isdigit() or int(size) > MAX_REPLY_BODY:
        raise CredentialInvalid(
            f"reply length {size[:20]!r} is not a number up to {MAX_REPLY_BODY}"
        )
    return int(size)


# ---- client ------------------------------------------------------------------------------


def _recv(s: socket.socket, deadline: float, size: int) -> bytes:
    s.settimeout(max(0.001, deadline - time.monotonic()))
    return s.recv(size)


def _read_reply(s: socket.socket, deadline: float, limit: int) -> tuple[bytes, bytes | None]:
    """The reply's first line (at most ``limit`` bytes), and the reply line that follows an
    envelope signing its digest (None for any other reply; short if the agent hung up)."""
    buf = b""
    while b"\n" not in buf:
        chunk = _recv(s, deadline, 65536)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit and b"\n" not in buf[: limit + 1]:
            raise AgentError(f"agent reply longer than {limit} bytes")
    line, nl, rest = buf.partition(b"\n")
    size = body_length(line) if nl else None
    if size is None:
        return line + nl, None
    parts, have = [rest[:size]], min(len(rest), size)
    while have < size:
        chunk = _recv(s, deadline, min(1 << 20, size - have))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return line + nl, b"".join(parts)


def _exchange(
    addr: Address, line: bytes, timeout_s: float, deadline: float, limit: int
) -> tuple[bytes, bytes | None]:
    where = str(addr)
    try:
        if addr.scheme == UNIX:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout_s)
            try:
                s.connect(addr.path)
            except BaseException:
                s.close()
                raise
        else:
            s = socket.create_connection(
                (addr.host, addr.port), timeout=max(0.001, deadline - time.monotonic())
            )
        with s:
            s.sendall(line)
            buf, body = _read_reply(s, deadline, limit)
    except FileNotFoundError:
        raise AgentError(
            f"agent socket {addr.path} does not exist", hint="start the agent: slurm-colo agent"
        ) from None
    except ConnectionRefusedError:
        hint = (
            "start the agent: slurm-colo agent"
            if addr.scheme == UNIX
            else "start the agent on the head node; agent.listen there must name this port"
        )
        raise AgentError(f"nothing listens on {where}", hint=hint) from None
    except TimeoutError:
        raise AgentError(f"agent at {where} did not answer within {timeout_s:g}s") from None
    except socket.gaierror as e:
        raise AgentError(
            f"cannot resolve the agent's host {addr.host!r}: {e.strerror or e}",
            hint="check agent.address",
        ) from None
    except OSError as e:
        raise AgentError(f"agent at {where}: {e.strerror or e}") from None
    if not buf:
        raise AgentError("agent closed the connection without answering")
    return buf, body


def round_trip(
    address: str | Address,
    request_line: bytes,
    timeout_s: float,
    cluster: str,
    munge_socket: str | None = None,
    *,
    signers: Collection[int] = frozenset({0}),
    backend: str = "auto",
) -> bytes:
    """Send one request line to the agent, return its reply line.

    Over unix the line goes as it is. Over TCP it goes in a munge envelope for ``cluster``
    (made with munged at ``munge_socket``, "" or None: libmunge's default) and the reply
    must be signed by a uid in ``signers`` (see :func:`agent_signers`) for the same
    cluster and this request. ``timeout_s`` bounds the connection (munge calls are local
    and fast). Raises :class:`~slurm_colo.errors.AgentError` (unreachable, timed out,
    garbled) or its subclass ``AuthError`` (munge refused something)."""
    addr = _as_address(address)
    deadline = time.monotonic() + timeout_s
    line = _line(request_line)
    if addr.scheme == UNIX:
        return _exchange(addr, line, timeout_s, deadline, MAX_REPLY_LINE)[0]

    def decode(c: str) -> munge.Credential:
        return munge.decode(c, munge_socket, backend=backend)

    envelope = seal_request(
        line, cluster, lambda p: munge.encode(p, munge_socket, REQUEST_TTL_S, backend=backend)
    )
    reply, body = _exchange(addr, envelope, timeout_s, deadline, MAX_REPLY_LINE)
    return _line(open_reply(reply, envelope, cluster, signers, decode, body))
