"""The agent's TCP listener: node hooks on other hosts reach it with munge-authenticated
messages through the same client as on the head node; anything else is refused."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import private_munged
import pytest
from fake_slurm import QuietSlurm

from slurm_colo.agent.server import Agent
from slurm_colo.config import AgentConfig, Config
from slurm_colo.contracts import client
from slurm_colo.errors import AgentError, CredentialForeign, WrongCluster
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

LAYOUT = (NodeGpus("n1", 4, "v100", 32.0, (0, 1), 4),)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def head() -> Iterator[private_munged.Munged]:
    m = private_munged.start()
    yield m
    m.stop()


@pytest.fixture(scope="module")
def gpu_node(head: private_munged.Munged) -> Iterator[private_munged.Munged]:
    """Another host of the same cluster: its own munged with the head node's key."""
    m = private_munged.start(key=head.key)
    yield m
    m.stop()


@pytest.fixture()
def agent(head: private_munged.Munged, tmp_path: Path) -> Iterator[tuple[Agent, int]]:
    with _tcp_agent(head, tmp_path, LAYOUT) as a:
        yield a


@contextlib.contextmanager
def _tcp_agent(
    head: private_munged.Munged, tmp_path: Path, layout: tuple[NodeGpus, ...]
) -> Iterator[tuple[Agent, int]]:
    port = _free_port()
    sock = str(tmp_path / "agent.sock")
    cfg = Config(
        gpus=layout,
        agent=AgentConfig(
            socket=sock,
            listen=(f"unix:{sock}", f"tcp:127.0.0.1:{port}"),
            address=f"unix:{sock}",
            cluster="alpha",
            munge_socket=head.socket,
            user="root",
        ),
    )
    a = Agent(cfg, backend=QuietSlurm("n1"), learned_file=tmp_path / "learned.json")
    a._start_tcp()
    try:
        yield a, port
    finally:
        a.shutdown()


def _node_cfg(port: int, munged: private_munged.Munged, cluster: str = "alpha") -> Config:
    return Config(
        gpus=LAYOUT,
        agent=AgentConfig(
            address=f"tcp:127.0.0.1:{port}",
            cluster=cluster,
            munge_socket=munged.socket,
            user="root",
        ),
    )


def test_a_node_hook_reaches_the_agent_over_tcp(
    agent: tuple[Agent, int], gpu_node: private_munged.Munged
) -> None:
    a, port = agent
    cfg = _node_cfg(port, gpu_node)
    pong = client.ping(cfg)
    assert pong is not None and pong["pong"] is True
    # a reserved verb from root on the node (the Prolog, the Epilog) is accepted
    assert client.request(cfg.agent.address, "JOBEND", {"job": 5, "node": "n2"}, 2.0, cfg) == {}
    answer = client.job_start_answer(cfg, 6, "n1", [2], "alice", 1000)
    assert answer == {"placement": None}  # not ours: GPU noted
    assert a.state.occupancy.unplaced_gpus[6][:2] == ("n1", (2,))


def test_a_plain_line_on_the_tcp_port_is_refused(agent: tuple[Agent, int]) -> None:
    _, port = agent
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b'JOBEND\t{"job": 5}\n')
        reply = s.makefile("rb").readline()
    assert reply.startswith(b"ERR\tauth unauthenticated")


def test_another_clusters_key_or_name_is_refused(
    agent: tuple[Agent, int], gpu_node: private_munged.Munged
) -> None:
    _, port = agent
    other = private_munged.start()  # another cluster: another key
    try:
        with pytest.raises(CredentialForeign):
            client.request(f"tcp:127.0.0.1:{port}", "PING", {}, 2.0, _node_cfg(port, other))
    finally:
        other.stop()
    with pytest.raises(WrongCluster):
        client.request(
            f"tcp:127.0.0.1:{port}", "PING", {}, 2.0, _node_cfg(port, gpu_node, cluster="beta")
        )
    assert client.ping(_node_cfg(port, gpu_node, cluster="beta")) is None  # hooks: just None


def test_an_unreachable_agent_is_an_agent_error(gpu_node: private_munged.Munged) -> None:
    cfg = _node_cfg(_free_port(), gpu_node)
    with pytest.raises(AgentError, match="nothing listens"):
        client.request(cfg.agent.address, "PING", {}, 1.0, cfg)


def test_the_status_of_a_large_site_reaches_another_host(
    head: private_munged.Munged, gpu_node: private_munged.Munged, tmp_path: Path
) -> None:
    # 1,000 shared GPUs and 5,000 running jobs: a STATUS reply above the 1 MiB that munged
    # seals in one credential (`slurm-colo status` run on a login or GPU node)
    layout = (NodeGpus("g[001-125]", 8, "v100", 32.0, tuple(range(8)), 8),)
    names = layout[0].node_names
    jobs = [
        SlurmJob(
            1000 + k,
            f"train-{k}",
            f"user{k % 40}",
            2000 + k % 40,
            "RUNNING",
            nodes=names[k % len(names)],
            gres=(GresAlloc("shard", "", 1, ((k // len(names)) % 8,)),),
        )
        for k in range(5000)
    ]
    with _tcp_agent(head, tmp_path, layout) as (a, port):
        a.state.apply_snapshot(jobs, [SlurmNode(n, "MIXED") for n in names], 0.0)
        local = a.handle(b"STATUS\t{}\n", peer_uid=0)
        assert len(local) > 1024 * 1024
        st = client.status(_node_cfg(port, gpu_node), timeout_s=30.0)
    assert len(st["gpus"]) == 1000
    assert sum(len(g["occupants"]) for g in st["gpus"]) == 5000
    assert {o["job_id"] for g in st["gpus"] for o in g["occupants"]} == {j.job_id for j in jobs}
