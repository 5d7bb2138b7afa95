"""A GPU node's records reach the head node's history through the agent (RECORDS over the
munge-authenticated TCP channel): stored once by record id, kept in the node's spool while
the agent cannot be reached and sent when it can."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import private_munged
import pytest
from fake_slurm import QuietSlurm
from sqlalchemy import text

from slurm_colo.agent.server import Agent
from slurm_colo.config import AgentConfig, Config, NodeConfig, StoreConfig, records_to
from slurm_colo.contracts.enums import RecordsTo
from slurm_colo.contracts.records import JobRecord
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.spool.directory import SpoolDirs, pending, write_record
from slurm_colo.spool.drain import ingest_pending
from slurm_colo.store import make_engine, upgrade

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)


@pytest.fixture(scope="module")
def munged() -> Iterator[private_munged.Munged]:
    m = private_munged.start()
    yield m
    m.stop()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Head:
    """The head node: an agent on a TCP port with its SQLite history."""

    def __init__(self, tmp: Path, munged: private_munged.Munged, port: int) -> None:
        self.url = f"sqlite:///{tmp}/history.db"
        upgrade(make_engine(self.url))
        sock = str(tmp / "agent.sock")
        self.cfg = Config(
            gpus=LAYOUT,
            store=StoreConfig(url=self.url),
            agent=AgentConfig(
                socket=sock,
                listen=(f"unix:{sock}", f"tcp:127.0.0.1:{port}"),
                address=f"unix:{sock}",
                cluster="lab",
                munge_socket=munged.socket,
                user="root",
            ),
        )
        self.agent = Agent(self.cfg, backend=QuietSlurm("n1"), learned_file=tmp / "learned.json")
        self.agent._start_tcp()

    def stop(self) -> None:
        self.agent.shutdown()

    def jobs(self) -> list[tuple[int, str]]:
        with make_engine(self.url).connect() as c:
            return [
                tuple(r) for r in c.execute(text("SELECT job_id, node FROM jobs ORDER BY job_id"))
            ]


def _node_cfg(tmp: Path, munged: private_munged.Munged, port: int) -> Config:
    """A GPU node: its own run and spool directories, the default SQLite store.url (a
    file on this node: so its records go to the agent)."""
    return Config(
        gpus=LAYOUT,
        node=NodeConfig(run_dir=str(tmp / "node-run"), spool_dir=str(tmp / "node-spool")),
        agent=AgentConfig(
            address=f"tcp:127.0.0.1:{port}", cluster="lab", munge_socket=munged.socket, user="root"
        ),
    )


def _rec(job: int) -> JobRecord:
    return JobRecord(
        job_id=job,
        node="gpu2",
        user="alice",
        uid=1000,
        cls="resnet18",
        start=1000.0 + job,
        end=2000.0 + job,
        gpus=[0],
        shared=True,
        mechanism="mps",
        cluster="lab",
    )


def test_records_go_through_the_agent_once(tmp_path: Path, munged: private_munged.Munged) -> None:
    port = _port()
    head = Head(tmp_path, munged, port)
    node = _node_cfg(tmp_path, munged, port)
    dirs = SpoolDirs.of_config(node)
    try:
        assert records_to(node) == RecordsTo.AGENT
        for j in (1, 2, 3):
            write_record(dirs, _rec(j))
        rep = ingest_pending(node, retry_s=0)
        assert (rep.ingested, rep.duplicates, rep.errors) == (3, 0, [])
        assert head.jobs() == [(1, "gpu2"), (2, "gpu2"), (3, "gpu2")] and pending(dirs) == []
        write_record(dirs, _rec(2))  # the same record again (an Epilog re-run)
        rep = ingest_pending(node, retry_s=0)
        assert (rep.ingested, rep.duplicates) == (0, 1) and len(head.jobs()) == 3
    finally:
        head.stop()


def test_records_wait_while_the_head_node_is_down_then_arrive_once(
    tmp_path: Path, munged: private_munged.Munged
) -> None:
    port = _port()
    node = _node_cfg(tmp_path, munged, port)
    dirs = SpoolDirs.of_config(node)
    for j in (7, 8):
        write_record(dirs, _rec(j))
    rep = ingest_pending(node, retry_s=0)  # nothing listens: kept, reported
    assert rep.ingested == 0 and "records stay spooled" in rep.errors[0]
    assert len(pending(dirs)) == 2
    heads: list[Head] = []

    def wait(seconds: float) -> None:  # the head node comes back while the node waits
        if not heads:
            heads.append(Head(tmp_path, munged, port))

    try:
        rep = ingest_pending(node, retry_s=30, sleep=wait)
        assert (rep.ingested, rep.errors) == (2, []) and pending(dirs) == []
        assert heads[0].jobs() == [(7, "gpu2"), (8, "gpu2")]
    finally:
        for h in heads:
            h.stop()


def test_a_record_the_agent_cannot_store_is_named_and_the_rest_stored(
    tmp_path: Path, munged: private_munged.Munged
) -> None:
    port = _port()
    head = Head(tmp_path, munged, port)
    try:
        good = _rec(5).to_dict()
        reply = head.agent.records.store({"records": [good, {"job_id": "x"}, "junk"]})
        assert reply["stored"] == 1 and len(reply["bad"]) == 2
        assert head.agent.handle(b'RECORDS\t{"records": 3}\n', 0).startswith(b"ERR\tRECORDS failed")
        assert head.agent.handle(b'RECORDS\t{"records": []}\n', 4242).startswith(
            b"ERR\tRECORDS is reserved"
        )
    finally:
        head.stop()


def test_where_records_go() -> None:
    tcp = AgentConfig(address="tcp:head:6830")
    assert records_to(Config(agent=tcp)) == RecordsTo.AGENT
    assert records_to(Config()) == RecordsTo.STORE  # on the head node itself
    pg = StoreConfig(url="postgresql+psycopg://h/db")
    assert records_to(Config(agent=tcp, store=pg)) == RecordsTo.STORE  # straight to PostgreSQL
    assert (
        records_to(Config(agent=tcp, node=NodeConfig(records_to=RecordsTo.STORE)))
        == RecordsTo.STORE
    )
