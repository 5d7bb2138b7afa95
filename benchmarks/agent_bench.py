"""The agent's own time per placement request (no socket), on a large simulated cluster.

    .venv/bin/python benchmarks/agent_bench.py [--nodes 250] [--gpus 8] [--jobs 10000] [--placed]
        [--closed N] [--named]

Builds an agent state for NODES nodes with GPUS shared GPUs each, feeds it a Slurm snapshot
with JOBS running shard jobs spread over them (classes of the bundled V100 data), then times
PLACE handling (parse + policy + bookkeeping + reply formatting) for a stream of new jobs.
With ``--placed`` the running jobs carry the agent's placement tags, as after an agent
restart: the look at Slurm then rebuilds their placements and keeps their time-limit
accounts too, and saving those accounts (``time_owed.json``, once a minute) is timed
apart. With ``--closed N``, N nodes are then emptied, jobs placed there at submission
wait (pending), and the nodes close to placement (their GRES out of device order): the look
that holds those jobs, and the next, are timed. The agent's files go to a temporary
directory. With ``--named`` each running job and each new one has a name of its own
(``run-00042``), as sweeps and dated runs do: classes the score set has never seen.
Target (issue): well under 1 ms per request.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from slurm_colo.agent.server import Agent
from slurm_colo.config import Config
from slurm_colo.contracts.enums import Mechanism
from slurm_colo.contracts.options import derive_class
from slurm_colo.contracts.placement import Placement
from slurm_colo.contracts.protocol import format_request, parse_reply
from slurm_colo.gavel import bundled_path, load_gavel
from slurm_colo.gres_layout import NodeGpus
from slurm_colo.seed import table_from_measurements
from slurm_colo.slurm.model import GresAlloc, SlurmJob, SlurmNode

#: the job array whose tasks end together
BURST = 100


class _Backend:
    name = "bench"

    def __init__(self, jobs: list[SlurmJob], nodes: list[SlurmNode]) -> None:
        self._jobs, self._nodes = jobs, nodes

    def jobs(self) -> list[SlurmJob]:
        return self._jobs

    def job(self, job_id: int) -> SlurmJob | None:
        return None

    def nodes(self) -> list[SlurmNode]:
        return self._nodes


class _NoChanges:
    """A job control that changes nothing: the benchmark's made-up jobs must never reach
    a real Slurm (an undo, a release or a time limit the agent asks for is dropped)."""

    def requeue_hold(self, *args: object, **kw: object) -> None: ...

    def aim_and_release(self, *args: object, **kw: object) -> None: ...

    def admin_hold(self, *args: object, **kw: object) -> None: ...

    def hold_pending(self, *args: object, **kw: object) -> None: ...

    def retarget(self, *args: object, **kw: object) -> None: ...

    def extend_time_limit(self, *args: object, **kw: object) -> None: ...


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=250)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument(
        "--placed",
        action="store_true",
        help="the running jobs carry the agent's placement tags (the agent placed them): "
        "the look at Slurm then also keeps their time-limit accounts",
    )
    ap.add_argument(
        "--closed",
        type=int,
        default=0,
        help="then close this many nodes to placement (their GRES out of device order) "
        "and time the looks that hold the jobs placed there",
    )
    ap.add_argument(
        "--named",
        action="store_true",
        help="every job named afresh (run-00042): classes the score set does not know",
    )
    a = ap.parse_args()
    rng = random.Random(1)
    data = load_gavel(bundled_path(), "v100")
    classes = data.classes
    layout = NodeGpus(f"g[0001-{a.nodes:04d}]", a.gpus, "v100", 32.0, tuple(range(a.gpus)), 4)
    names = layout.node_names
    jobs = []
    for k in range(a.jobs):
        node, idx = rng.choice(names), rng.randrange(a.gpus)
        cls = f"run-{k:05d}" if a.named else rng.choice(classes)
        jobs.append(
            SlurmJob(
                100000 + k,
                cls,
                f"u{rng.randrange(50)}",
                1000 + rng.randrange(50),
                "RUNNING",
                nodes=node,
                gres=(GresAlloc("shard", "", 1, (idx,)),),
                admin_comment=Placement(
                    token=f"t{k}", cls=cls, mechanism=Mechanism.SHARD, node=node, gpu=idx
                ).to_tag()
                if a.placed
                else "",
                start_time=time.time(),
                end_time=time.time() + 86400.0,
            )
        )
    kept = Path(tempfile.mkdtemp(prefix="agent-bench-"))  # never a real agent's files
    agent = Agent(
        Config(gpus=(layout,)),
        backend=_Backend(jobs, [SlurmNode(n, "MIXED") for n in names]),
        control=_NoChanges(),  # type: ignore[arg-type]
        learned_file=kept / "learned.json",
    )
    agent.state.scores = table_from_measurements(data)
    agent.owed_saved_at = math.inf  # the save, once a minute, is timed apart below
    t0 = time.perf_counter()
    agent.refresh()
    t_refresh = time.perf_counter() - t0
    t0 = time.perf_counter()
    agent.refresh()  # the next look at the same jobs: what every look costs at steady state
    t_next = time.perf_counter() - t0
    # the fastest of a few: a collection of this big heap can land in any one of them
    t_save = t_copy = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        agent.save_time_owed(time.time())
        t_save = min(t_save, time.perf_counter() - t0)
        t0 = time.perf_counter()
        agent.state.credit.accounts()  # the part of the save made under the agent's lock
        t_copy = min(t_copy, time.perf_counter() - t0)
    accounts = len(agent.state.credit.jobs)
    # a job's end as its Epilog reports it, then the view built again (by the agent's view
    # thread soon after, or by whatever reads it first); the median of a few
    t_end, t_view = [], []
    for k in range(5):
        line = format_request("JOBEND", {"job": 100000 + k, "node": jobs[k].nodes, "exit_code": 0})
        t0 = time.perf_counter()
        agent.handle(line, peer_uid=0)
        t_end.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        agent.state.fresh()
        t_view.append(time.perf_counter() - t0)
    # a job array's tasks ending together: their ends, then the view built once
    burst = range(5, min(5 + BURST, len(jobs)))
    t0 = time.perf_counter()
    for k in burst:
        line = format_request("JOBEND", {"job": 100000 + k, "node": jobs[k].nodes, "exit_code": 0})
        agent.handle(line, peer_uid=0)
    agent.state.fresh()
    t_burst = time.perf_counter() - t0
    shutil.rmtree(kept, ignore_errors=True)
    assert derive_class(classes[0]) == classes[0]
    lat = []
    shared = 0
    for _ in range(a.requests):
        uid = 1000 + rng.randrange(50)
        line = format_request(
            "PLACE",
            {
                "v": 1,
                "uid": uid,
                "user": f"u{uid - 1000}",
                "name": "train",
                "mode": "auto",
                "class": f"run-{a.jobs + len(lat):05d}" if a.named else rng.choice(classes),
            },
        )
        t = time.perf_counter()
        reply = agent.handle(line, peer_uid=0)
        lat.append((time.perf_counter() - t) * 1e6)
        shared += b"action=share" in reply
    lat.sort()
    print(
        f"cluster: {a.nodes} nodes x {a.gpus} shared GPUs = {a.nodes * a.gpus} GPUs, {a.jobs} running jobs"
        + (" placed by the agent" if a.placed else "")
        + (", each named afresh" if a.named else "")
        + "; "
        f"snapshot rebuild {t_refresh * 1000:.0f} ms, the next look {t_next * 1000:.0f} ms"
    )
    print(
        f"a job's end reported by its Epilog (JOBEND): {statistics.median(t_end) * 1000:.1f} ms; "
        f"the view built again after it: {statistics.median(t_view) * 1000:.0f} ms; "
        f"{len(burst)} ends together and the view: {t_burst * 1000:.0f} ms"
    )
    if accounts:
        print(
            f"saving {accounts} time-limit accounts (once a minute): {t_save * 1000:.0f} ms, "
            f"of which the copy made under the agent's lock {t_copy * 1000:.0f} ms"
        )
    print(
        f"PLACE handling, {a.requests} requests ({shared} shared): median {statistics.median(lat):.0f} us, "
        f"p99 {lat[int(0.99 * len(lat))]:.0f} us, max {lat[-1]:.0f} us (target: well under 1000 us)"
    )
    if a.closed:
        _closed_nodes(agent, layout, jobs, a.closed, rng, classes)


def _closed_nodes(
    agent: Agent,
    layout: NodeGpus,
    running: list[SlurmJob],
    count: int,
    rng: random.Random,
    classes: list[str],
) -> None:
    """Time the looks at Slurm once ``count`` nodes list their GPUs out of device order
    (closed to placement): the look that holds the jobs placed there that have not started,
    and each later look, which tries every held job on the whole view again."""
    # ``count`` nodes fall idle; jobs the agent places there at submission wait (held by
    # their user, say): their tags from PLACE
    emptied = set(layout.node_names[:count])
    backend = agent.backend
    assert isinstance(backend, _Backend)
    running = [j for j in running if j.nodes not in emptied]
    backend._jobs = running
    agent.refresh()
    pending = []
    for k in range(4 * count * layout.count):
        line = format_request(
            "PLACE",
            {
                "v": 1,
                "uid": 1000,
                "user": "u0",
                "name": "later",
                "mode": "auto",
                "class": rng.choice(classes),
            },
        )
        reply = parse_reply("PLACE", agent.handle(line, peer_uid=0))
        tag = Placement.from_tag(reply.get("tag", ""))
        if tag is None or tag.node is None:
            continue
        pending.append(
            SlurmJob(
                200000 + k,
                tag.cls,
                "u0",
                1000,
                "PENDING",
                admin_comment=reply["tag"],
                submit_time=time.time(),
            )
        )
    backend._jobs = running + pending
    agent.refresh()  # the pending jobs matched to their placements
    by_node = Counter(Placement.from_tag(j.admin_comment).node for j in pending)  # type: ignore[union-attr]
    closed = [n for n, _ in by_node.most_common(count)]
    out_of_order = ",".join(f"gpu:{t}:{n}" for t, n in reversed(layout.type_runs()))
    backend._nodes = [
        SlurmNode(n.name, n.state, out_of_order if n.name in closed else layout.node_gres())
        for n in backend._nodes
    ]
    logging.getLogger("slurm_colo").setLevel(logging.CRITICAL)  # a line per closed node
    gc.collect()  # each look timed without a collection left over from the setup
    t0 = time.perf_counter()
    agent.refresh()
    t_hold = time.perf_counter() - t0
    held = len(agent.state.held)
    gc.collect()
    t0 = time.perf_counter()
    agent.refresh()
    t_after = time.perf_counter() - t0
    print(
        f"{len(closed)} nodes closed to placement: the look that holds their {held} pending "
        f"jobs {t_hold * 1000:.0f} ms, each later look (all held jobs tried again) "
        f"{t_after * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
