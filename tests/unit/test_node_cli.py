"""``slurm-colo node status|cleanup`` and ``slurm-colo spool ingest|list``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from slurm_colo.cli import app
from slurm_colo.node import procs
from slurm_colo.node.gpu.mps_daemon import gpu_mps
from slurm_colo.node.lifecycle import job_end, job_start

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import leftover_mps, mps_job, node_config


def test_status_cleanup_and_spool(tmp_path: Path, monkeypatch) -> None:
    cfg = node_config(tmp_path)
    monkeypatch.setenv("SLURM_COLO_CONFIG", cfg.source)
    run = CliRunner().invoke
    try:
        job_start(cfg, mps_job(1), launch_sampler=False)
        out = run(app, ["node", "status", "--json"])
        assert out.exit_code == 0, out.output
        s = json.loads(out.output)
        assert s["gpus"]["0"]["jobs"] == [1] and s["gpus"]["0"]["mps_alive"] is True
        assert s["jobs"] == [1] and s["spooled_records"] == 0
        out = run(app, ["node", "status"])
        assert "GPU 0: jobs [1]" in out.output and "alive" in out.output
        # a busy GPU is left alone without --force
        out = run(app, ["node", "cleanup"])
        assert out.exit_code == 0 and "left alone" in out.output
        assert procs.alive(gpu_mps(cfg, 0).state()["pid"])
        job_end(cfg, 1, 0, detach_stop=False)
        out = run(app, ["spool", "list"])
        assert out.output.count(".json") == 1
        out = run(app, ["spool", "ingest"])  # no schema yet: an error that says the fix
        assert out.exit_code != 0 and "db upgrade" in str(out.exception or out.output)
        from slurm_colo.store import make_engine, upgrade

        upgrade(make_engine(cfg.store.url))
        out = run(app, ["spool", "ingest"])
        assert out.exit_code == 0 and "1 new" in out.output
    finally:
        procs.kill_all(leftover_mps(cfg))


def test_cleanup_force_stops_a_daemon_and_resets_the_guard(tmp_path: Path, monkeypatch) -> None:
    cfg = node_config(tmp_path)
    monkeypatch.setenv("SLURM_COLO_CONFIG", cfg.source)
    job_start(cfg, mps_job(1), launch_sampler=False)
    gm = gpu_mps(cfg, 0)
    gm.layout.crashes(0).write_text("[1e12]")
    out = CliRunner().invoke(app, ["node", "cleanup", "--gpu", "0", "--force"])
    assert out.exit_code == 0 and "GPU 0: clean" in out.output
    assert leftover_mps(cfg) == [] and not gm.state() and not gm.layout.crashes(0).exists()


def test_status_shows_a_gpus_faults_of_the_last_day_once_it_is_idle(
    tmp_path: Path, monkeypatch
) -> None:
    """The journal is emptied when the last job leaves; its recent faults stay for status."""
    import time

    from slurm_colo.node import journal
    from slurm_colo.node.layout import NodeLayout

    cfg = node_config(tmp_path)
    monkeypatch.setenv("SLURM_COLO_CONFIG", cfg.source)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    old = {"ev": "fault", "t": time.time() - 2 * 86400, "kind": "daemon_dead", "detail": "old"}
    try:
        job_start(cfg, mps_job(1), launch_sampler=False)
        journal.append(lay.journal(0), old)
        fault = "Client {PID: 4242} encountered a fatal GPU error."
        now = time.time()
        journal.append(
            lay.journal(0), {"ev": "fault", "t": now, "kind": "client_fatal", "detail": fault}
        )
        job_end(cfg, 1, 0, detach_stop=False)
    finally:
        procs.kill_all(leftover_mps(cfg))
    out = CliRunner().invoke(app, ["node", "status", "--json"])
    assert out.exit_code == 0, out.output
    gpu = json.loads(out.output)["gpus"]["0"]
    assert gpu["jobs"] == [] and [f["detail"] for f in gpu["faults"]] == [fault]
    assert gpu["faults"][0]["kind"] == "client_fatal"
    text = CliRunner().invoke(app, ["node", "status"]).output
    assert f"UTC client_fatal: {fault}" in text and "old" not in text
    assert [e["ev"] for e in journal.read(lay.journal(0))] == ["fault"]  # stays are gone


def test_damaged_gpu_state_files_are_read_as_nothing_known(tmp_path: Path, monkeypatch) -> None:
    from slurm_colo.node.layout import NodeLayout

    cfg = node_config(tmp_path)
    monkeypatch.setenv("SLURM_COLO_CONFIG", cfg.source)
    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    lay.gpu_dir(0).mkdir(parents=True, exist_ok=True)
    lay.mps_state(0).write_text('{"pid": "abc", "pipe_dir": 5}')
    lay.crashes(0).write_text("[1%s]" % ("0" * 400))  # a time past a float's range
    lay.journal(0).write_text('{"ev": "start"}\n{"ev": "start", "job": "x", "t": 1}\n[1]\n')
    out = CliRunner().invoke(app, ["node", "status", "--json"])
    assert out.exit_code == 0, out.output
    g = json.loads(out.output)["gpus"]["0"]
    assert g["jobs"] == [] and g["mps_daemon"] is None and g["recent_crashes"] == 0
    from slurm_colo.node.gpu.mps_daemon import saved_crashes

    lay.crashes(1).parent.mkdir(parents=True, exist_ok=True)
    lay.crashes(1).write_text("5")  # not a list
    assert saved_crashes(lay.crashes(1)) == []
    try:  # the Prolog on that GPU starts its daemon as if none had been there
        job_start(cfg, mps_job(1), launch_sampler=False)
        g = json.loads(CliRunner().invoke(app, ["node", "status", "--json"]).output)["gpus"]["0"]
        assert g["jobs"] == [1] and g["mps_alive"] is True
    finally:
        job_end(cfg, 1, 0, detach_stop=False)
        procs.kill_all(leftover_mps(cfg))
