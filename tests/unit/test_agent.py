"""The agent's state machine and request handling, fed with Slurm snapshots (no I/O)."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_slurm import QuietSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.agent.state import AgentState
from slurm_colo.config import AgentConfig, Config, PlacementConfig
from slurm_colo.contracts.protocol import format_request, parse_reply, parse_request
from slurm_colo.errors import ProtocolError
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.metrics import render
from slurm_colo.scores import ClassInfo, table_from_pairs
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)
SCORES = table_from_pairs(
    [("good", "good", 1.0, 1.0), ("bad", "good", 0.2, 0.3), ("bad", "bad", 0.3, 0.3)],
    classes={c: ClassInfo(memory_gib=4.0) for c in ("good", "bad")},
)


def _state() -> AgentState:
    s = AgentState(Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    return s


def _req(cls: str, user: str = "alice", uid: int = 1000, **kw: str) -> dict[str, str]:
    return {"user": user, "uid": str(uid), "name": "job", "mode": "auto", "class": cls, **kw}


def _job(job_id: int, admin_comment: str, state: str = "RUNNING", idx: int = 0) -> SlurmJob:
    return SlurmJob(
        job_id,
        "job",
        "alice",
        1000,
        state,
        nodes="n1",
        gres=(GresAlloc("shard", "", 1, (idx,)),) if state == "RUNNING" else (),
        admin_comment=admin_comment,
    )


def test_compatible_jobs_are_packed_and_placements_count_before_slurm_sees_them() -> None:
    s = _state()
    a = s.place_request(_req("good"), 1.0)
    b = s.place_request(_req("good"), 1.1)
    assert a["action"] == b["action"] == "share"
    assert a["gres"] == b["gres"] == "gres:shard:v100_s0:1" and a["node"] == "n1"
    assert "1 just-submitted job" in b["comment"] and "slurm-colo[v=1" in b["tag"]


def test_incompatible_and_other_users_are_kept_apart() -> None:
    s = _state()
    a = s.place_request(_req("good"), 1.0)
    b = s.place_request(_req("bad"), 1.0)
    assert b["action"] == "share" and b["gres"] != a["gres"]
    c = s.place_request(_req("good", user="bob", uid=1001), 1.0)
    assert c["action"] == "exclusive"  # both shared GPUs hold alice's jobs (MPS: one user per GPU)
    d = s.place_request(_req("bad"), 1.0)
    assert d["action"] == "exclusive"


def test_a_node_slurm_numbers_otherwise_than_its_devices_gets_no_placement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Its slurm.conf Gres= lists the pool first while the pool is at the top: Slurm would
    give a job placed on GPU 2 the GPU it numbers 2, not device 2. Closed until fixed."""
    top = (NodeGpus("n1", 4, "v100", 32.0, (2, 3), 4),)
    s = AgentState(Config(gpus=top, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    old = "gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2,shard:v100_s2:4,shard:v100_s3:4"
    with caplog.at_level(logging.INFO, "slurm_colo.agent"):
        for t in (0.0, 1.0):
            s.apply_snapshot([], [SlurmNode("n1", "IDLE", gres=old)], t)
    assert [r.getMessage()[:43] for r in caplog.records if r.levelno == logging.ERROR] == [
        "node n1: no job is placed there: Slurm list"
    ]  # once, not at every look at Slurm
    own = s.place_request(_req("good"), 1.5)
    assert own["action"] == "exclusive"
    assert "2 shared GPU(s) on nodes that are down, drained or closed" in own["comment"]
    assert "gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2" in s.status(1.5)["nodes_refused"]["n1"]
    assert not any(g["available"] for g in s.status(1.5)["gpus"])
    assert 'slurm_colo_nodes_closed{node="n1"} 1' in render(s.status(1.5)).splitlines()
    fixed = "gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:v100_s2:4,shard:v100_s3:4"
    s.apply_snapshot([], [SlurmNode("n1", "IDLE", gres=fixed)], 2.0)
    assert s.status(2.0)["nodes_refused"] == {}
    a = s.place_request(_req("good"), 2.5)
    assert a["action"] == "share" and a["gres"] == "gres:shard:v100_s2:1"


def test_a_nodes_gres_is_checked_once_per_text_slurm_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each look at Slurm lists every node's GRES; the same text is not parsed again (it
    changes only with a restart of slurmctld), a changed one is."""
    calls: list[str] = []
    check = NodeGpus.gres_mismatch

    def counted(self: NodeGpus, reported: str) -> str | None:
        calls.append(reported)
        return check(self, reported)

    monkeypatch.setattr(NodeGpus, "gres_mismatch", counted)
    top = (NodeGpus("n1", 4, "v100", 32.0, (2, 3), 4),)
    s = AgentState(Config(gpus=top, placement=PlacementConfig(explore_rate=0.0)), SCORES)
    old = "gpu:v100_s2:1,gpu:v100_s3:1,gpu:v100:2,shard:8"
    for t in (0.0, 1.0, 2.0):
        s.apply_snapshot([], [SlurmNode("n1", "IDLE", gres=old)], t)
    assert calls == [old] and "n1" in s.status(2.0)["nodes_refused"]
    fixed = "gpu:v100:2,gpu:v100_s2:1,gpu:v100_s3:1,shard:8"
    for t in (3.0, 4.0):
        s.apply_snapshot([], [SlurmNode("n1", "IDLE", gres=fixed)], t)
    assert calls == [old, fixed] and s.status(4.0)["nodes_refused"] == {}


def test_bad_input_gives_own_gpu_not_an_error() -> None:
    s = _state()
    assert s.place_request(_req("bad class!"), 1.0)["action"] == "exclusive"
    assert s.place_request({"uid": "x"}, 1.0)["action"] == "exclusive"


def test_snapshot_links_tokens_rebuilds_after_restart_and_forgets_finished_jobs() -> None:
    s = _state()
    a = s.place_request(_req("good"), 1.0)
    s.apply_snapshot([_job(11, a["tag"])], [SlurmNode("n1", "MIXED")], 2.0)
    assert s.view.gpus[0].occupants[0].job_id == 11
    fresh = _state()  # a restarted agent
    fresh.apply_snapshot([_job(11, a["tag"])], [SlurmNode("n1", "MIXED")], 3.0)
    occ = fresh.view.gpus[0].occupants
    assert [(o.job_id, o.cls, o.pending) for o in occ] == [(11, "good", False)]
    fresh.apply_snapshot([_job(11, a["tag"], state="COMPLETED")], [], 4.0)
    assert fresh.view.gpus[0].occupants == []


def test_unseen_placements_expire() -> None:
    s = _state()
    s.place_request(_req("good"), 0.0)
    s.apply_snapshot([], [], s.cfg.agent.pending_ttl_s + 1)
    assert all(not g.occupants for g in s.view.gpus)


def test_exclusive_jobs_block_their_gpu() -> None:
    s = _state()
    s.apply_snapshot(
        [
            SlurmJob(
                5,
                "x",
                "carol",
                7,
                "RUNNING",
                nodes="n1",
                gres=(GresAlloc("gpu", "v100_s0", 1, (0,)),),
            )
        ],
        [],
        1.0,
    )
    assert s.place_request(_req("good"), 1.0)["gres"] == "gres:shard:v100_s1:1"
    assert s.place_request(_req("bad"), 1.0)["action"] == "exclusive"


def test_jobs_reported_by_the_hooks_block_their_gpu_until_they_end() -> None:
    s = _state()
    assert s.job_started(6, None, 1.5, "n1", [0]) is None  # not ours: GPU 0 is taken whole
    assert s.place_request(_req("good"), 1.6)["gres"] == "gres:shard:v100_s1:1"
    assert s.place_request(_req("bad"), 1.6)["action"] == "exclusive"
    s.job_ended(6, 1.7)
    assert s.place_request(_req("bad"), 1.7)["gres"] == "gres:shard:v100_s0:1"


def test_job_start_returns_limits_and_explain_reports() -> None:
    s = _state()
    a = s.place_request(_req("good"), 1.0)
    b = s.place_request(_req("good"), 1.0)
    s.apply_snapshot([_job(11, a["tag"]), _job(12, b["tag"], state="PENDING")], [], 2.0)
    p = s.job_started(12, None, 3.0)
    assert p is not None and p["shared"] and p["mechanism"] == "mps" and p["gpu"] == 0
    assert p["partners"] == [11] and p["thread_pct"] and p["mem_limit_gib"]
    assert p["probe_s"] == s.cfg.placement.probe_s  # the node probes on the agent's schedule
    ex = s.explain(12)
    assert (
        ex["known"]
        and ex["action"] == "share"
        and ex["now_with"] == [11]
        and ex["partners"] == ["11"]
    )
    assert not s.explain(99)["known"]
    st = s.status(10.0)
    assert st["gpus"][0]["predicted_delta"] == pytest.approx(2.0)
    assert {o["job_id"] for o in st["gpus"][0]["occupants"]} == {11, 12}


def test_protocol_round_trip_and_errors() -> None:
    verb, f = parse_request(format_request("PLACE", {"user": "a\tb", "mode": "auto"}))
    assert verb == "PLACE" and f == {"user": "a b", "mode": "auto"}
    assert parse_request(b'JOBEND\t{"job": 5}\n') == ("JOBEND", {"job": 5})
    for bad in (b"NOPE\t{}", b"PLACE\tnovalue", b"JOBEND\t[1]", b"JOBEND\t{x", b"\xff\xfe"):
        with pytest.raises(ProtocolError):
            parse_request(bad)
    assert parse_reply("PLACE", "OK\taction=share\tnode=n1\n") == {"action": "share", "node": "n1"}
    with pytest.raises(ProtocolError, match="agent error"):
        parse_reply("STATUS", "ERR\tboom")


def test_server_checks_who_may_place() -> None:
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    line = format_request("PLACE", _req("good"))
    assert agent.handle(line, peer_uid=0).startswith(b"OK\taction=")
    assert agent.handle(line, peer_uid=424242).startswith(b"ERR\tPLACE is reserved")
    assert agent.handle(b"PING\t{}\n", peer_uid=424242).startswith(b"OK\t")
    assert agent.handle(b"garbage\n", peer_uid=0).startswith(b"ERR\t")
    assert agent.handle(b'JOBEND\t{"nojob": 1}\n', peer_uid=0).startswith(b"ERR\tJOBEND failed")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b'JOBEND\t{"node": "n1"}\n', "JOBEND failed: 'job' is missing"),
        (b"EXPLAIN\t{}\n", "EXPLAIN failed: 'job' is missing"),
        (b'JOBSTART\t{"node": "n1", "gpus": [0]}\n', "JOBSTART failed: 'job' is missing"),
        (b'JOBSTART\t{"job": 5, "gpus": 7}\n', "gpus: must be a list of GPU indexes, not int"),
        (b'JOBSTART\t{"job": 5, "gpus": true}\n', "gpus: must be a list of GPU indexes, not bool"),
        (b'JOBSTART\t{"job": 5, "gpus": "12"}\n', "gpus: must be a list of GPU indexes, not str"),
    ],
)
def test_a_request_lacking_a_field_or_of_the_wrong_shape_is_named(line: bytes, said: str) -> None:
    """Expected: the error reply names the field (it said Python's ``'job'`` or ``'int'
    object is not iterable``), and a string of GPU indexes is not read digit by digit
    (``"12"`` was GPUs 1 and 2)."""
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    reply = agent.handle(line, peer_uid=0).decode()
    assert reply.startswith("ERR\t") and said in reply, reply
    assert agent.handle(b'JOBSTART\t{"job": 5, "node": "n1", "gpus": [0]}\n', 0).startswith(b"OK")


def test_ping_names_the_user_the_agent_changes_jobs_as() -> None:
    import os
    import pwd

    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    reply = parse_reply("PING", agent.handle(b"PING\t{}\n", peer_uid=0).decode())
    assert reply["user"] == pwd.getpwuid(os.geteuid()).pw_name


def test_reported_jobs_are_forgotten_when_slurm_no_longer_lists_them() -> None:
    s = _state()
    s.job_started(6, None, 10.0, "n1", [0])
    s.apply_snapshot([], [], 11.0)  # snapshot older than the report: keep it
    assert s.view.gpus[0].exclusive_job == 6
    s.apply_snapshot([], [], 10.0 + 3 * s.cfg.agent.refresh_interval_s + 1)
    assert s.view.gpus[0].exclusive_job is None


def test_a_reported_gpu_counts_while_slurms_state_gives_the_job_no_index() -> None:
    """pyslurm 24.11 lists a running job with its request (``gpu:1``) and no GPU index: the
    GPU its Prolog reported (JOBSTART) stays taken whole. Expected before: the snapshot's
    entry for the job hid the report, and GPU 0 was opened for sharing."""
    s = _state()
    s.job_started(6, None, 10.0, "n1", [0])
    running = SlurmJob(
        6, "x", "carol", 7, "RUNNING", nodes="n1", gres=(GresAlloc("gpu", "", 1, ()),)
    )
    s.apply_snapshot([running], [], 11.0, asked=10.5)
    assert s.view.gpus[0].exclusive_job == 6
    assert s.place_request(_req("good"), 11.0)["gres"] == "gres:shard:v100_s1:1"


def test_a_reported_job_a_later_snapshot_does_not_list_is_forgotten_at_once() -> None:
    """A snapshot asked for after the report lists every job still running: one it does not
    list has ended (its Epilog's word may have been lost), however recent the report."""
    s = _state()
    s.job_started(6, None, 10.0, "n1", [0])
    s.apply_snapshot([], [], 11.0, asked=9.5)  # Slurm read before the report: keep it
    assert s.view.gpus[0].exclusive_job == 6
    s.apply_snapshot([], [], 11.5, asked=10.5)
    assert s.view.gpus[0].exclusive_job is None


def _fresh_decision(s: AgentState, token: str, req: dict[str, str]):  # type: ignore[no-untyped-def]
    from slurm_colo.placement import JobRequest, place

    r = JobRequest(
        key=token, user=req["user"], uid=int(req["uid"]), cls=req["class"], mode=req["mode"]
    )
    return place(r, s.view, s.scores, s.cfg.placement)


def test_prepared_answer_is_the_decision_a_fresh_placement_would_make() -> None:
    s = AgentState(Config(gpus=LAYOUT, placement=PlacementConfig(explore_rate=0.5)), SCORES)
    s.apply_snapshot([], [SlurmNode("n1", "IDLE")], 0.0)
    for k in range(6):  # a stream of identical requests: each after the first is prepared
        prepared = s._prepared
        req = _req("good" if k % 3 else "bad")
        reply, record = s.decide(req, 1.0 + k)
        token = reply["tag"].split("tok=")[1].split()[0]
        hit = prepared is not None and prepared[4] == token
        assert hit == (k % 3 == 2)  # prepared for the same kind of request only
        want = _fresh_decision(s, token, req)
        assert reply["action"] == want.action
        if want.shared:
            assert reply["gres"] == f"gres:shard:{want.gres_type}:1"
        record()
        assert s._prepared is not None


def test_prepared_answer_is_dropped_when_the_view_changes() -> None:
    s = _state()
    s.place_request(_req("good"), 1.0)
    before = s._prepared
    assert before is not None and before[5].decision.shared
    # the hooks report a job we did not place on the prepared GPU: the view is rebuilt
    gpu = before[5].decision.index
    s.job_started(77, None, 2.0, node="n1", gpus=[gpu])
    reply, record = s.decide(_req("good"), 3.0)
    record()
    assert before[4] not in reply["tag"]  # not the stale answer
    assert reply["gres"] != f"gres:shard:v100_s{gpu}:1"


def test_server_answers_place_before_recording_it() -> None:
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.refresh()
    line = format_request(
        "PLACE", {"uid": "1000", "user": "alice", "name": "j", "mode": "auto", "class": "good"}
    )
    reply, after = agent.answer(line, peer_uid=0)
    assert reply.startswith(b"OK\taction=share")
    assert agent.lock.locked() and not agent.state.ledger.placements  # recorded only by `after`
    after()
    assert not agent.lock.locked() and len(agent.state.ledger.placements) == 1


def _agent_with_deadline(ms: int) -> tuple[Agent, bytes]:
    """An agent whose Lua hook waits ``ms`` for an answer, and a PLACE request for job j1."""
    agent = Agent(
        Config(gpus=LAYOUT, agent=AgentConfig(request_timeout_ms=ms)), backend=QuietSlurm("n1")
    )
    agent.state.scores = SCORES
    agent.refresh()
    line = format_request(
        "PLACE", {"uid": "1000", "user": "alice", "name": "j1", "mode": "auto", "class": "good"}
    )
    return agent, line


def test_a_place_slower_than_the_hook_waits_is_logged_and_dropped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """slurmctld's log says only "receive: timeout": the agent's log says how long it took.
    The job got the fallback, so its placement must not hold a slot on the GPU."""
    agent, line = _agent_with_deadline(150)
    with caplog.at_level(logging.WARNING, logger="slurm_colo.agent"):
        _, after = agent.answer(line, peer_uid=0)
        after(True)
        assert "took" not in caplog.text  # a quick answer says nothing
        assert len(agent.state.ledger.placements) == 1
        decide = agent.state.decide

        def slow(*a: Any, **k: Any) -> Any:
            time.sleep(0.2)
            return decide(*a, **k)

        monkeypatch.setattr(agent.state, "decide", slow)
        reply, after = agent.answer(line.replace(b"j1", b"j2"), peer_uid=0)
        after(True)
    assert reply.startswith(b"OK\taction=")
    assert "PLACE for j2 took" in caplog.text and "request_timeout_ms = 150" in caplog.text
    assert len(agent.state.ledger.placements) == 1 and not agent.lock.locked()


def test_the_time_a_place_request_waits_for_the_lock_is_measured_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A PLACE that comes while a look at Slurm holds the agent's lock waits for it; the
    late-answer warning says how much of the time that was, and STATUS (the metrics) keeps
    the sum, count and longest of those waits."""
    agent, line = _agent_with_deadline(150)
    _, after = agent.answer(line, peer_uid=0)
    after(True)
    quick = agent.place_wait["max"]
    assert agent.place_wait["count"] == 1 and 0 <= quick < 0.1
    held = threading.Event()

    def hold_lock() -> None:  # a look at Slurm taking 0.3 s
        with agent.lock:
            held.set()
            time.sleep(0.3)

    t = threading.Thread(target=hold_lock)
    t.start()
    assert held.wait(5)
    with caplog.at_level(logging.WARNING, logger="slurm_colo.agent"):
        _, after = agent.answer(line.replace(b"j1", b"j2"), peer_uid=0)
        after(True)
    t.join()
    waited = re.search(r"PLACE for j2 took (\d+) ms \((\d+) ms of it waiting", caplog.text)
    assert waited is not None and 250 <= int(waited[2]) <= int(waited[1])
    st = parse_reply("STATUS", agent.handle(format_request("STATUS", {}), peer_uid=0))
    pw = st["place_lock_wait_seconds"]
    assert pw["count"] == 2 and pw["max"] >= 0.25 and pw["sum"] >= pw["max"] + quick - 1e-9


def test_the_agents_last_log_line_sums_up_its_placement_answers() -> None:
    """``agent stopped: ...``: how many PLACE requests, their mean answer and lock wait and
    the longest wait; the test run's lab report (tests/support/agent_report.py) reads it."""
    from agent_report import Waits, stopped_runs

    agent, line = _agent_with_deadline(150)
    assert agent.place_summary() == "0 placement requests answered"
    for name in (b"j1", b"j2", b"j3"):
        _, after = agent.answer(line.replace(b"j1", name), peer_uid=0)
        after(True)
    text = agent.place_summary()
    assert text.startswith("3 placement requests answered in ")
    read = Waits()
    stopped_runs(f"INFO agent stopped: {text}\n", read)
    pw = agent.place_wait
    assert (read.runs, read.count) == (1, 3)
    assert read.wait_ms == pytest.approx(1000 * pw["sum"], abs=0.2)
    assert read.longest_ms == pytest.approx(1000 * pw["max"], abs=0.1)


def test_a_place_answer_the_hook_did_not_get_is_dropped(tmp_path: Path) -> None:
    """The hook closes its connection when it gives up: the reply cannot be delivered, and
    the placement is not recorded."""
    from slurm_colo.agent import listeners

    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.refresh()
    answered = threading.Event()

    def answer_late(line: bytes, uid: int | None) -> tuple[bytes, Callable[[bool], None]]:
        time.sleep(0.3)  # the client below has given up and closed by now
        reply, after = agent.answer(line, uid)
        answered.set()
        return reply, after

    stop = threading.Event()
    server = listeners.unix_server(tmp_path / "a.sock", answer_late, stop)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(str(tmp_path / "a.sock"))
            c.sendall(
                format_request(
                    "PLACE",
                    {"uid": "1000", "user": "alice", "name": "j", "mode": "auto", "class": "good"},
                )
            )
        assert answered.wait(5)
        deadline = time.time() + 5
        while agent.lock.locked() and time.time() < deadline:
            time.sleep(0.01)
        assert not agent.lock.locked() and not agent.state.ledger.placements
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def test_a_user_holding_many_connections_open_cannot_crowd_out_the_hooks(
    tmp_path: Path,
) -> None:
    """Expected: the socket is world-connectable (EXPLAIN, STATUS), so one user may hold
    only so many connections open at once; one more is closed at once, and a trusted user
    (root, Slurm's: the Lua hook and the node hooks) is never held back. Before, each
    connection had its own thread until it sat idle for five minutes, however many."""
    import os

    from slurm_colo.agent import listeners

    def pong(line: bytes, uid: int | None) -> tuple[bytes, Callable[[bool], None]]:
        return b"OK\tpong\n", lambda delivered: None

    def ping(c: socket.socket) -> bytes:
        c.settimeout(5)
        try:
            c.sendall(b"PING\t{}\n")
            return c.recv(100)
        except (BrokenPipeError, ConnectionResetError):
            return b""  # closed by the agent

    me = os.getuid()
    for trusted, answered in ((set(), 2), ({me}, 3)):
        stop = threading.Event()
        path = tmp_path / f"a{len(trusted)}.sock"
        server = listeners.unix_server(
            path, pong, stop, per_user=2, exempt=lambda uid, t=trusted: uid in t
        )
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        conns = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(3)]
        try:
            for c in conns:
                c.connect(str(path))
            replies = [ping(c) for c in conns]
            assert sum(r == b"OK\tpong\n" for r in replies) == answered, replies
            if not trusted:
                assert replies[2] == b""  # closed at once
                conns[0].close()
                deadline = time.time() + 5
                while time.time() < deadline:  # its thread ends, and a place frees
                    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                        c.connect(str(path))
                        if ping(c) == b"OK\tpong\n":
                            break
                    time.sleep(0.05)
                else:
                    raise AssertionError("no connection taken after one closed")
        finally:
            for c in conns:
                c.close()
            stop.set()
            server.shutdown()
            server.server_close()


def test_jobs_the_hook_gave_the_fallback_are_counted_once() -> None:
    s = _state()
    fell_back = replace(_job(5, "", state="PENDING"), comment="colo: agent unavailable, own GPU")
    placed = replace(_job(6, "", state="PENDING"), comment="colo: GPU 0 of n1")
    nodes = [SlurmNode("n1", "IDLE")]
    s.apply_snapshot([fell_back, placed], nodes, 1.0)
    s.apply_snapshot([fell_back, placed], nodes, 2.0)  # the same job at the next look
    assert s.status(2.0)["fallbacks"] == {"agent_unavailable": 1}
    s.apply_snapshot([fell_back, replace(fell_back, job_id=7)], nodes, 3.0)
    text = render(s.status(3.0), 3.0)
    assert 'slurm_colo_fallbacks_total{reason="agent_unavailable"} 2' in text


def test_explain_of_a_job_the_hook_never_placed_gives_the_hooks_note() -> None:
    from importlib.resources import files

    from slurm_colo.cli.spine import _fmt_explain
    from slurm_colo.contracts.hook_notes import HOOK_NOTES

    lua = (files("slurm_colo") / "data" / "job_submit.lua").read_text()
    assert all(n in lua for n in HOOK_NOTES)  # the notes the hook writes itself
    # and every note it writes on its own is one of them (not the agent's answer)
    written = re.findall(r'(?:add_comment|not_shared)\(job_desc,\s*"([^"]*)"', lua)
    assert len(written) >= 5 and all(w.startswith(HOOK_NOTES) for w in written), written
    unknown = {"job_id": 7, "known": False, "reason": "no placement recorded: x"}
    late = _fmt_explain(dict(unknown, slurm_comment="mine | colo: agent unavailable, own GPU"))
    assert late.startswith('job 7: not placed by the agent; its comment says "colo: agent')
    assert "did not answer within agent.request_timeout_ms" in late and "mine" not in late
    big = _fmt_explain(
        dict(unknown, slurm_comment="colo: multi-GPU/multi-node jobs are never shared")
    )
    assert big.endswith('says "colo: multi-GPU/multi-node jobs are never shared"')
    array = _fmt_explain(
        dict(unknown, slurm_comment="colo: job array not shared (each task keeps its own GPU)")
    )
    assert array.startswith('job 7: not placed by the agent; its comment says "colo: job array')
    # the agent's own note (a placement it has forgotten) and no note keep the reason
    for comment in ("colo: GPU 0 of vm (opened for sharing)", "", None):
        assert (
            _fmt_explain(dict(unknown, slurm_comment=comment)) == "job 7: no placement recorded: x"
        )


def test_explain_text_gives_the_reason_once() -> None:
    from slurm_colo.cli.spine import _fmt_explain

    s = _state()
    s.place_request(_req("good"), 1.0)
    s.place_request(_req("bad"), 1.0)  # both shared GPUs now hold alice's jobs
    reply = s.place_request(_req("good", user="bob", uid=1001), 1.0)
    token = reply["tag"].split("tok=")[1].split()[0].rstrip("]")
    text = _fmt_explain({**s.ledger.explanations[token], "known": True, "job_id": 99})
    assert "  own GPU: no shared GPU with a free slot for this user" in text
    assert text.count("own GPU") == 1
    off = _fmt_explain(
        {
            "known": True,
            "job_id": 98,
            "action": "exclusive",
            "reason": "--colocate=off: job left as submitted",
        }
    )
    assert "  not shared: --colocate=off: job left as submitted" in off


def test_explain_says_when_no_score_set_knows_the_jobs_class() -> None:
    from slurm_colo.cli.spine import _fmt_explain

    s = _state()
    for job_id, name, cls in ((21, "run-00042", ""), (22, "job", "good"), (23, "job.sh", "")):
        reply = s.place_request({**_req(cls), "name": name}, 1.0)
        s.apply_snapshot([_job(job_id, reply["tag"], "PENDING")], [SlurmNode("n1", "IDLE")], 2.0)
        ex = s.explain(job_id)
        text = _fmt_explain(ex)
        one_off = name == "run-00042"  # "job.sh" is the default class, treated apart
        assert ex.get("class_unknown", False) is one_off, ex
        assert ("class run-00042: no score set in use knows it" in text) is one_off, text
        assert ("a name with a run number is a new class each time" in text) is one_off, text


def test_explain_of_a_new_class_without_a_run_number_says_it_is_learnt() -> None:
    from slurm_colo.cli.spine import _fmt_explain

    ex = {"known": True, "job_id": 5, "cls": "run", "class_unknown": True, "action": "exclusive"}
    text = _fmt_explain(ex)
    assert "class run: no score set in use knows it" in text
    assert "learnt from its jobs that ran, by the nightly retrain" in text
    assert "run number" not in text


def test_each_look_at_slurm_keeps_the_placement_index_and_parses_each_tag_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 10,000 jobs, parsing every tag and building the index afresh were most of each
    look's time under the agent's lock (benchmarks/agent_bench.py --placed)."""
    from slurm_colo.contracts.placement import Placement

    s = _state()
    s.place_request(_req("good"), 1.0)  # an index, and a placement with its tag
    (p,) = s.ledger.placements.values()
    tag = p.decision.placement(p.token, p.request.cls, p.request.mode).to_tag()
    parsed: list[str | None] = []
    real = Placement.from_tag.__func__  # type: ignore[attr-defined]

    def counting(cls: type[Placement], text: str | None) -> Placement | None:
        parsed.append(text)
        return real(cls, text)

    monkeypatch.setattr(Placement, "from_tag", classmethod(counting))
    index = s.view.policy_state
    jobs = [_job(7, tag, "RUNNING", p.decision.index or 0)]
    for look in range(3):
        s.apply_snapshot(jobs, [SlurmNode("n1", "MIXED")], 2.0 + look)
        assert s.view.policy_state is index  # carried to the new view, not built again
        assert s.ledger.by_job.get(7) == p.token
    assert parsed == [tag]  # read at the first look only
    fresh = _state()
    fresh.apply_snapshot(jobs, [SlurmNode("n1", "MIXED")], 5.0)
    reply, _ = s.decide(_req("good", user="bob", uid=1001), 6.0)
    want, _ = fresh.decide(_req("good", user="bob", uid=1001), 6.0)
    assert {k: v for k, v in reply.items() if k != "tag"} == {
        k: v for k, v in want.items() if k != "tag"
    }


def test_a_view_built_again_reuses_only_occupants_whose_inputs_did_not_change() -> None:
    """Each view reuses the last view's occupant of a running job when nothing it is built
    from changed (its placement, the job's start, the score set): the view is the one built
    without any reuse, after every kind of change."""
    import copy

    s = _state()
    for k in range(3):
        s.place_request(_req("good"), 1.0 + k)
    placed = list(s.ledger.placements.values())
    tags = [p.decision.placement(p.token, p.request.cls, p.request.mode).to_tag() for p in placed]
    jobs = [_job(20 + k, tags[k], "RUNNING", placed[k].decision.index or 0) for k in range(3)]
    jobs.append(_job(30, "", "RUNNING", 1))  # a shard job the agent did not place

    def check() -> None:
        want = copy.deepcopy(s.view.gpus)
        s.occupancy._occupants = {}  # no reuse
        s.rebuild()
        assert s.view.gpus == want

    s.apply_snapshot(jobs, [SlurmNode("n1", "MIXED")], 5.0)
    check()
    s.job_started(21, tags[1], 6.0)  # a placement's running flag and start
    check()
    later = [
        SlurmJob(**{**j.__dict__, "start_time": 9.0}) if j.job_id in (20, 30) else j for j in jobs
    ]
    s.apply_snapshot(later, [SlurmNode("n1", "MIXED")], 10.0)  # new starts
    check()
    s.scores = table_from_pairs(
        [("good", "good", 0.9, 0.9)],
        classes={c: ClassInfo(memory_gib=2.0) for c in ("good", "default")},
    )
    s.rebuild()  # another score set: the unplaced job's memory is read again
    check()
    s.job_ended(20, 11.0)
    check()
    assert s.occupancy._occupants.keys() == {21, 22, 30}


def test_a_slow_jobstart_is_logged_with_where_its_time_went(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The Prolog waits 2 s for JOBSTART: an answer near that says what held it up."""
    from slurm_colo.agent import server

    monkeypatch.setattr(server, "JOBSTART_SLOW_S", 0.1)
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.refresh()
    place = {"uid": "1000", "user": "alice", "name": "j1", "mode": "auto", "class": "good"}
    reply, after = agent.answer(format_request("PLACE", place), peer_uid=0)
    after(True)
    tag = reply.decode().split("\ttag=")[1].split("\t")[0]
    start = format_request("JOBSTART", {"job": "7", "node": "n1", "gpus": [0]})
    with caplog.at_level(logging.WARNING, logger="slurm_colo.agent"):
        monkeypatch.setattr(agent.backend, "job", lambda job_id: _job(job_id, tag))
        quick, _ = agent.answer(start, peer_uid=0)
        assert "JOBSTART" not in caplog.text  # a quick answer says nothing

        def slow_lookup(job_id: int) -> SlurmJob:
            time.sleep(0.25)
            return _job(job_id, tag)

        monkeypatch.setattr(agent.backend, "job", slow_lookup)
        agent.state.ledger.by_job.pop(7)  # not linked yet: the agent reads its tag again
        reply, _ = agent.answer(start.replace(b"7", b"8"), peer_uid=0)
    assert b'"shared":true' in quick and b'"shared":true' in reply  # both found its placement
    assert "JOBSTART for job 8 took" in caplog.text
    msg = next(r.getMessage() for r in caplog.records if "JOBSTART for job 8" in r.getMessage())
    slurm_ms = int(msg.split("reading the job from Slurm ")[1].split(" ms")[0])
    assert slurm_ms >= 250 and "the Prolog waits 2 s" in msg


def test_slurm_down_while_reading_a_job_is_said_not_taken_for_no_such_job(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from slurm_colo.errors import SlurmError

    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.refresh()

    def down(job_id: int) -> SlurmJob:
        raise SlurmError("squeue --json --jobs=9 failed: Unable to contact slurm controller")

    monkeypatch.setattr(agent.backend, "job", down)
    with caplog.at_level(logging.WARNING, logger="slurm_colo.agent"):
        start = format_request("JOBSTART", {"job": "9", "node": "n1", "gpus": [0]})
        reply, _ = agent.answer(start, peer_uid=0)
    assert reply.startswith(b"OK\t") and b'"shared":true' not in reply  # fail-open: no tag
    # the Prolog is told, so it reads the job's tag itself
    assert parse_reply("JOBSTART", reply.decode()) == {"placement": None, "slurm_unreachable": True}
    assert "job 9: its placement could not be read from Slurm" in caplog.text
    ex = parse_reply("EXPLAIN", agent.handle(format_request("EXPLAIN", {"job": "9"}), 0).decode())
    assert ex["known"] is False
    assert ex["note"] == (
        "Slurm could not be asked about the job: squeue --json --jobs=9 failed: "
        "Unable to contact slurm controller"
    )


def test_a_place_request_with_an_impossible_uid_is_refused_and_harms_no_later_one() -> None:
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.state.scores = SCORES
    agent.refresh()
    for uid in (10**30, -7, 2**32):
        reply, after = agent.answer(format_request("PLACE", _req("good", uid=uid)), peer_uid=0)
        after(True)
        got = parse_reply("PLACE", reply.decode())
        assert got["action"] == "exclusive" and "is not a user id" in got["comment"]
    reply, after = agent.answer(format_request("PLACE", _req("good")), peer_uid=0)
    after(True)
    assert parse_reply("PLACE", reply.decode())["action"] == "share"


@pytest.mark.parametrize(
    "verb,payload",
    [
        ("JOBSTART", {"job": float("inf"), "node": "n1", "gpus": [0]}),
        ("JOBSTART", {"job": 7, "node": "n1", "gpus": [float("inf")]}),
        ("JOBSTART", {"job": -3, "node": "n1", "gpus": [0]}),
        ("JOBEND", {"job": float("-inf"), "node": "n1"}),
        ("EXPLAIN", {"job": 2**40}),
    ],
)
def test_a_request_with_a_job_id_no_job_has_is_refused_with_a_reply(
    verb: str, payload: dict[str, object]
) -> None:
    """An infinite job id used to raise OverflowError past the request's error handling:
    no reply at all, the connection dropped. Now the caller is told."""
    agent = Agent(Config(gpus=LAYOUT), backend=QuietSlurm("n1"))
    agent.refresh()
    reply, after = agent.answer(format_request(verb, payload), peer_uid=0)
    after(True)
    assert reply.startswith(f"ERR\t{verb} failed: ".encode()), reply
    assert b"job" in reply or b"gpus" in reply
