"""Messages to the agent's TCP port from a GPU node: a non-root process may not send the
hooks' verbs, and a plain (unauthenticated) line is refused and logged."""

from __future__ import annotations

from .mntools import AGENT_LOG, AGENT_PORT, HEAD_ADDR, PY, in_node, wait_for

FORGE = r"""
import json, sys
from slurm_colo.config import load_config
from slurm_colo.contracts.client import request
cfg = load_config()
out = {}
for verb, payload in (("JOBEND", {"job_id": 999999, "node": "colo-gpu1"}),
                      ("RECORDS", {"records": []})):
    try:
        out[verb] = "accepted: %r" % (request(cfg.agent.address, verb, payload, 5.0, cfg),)
    except Exception as e:
        out[verb] = "%s: %s" % (type(e).__name__, e)
try:
    out["PING"] = "accepted: %r" % (request(cfg.agent.address, "PING", {}, 5.0, cfg),)
except Exception as e:
    out["PING"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"""

PLAIN = f"""
import socket
s = socket.create_connection(("{HEAD_ADDR}", {AGENT_PORT}), timeout=5)
s.sendall(b"PING\\n")
print(s.makefile().readline().rstrip("\\n"))
"""


def test_forged_hook_messages_from_a_user_on_a_gpu_node_are_refused(mclean: None) -> None:
    import json

    p = in_node("colo-gpu1", PY, "-c", FORGE, user="alice", check=True)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for verb in ("JOBEND", "RECORDS"):
        assert "is reserved" in out[verb] and not out[verb].startswith("accepted"), out
    # the same user, the same channel: a verb anyone may send is answered (so the refusal
    # above is the uid rule, not a broken channel)
    assert out["PING"].startswith("accepted"), out


def test_plain_line_on_the_tcp_port_is_refused_and_logged(mclean: None) -> None:
    mark = AGENT_LOG.stat().st_size
    p = in_node("colo-gpu3", PY, "-c", PLAIN, user="alice", check=True)
    assert p.stdout.strip().startswith("ERR\tauth unauthenticated"), p.stdout

    def logged() -> str:
        with AGENT_LOG.open("rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", "replace")
        return "\n".join(
            x for x in text.splitlines() if "refused a TCP message from 10.77.0.13" in x
        )

    line = wait_for(logged, 10, 0.2, "the refusal in the agent log")
    assert "[unauthenticated]" in line, line
