"""Client side of the agent, for the node hooks and the CLI: over the local unix socket,
or over TCP with munge-authenticated messages (``agent.address``; see
:mod:`slurm_colo.contracts.transport`).

Every function has a hard time limit and returns ``None`` when the agent cannot be
reached or answers garbage: callers (the Prolog above all) must never fail because of it.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from slurm_colo.contracts.placement import Placement
from slurm_colo.contracts.protocol import format_request, parse_reply
from slurm_colo.errors import AgentError, ProtocolError

if TYPE_CHECKING:
    from slurm_colo.config import Config


def request(
    address: str,
    verb: str,
    payload: dict[str, Any],
    timeout_s: float = 1.0,
    cfg: Config | None = None,
) -> dict[str, Any]:
    """One round trip to the agent at ``address`` (a unix socket path, ``unix:PATH`` or
    ``tcp:HOST:PORT``; over TCP the message is munge-authenticated with ``cfg``'s cluster
    name, munge socket and agent user). Raises :class:`AgentError` on any failure."""
    from slurm_colo.contracts import transport

    if not address.startswith("tcp:"):
        return _unix_request(address.removeprefix("unix:"), verb, payload, timeout_s)
    a = cfg.agent if cfg is not None else None
    line = transport.round_trip(
        address,
        format_request(verb, payload),
        timeout_s,
        a.cluster if a else "default",
        (a.munge_socket or None) if a else None,
        signers=transport.agent_signers(a.user if a else "slurm-colo"),
    )
    try:
        return parse_reply(verb, line)
    except ProtocolError as e:
        raise AgentError(str(e)) from None


def _unix_request(
    socket_path: str, verb: str, payload: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """One round trip over the local unix socket (the common case: no extra imports)."""
    deadline = time.monotonic() + timeout_s
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout_s)
        try:
            s.connect(socket_path)
            s.sendall(format_request(verb, payload))
            buf = b""
            while not buf.endswith(b"\n"):
                s.settimeout(max(0.001, deadline - time.monotonic()))
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        except FileNotFoundError:
            raise AgentError(
                f"agent socket {socket_path} does not exist",
                hint="start the agent: slurm-colo agent",
            ) from None
        except ConnectionRefusedError:
            raise AgentError(
                f"nothing listens on {socket_path}", hint="start the agent: slurm-colo agent"
            ) from None
        except TimeoutError:
            raise AgentError(f"agent did not answer within {timeout_s:g}s") from None
        except OSError as e:
            raise AgentError(f"agent socket {socket_path}: {e.strerror or e}") from None
    finally:
        s.close()
    if not buf:
        raise AgentError("agent closed the connection without answering")
    try:
        return parse_reply(verb, buf)
    except ProtocolError as e:
        raise AgentError(str(e)) from None


def _quiet(
    cfg: Config, verb: str, payload: dict[str, Any], timeout_s: float
) -> dict[str, Any] | None:
    try:
        return request(cfg.agent.address, verb, payload, timeout_s, cfg)
    except AgentError:
        return None


def ping(cfg: Config, timeout_s: float = 1.0) -> dict[str, Any] | None:
    return _quiet(cfg, "PING", {}, timeout_s)


#: how long the Prolog waits for the agent's answer to JOBSTART: a job started without its
#: placement runs without MPS and unprofiled, so a busy agent (a look at Slurm holding its
#: lock on a loaded head node) is worth a second or two; a dead one refuses at once
JOBSTART_TIMEOUT_S = 2.0


def job_start_answer(
    cfg: Config,
    job_id: int,
    node: str,
    gpus: list[int],
    user: str,
    uid: int,
    timeout_s: float = JOBSTART_TIMEOUT_S,
) -> dict[str, Any] | None:
    """The agent's answer to JOBSTART; None when it could not be had (agent down, hung,
    or an unreadable answer)."""
    return _quiet(
        cfg,
        "JOBSTART",
        {"job": job_id, "node": node, "gpus": gpus, "user": user, "uid": uid},
        timeout_s,
    )


def placement_in(answer: dict[str, Any]) -> Placement | None:
    """The placement in a JOBSTART answer (None: the agent did not place the job)."""
    raw = answer.get("placement")
    if not raw:
        return None
    try:
        return Placement.from_wire(raw)
    except ProtocolError:
        return None


def job_ended(
    cfg: Config, job_id: int, node: str, exit_code: int = 0, timeout_s: float = 0.5
) -> None:
    _quiet(cfg, "JOBEND", {"job": job_id, "node": node, "exit_code": exit_code}, timeout_s)


def probe(cfg: Config, report: dict[str, Any], timeout_s: float = 2.0) -> dict[str, Any] | None:
    """Send a probe report (slurm_colo.node.probe); the agent's verdict, None if unreachable."""
    return _quiet(cfg, "PROBE", report, timeout_s)


def explain(cfg: Config, job_id: int, timeout_s: float = 2.0) -> dict[str, Any]:
    return request(cfg.agent.address, "EXPLAIN", {"job": job_id}, timeout_s, cfg)


def status(cfg: Config, timeout_s: float = 2.0) -> dict[str, Any]:
    return request(cfg.agent.address, "STATUS", {}, timeout_s, cfg)
