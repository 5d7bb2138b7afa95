"""`slurm-colo doctor` checks, each fed fixtures (files in tmp_path, a fake runner)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from slurm_colo.admin import doctor as doc
from slurm_colo.admin import slurm_checks as sc
from slurm_colo.admin.check import FAIL, OK, WARN, exit_code, format_check, read_text
from slurm_colo.admin.run import NOT_FOUND, Result
from slurm_colo.config import NodeConfig, load_config, parse_config
from slurm_colo.errors import AgentError, ScoresError, StoreError
from slurm_colo.gres_layout import gres_conf
from slurm_colo.lua import render_job_submit_lua
from slurm_colo.scores import ScoreTable, load_scores, publish_scores

CFG_TOML = """
[[gpus]]
nodes = "gpu[01-02]"
count = 2
model = "v100"
shared = "1"
"""


def cfg():
    return parse_config(CFG_TOML, "site.toml")


class FakeRunner:
    def __init__(self, answers: dict[str, Result]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> Result:
        self.calls.append(list(argv))
        return self.answers.get(argv[0], Result(tuple(argv), NOT_FOUND, "", "not found"))


SBATCH_OK = {
    "sbatch": Result(
        ("sbatch", "--help"), 0, "Usage: sbatch\n      --colocate[=mode]  share a GPU\n"
    )
}


# ---- config ----------------------------------------------------------------------------
def test_config_ok_warn_fail(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text(CFG_TOML)
    c, loaded = doc.check_config(good)
    assert c.status == OK and loaded is not None and loaded.gpus

    empty = tmp_path / "empty.toml"
    empty.write_text("")
    c, loaded = doc.check_config(empty)
    assert c.status == WARN and "no [[gpus]]" in c.message and loaded is not None

    c, loaded = doc.check_config(tmp_path / "absent.toml")
    assert c.status == WARN and "not found" in c.message and loaded is not None

    bad = tmp_path / "bad.toml"
    bad.write_text('[placement]\nfallback = "maybe"\n')
    c, loaded = doc.check_config(bad)
    assert c.status == FAIL and loaded is None and "placement.fallback" in c.message


# ---- slurm.conf ------------------------------------------------------------------------
def test_parse_slurm_conf_keys_comments_and_node_lines():
    conf = sc.parse_slurm_conf(
        "ClusterName=lab  # comment\njobsubmitplugins=lua,require_timelimit\n"
        "NodeName=gpu01 Gres=gpu:2\n#GresTypes=gpu\nGresTypes = gpu,shard\n"
    )
    assert conf["clustername"] == "lab"
    assert conf["jobsubmitplugins"] == "lua,require_timelimit"
    assert conf["grestypes"] == "gpu,shard"
    assert "nodename" not in conf


def test_slurm_conf_checks(tmp_path):
    p = tmp_path / "slurm.conf"
    ok = sc.check_slurm_conf("JobSubmitPlugins=lua\nGresTypes=gpu,shard\n", p)
    assert [c.status for c in ok] == [OK, OK]
    bad = sc.check_slurm_conf("JobSubmitPlugins=require_timelimit\nGresTypes=gpu\n", p)
    assert [c.status for c in bad] == [FAIL, FAIL]
    assert "JobSubmitPlugins=lua" in bad[0].fix and "shard" in bad[1].message
    missing = sc.check_slurm_conf(None, p)
    assert missing[0].status == FAIL and str(p) in missing[0].message


# ---- SPANK -----------------------------------------------------------------------------
def _plugstack(tmp_path: Path, line: str, so_exists: bool = True) -> Path:
    so = tmp_path / "lib" / "colocate.so"
    if so_exists:
        so.parent.mkdir(parents=True, exist_ok=True)
        so.write_bytes(b"\x7fELF")
    d = tmp_path / "plugstack.conf.d"
    d.mkdir(exist_ok=True)
    (d / "slurm-colo.conf").write_text(line.format(so=so) + "\n")
    main = tmp_path / "plugstack.conf"
    main.write_text(f"# site plugins\noptional /usr/lib/other.so\ninclude {d}/*\n")
    return main


def test_spank_listed_via_include_and_sbatch_lists_option(tmp_path):
    main = _plugstack(tmp_path, "optional {so}")
    runner = FakeRunner(SBATCH_OK)
    checks = sc.check_spank(main, runner)
    assert [c.status for c in checks] == [OK, OK]
    assert runner.calls == [["sbatch", "--help"]]


def test_spank_required_is_a_warning(tmp_path):
    main = _plugstack(tmp_path, "required {so}")
    c = sc.check_spank(main, FakeRunner(SBATCH_OK))[0]
    assert c.status == WARN and "optional" in c.fix


def test_spank_missing_file_unlisted_and_not_loaded(tmp_path):
    main = _plugstack(tmp_path, "optional {so}", so_exists=False)
    checks = sc.check_spank(main, FakeRunner({"sbatch": Result(("sbatch",), 0, "Usage: sbatch\n")}))
    assert [c.status for c in checks] == [FAIL, FAIL]
    assert "missing" in checks[0].message and "install spank" in checks[0].fix
    (tmp_path / "plugstack.conf").write_text("optional /usr/lib/other.so\n")
    checks = sc.check_spank(tmp_path / "plugstack.conf", FakeRunner({}))
    assert checks[0].status == FAIL and "not listed" in checks[0].message
    assert checks[1].status == WARN and "sbatch not found" in checks[1].message


# ---- node hooks -----------------------------------------------------------------------
def _hooks_fixture(tmp_path: Path, ours: bool = True) -> tuple[str, Path]:
    d = tmp_path / "prolog.d"
    d.mkdir(parents=True)
    (d / "10-site").write_text("#!/bin/sh\necho site\n")
    body = "exec python -m slurm_colo.hooks prolog" if ours else "echo other"
    (d / "50-slurm-colo").write_text(f"#!/bin/sh\n{body}\n")
    task = tmp_path / "slurm-colo-taskprolog"
    task.write_text("#!/bin/sh\nexec python -m slurm_colo.hooks taskprolog\n")
    conf = f"Prolog={d}/*\nEpilog={d}/*\nTaskProlog={task}\nTaskEpilog={task}\n"
    env = tmp_path / "hooks.env"
    env.write_text(f"# comment\nSLURM_COLO_PYTHON={sys.executable}\nSLURM_COLO_CONFIG=/x\n")
    return conf, env


def test_node_hooks_ok_with_glob_and_single_files(tmp_path):
    conf, env = _hooks_fixture(tmp_path)
    c = sc.check_node_hooks(conf, env, gpu_node=True)
    assert c.status == OK and sys.executable in c.message


def test_node_hooks_unset_foreign_unseen_and_bad_env(tmp_path):
    conf, env = _hooks_fixture(tmp_path, ours=False)
    c = sc.check_node_hooks(conf, env, gpu_node=True)
    assert c.status == FAIL and "no slurm-colo shim in Prolog=" in c.message
    c = sc.check_node_hooks("JobSubmitPlugins=lua\n", env, gpu_node=True)
    assert c.status == FAIL and "Prolog, Epilog, TaskProlog, TaskEpilog not set" in c.message
    elsewhere = "".join(
        f"{k}=/nonexistent/{k}\n" for k in ("Prolog", "Epilog", "TaskProlog", "TaskEpilog")
    )
    assert sc.check_node_hooks(elsewhere, env, gpu_node=False).status == WARN
    assert sc.check_node_hooks(elsewhere, env, gpu_node=True).status == FAIL
    good, _ = _hooks_fixture(tmp_path / "b")
    env.write_text("SLURM_COLO_PYTHON=/nonexistent/python\n")
    c = sc.check_node_hooks(good, env, gpu_node=True)
    assert c.status == FAIL and "/nonexistent/python" in c.message
    c = sc.check_node_hooks(good, tmp_path / "absent.env", gpu_node=True)
    assert c.status == FAIL and "missing" in c.message


# ---- job_submit.lua --------------------------------------------------------------------
def test_job_submit_lua_current_stale_merged_missing(tmp_path):
    expected = render_job_submit_lua(cfg())
    assert sc.check_job_submit_lua(tmp_path, expected).status == FAIL
    main = tmp_path / "job_submit.lua"
    main.write_text(expected)
    assert sc.check_job_submit_lua(tmp_path, expected).status == OK
    main.write_text(expected.replace("timeout_s = ", "timeout_s = 9 + "))
    c = sc.check_job_submit_lua(tmp_path, expected)
    assert c.status == WARN and "out of date" in c.message
    main.write_text("function slurm_job_submit() return slurm.SUCCESS end\n")
    assert sc.check_job_submit_lua(tmp_path, expected).status == FAIL
    # merged layout: ours as job_submit_colo.lua, loaded and called from the site script
    (tmp_path / "job_submit_colo.lua").write_text(expected)
    c = sc.check_job_submit_lua(tmp_path, expected)
    assert c.status == FAIL and "neither loads it" in c.message
    main.write_text(
        'dofile("/etc/slurm/job_submit_colo.lua")\nfunction slurm_job_submit(j, p, u)\n'
        "  pcall(colo_job_submit, j, p, u)\n  return slurm.SUCCESS\nend\n"
    )
    assert sc.check_job_submit_lua(tmp_path, expected).status == OK
    (tmp_path / "job_submit_colo.lua").write_text(expected + "-- edited\n")
    assert sc.check_job_submit_lua(tmp_path, expected).status == WARN


def _lua_socket(tmp_path: Path) -> Path:
    so = tmp_path / "lib" / "lua" / "5.1" / "socket" / "unix.so"
    so.parent.mkdir(parents=True, exist_ok=True)
    so.write_bytes(b"\x7fELF")
    return so


def test_lua_socket_check(tmp_path):
    so = _lua_socket(tmp_path)
    c = sc.check_lua_socket([str(tmp_path / "lib" / "lua" / "5.*" / "socket" / "unix.so")])
    assert c.status == OK and str(so) in c.message
    c = sc.check_lua_socket([str(tmp_path / "nowhere" / "*.so")])
    assert c.status == WARN and c.fix == "apt-get install lua-socket"


# ---- gres.conf -------------------------------------------------------------------------
def test_parse_gres_conf_expands_ranges_and_nodeless_lines():
    recs = sc.parse_gres_conf(
        "AutoDetect=off\nNodeName=n[1-2] Name=gpu Type=v100 File=/dev/nvidia[0-1]\n"
        "Name=shard Count=8 File=/dev/nvidia[2-3]  # no NodeName: every node\n"
        "Name=mps Count=100\n",
        ["n1", "n2"],
    )
    assert ("n1", "gpu", "v100", "/dev/nvidia1", 1) in recs
    assert ("n2", "shard", "", "/dev/nvidia3", 4) in recs
    assert len(recs) == 8
    assert not any(r[1] == "mps" for r in recs)


def test_gres_conf_consistent_with_generated_layout(tmp_path):
    c = cfg()
    p = tmp_path / "gres.conf"
    assert sc.check_gres_conf(gres_conf(c.gpus), p, c).status == OK
    # the same layout written by hand with per-node lines and a File range
    by_hand = "\n".join(
        [
            "AutoDetect=off",
            "NodeName=gpu01 Name=gpu Type=v100 File=/dev/nvidia0",
            "NodeName=gpu02 Name=gpu Type=v100 File=/dev/nvidia0",
            "NodeName=gpu[01-02] Name=gpu Type=v100_s1 File=/dev/nvidia1",
            "NodeName=gpu[01-02] Name=shard Count=4 File=/dev/nvidia1",
            "NodeName=login1 Name=gpu File=/dev/nvidia0",  # a node outside the config: ignored
        ]
    )
    assert sc.check_gres_conf(by_hand, p, c).status == OK


def test_gres_conf_inconsistent(tmp_path):
    c = cfg()
    wrong = gres_conf(c.gpus).replace("Type=v100_s1", "Type=v100")
    chk = sc.check_gres_conf(wrong, tmp_path / "gres.conf", c)
    assert chk.status == FAIL
    assert "missing" in chk.message and "gpu01 gpu:v100_s1 /dev/nvidia1" in chk.message
    assert "not in the config" in chk.message
    assert sc.check_gres_conf(None, tmp_path / "gres.conf", c).status == FAIL
    assert sc.check_gres_conf("", tmp_path / "g", parse_config("", "x")).status == WARN


@pytest.mark.timeout(30)  # before: a FIFO kept doctor waiting for a writer for ever
def test_doctor_reads_only_regular_files(tmp_path):
    os.mkfifo(tmp_path / "gres.conf")
    assert read_text(tmp_path / "gres.conf") is None  # a FIFO: not read, so no wait
    assert read_text(Path("/dev/null")) is None
    assert read_text(tmp_path) is None
    (tmp_path / "slurm.conf").write_bytes(b"ClusterName=c\xff\n")
    assert read_text(tmp_path / "slurm.conf") == "ClusterName=c\ufffd\n"


def test_node_gres_must_list_the_gpus_in_device_index_order(tmp_path):
    """slurmctld numbers a node's GPUs in the order of Gres=: the layout's order is the
    device order (gpu01's GPU 0 is whole, GPU 1 shared)."""
    c, p = cfg(), tmp_path / "slurm.conf"
    good = (
        "ClusterName=x\nNodeName=gpu[01-02] CPUs=8 Gres=gpu:v100:1,gpu:v100_s1:1,shard:4 "
        "State=UNKNOWN\nNodeName=login1 CPUs=4  # no GPUs\n"
    )
    ok = sc.check_node_gres(good, p, c)
    assert ok.status == OK and "2 node(s)" in ok.message
    pool_first = good.replace("gpu:v100:1,gpu:v100_s1:1", "gpu:v100_s1:1,gpu:v100:1")
    bad = sc.check_node_gres(pool_first, p, c)
    assert bad.status == FAIL and "2 node(s)" in bad.message
    assert "gpu01: Gres=gpu:v100_s1:1,gpu:v100:1,shard:4, expected gpu:v100:1" in bad.message
    assert "slurm-colo install" in bad.fix
    no_gpu = good.replace("gpu:v100:1,gpu:v100_s1:1,", "")
    assert sc.check_node_gres(no_gpu, p, c).status == FAIL  # Gres=shard:4 alone
    one_line = "NodeName=gpu01 Gres=gpu:v100:1,gpu:v100_s1:1,shard:4\n"
    partial = sc.check_node_gres(one_line, p, c)
    assert partial.status == WARN and "gpu02" in partial.message
    assert sc.check_node_gres(None, p, c).status == WARN
    assert "below whole GPUs" not in ok.message  # gpu[01-02]'s pool is GPU 1 of 2


def test_node_gres_notes_a_shared_pool_below_whole_gpus(tmp_path):
    """Slurm gives a plain --gres=gpu job the lowest free GPU: a pool at GPU 0 is taken
    whole while idle. Right, so OK, with the advice."""
    c = parse_config(CFG_TOML.replace('shared = "1"', 'shared = "0"'), "site.toml")
    text = "NodeName=gpu[01-02] CPUs=8 Gres=gpu:v100_s0:1,gpu:v100:1,shard:4\n"
    chk = sc.check_node_gres(text, tmp_path / "slurm.conf", c)
    assert chk.status == OK, chk
    assert "the shared pool of gpu[01-02] (0 of 2) is below whole GPUs" in chk.message


# ---- agent, store, scores, MPS -----------------------------------------------------------
def test_agent_check():
    assert doc.check_agent(lambda: {"ok": True, "scores": "s1"}, "/s").status == OK
    assert "scores s1" in doc.check_agent(lambda: {"scores": "s1"}, "/s").message
    down = doc.check_agent(lambda: None, "/run/x.sock")
    assert down.status == FAIL and "/run/x.sock" in down.message and "systemctl" in down.fix

    def boom():
        raise AgentError("garbled answer")

    assert doc.check_agent(boom, "/s").status == FAIL


def test_store_check():
    assert doc.check_store(None, "sqlite://").status == WARN
    assert doc.check_store(lambda: "schema rev 3", "sqlite://").message == "schema rev 3"

    def old():
        raise StoreError("database at revision 1, expected 3", hint="slurm-colo db upgrade")

    c = doc.check_store(old, "sqlite://")
    assert c.status == FAIL and c.fix == "slurm-colo db upgrade"


def test_scores_fresh_stale_missing_and_undated(tmp_path):
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    p = tmp_path / "live.json"
    c = doc.check_scores(load_scores, str(p), 48.0, now)
    assert c.status == FAIL and "not found" in c.message

    publish_scores(ScoreTable(id="s1", created=(now - timedelta(hours=5)).isoformat()), p)
    c = doc.check_scores(load_scores, str(p), 48.0, now)
    assert c.status == OK and "5.0 h old" in c.message

    publish_scores(ScoreTable(id="s0", created=(now - timedelta(hours=50)).isoformat()), p)
    c = doc.check_scores(load_scores, str(p), 48.0, now)
    assert c.status == WARN and "50.0 h old" in c.message and "retrain" in c.fix

    publish_scores(ScoreTable(id="s2", created=""), p)
    assert doc.check_scores(load_scores, str(p), 48.0, now).status == WARN

    p.write_text("{not json")
    c = doc.check_scores(load_scores, str(p), 48.0, now)
    assert c.status == FAIL and "corrupt" in c.message


def test_mps_check():
    assert doc.check_mps(NodeConfig(mps_backend="emulator"), lambda n: None, True).status == WARN
    found = doc.check_mps(NodeConfig(), lambda n: f"/usr/bin/{n}", True)
    assert found.status == OK and "/usr/bin/nvidia-cuda-mps-control" in found.message
    assert "slurm-colo node selftest" in found.message
    assert doc.check_mps(NodeConfig(), lambda n: None, True).status == FAIL
    assert doc.check_mps(NodeConfig(), lambda n: None, False).status == WARN


# ---- everything, on a fixture host -----------------------------------------------------
def _host(tmp_path: Path, extra: str = "") -> tuple[Path, doc.System]:
    etc = tmp_path / "etc-slurm"
    etc.mkdir()
    conf = tmp_path / "config.toml"
    scores = tmp_path / "live.json"
    conf.write_text(
        CFG_TOML
        + f'\n[scores]\npath = "{scores}"\n[node]\nrun_dir = "{tmp_path}/run"\n'
        + f'spool_dir = "{tmp_path}/spool"\n'
        + extra
    )
    c = parse_config(conf.read_text(), str(conf))
    publish_scores(ScoreTable(id="s1", created=datetime.now(UTC).isoformat()), scores)
    shims = tmp_path / "shims"
    shims.mkdir()
    for hook in ("prolog", "epilog", "taskprolog", "taskepilog"):
        (shims / f"slurm-colo-{hook}").write_text(
            f"#!/bin/sh\nexec python -m slurm_colo.hooks {hook}\n"
        )
    hooks_env = tmp_path / "hooks.env"
    hooks_env.write_text(f"SLURM_COLO_PYTHON={sys.executable}\nSLURM_COLO_CONFIG={conf}\n")
    (etc / "slurm.conf").write_text(
        "JobSubmitPlugins=lua\nGresTypes=gpu,shard\n"
        + "".join(
            f"{k}={shims}/slurm-colo-{k.lower()}\n"
            for k in ("Prolog", "Epilog", "TaskProlog", "TaskEpilog")
        )
        + "".join(f"NodeName={ng.nodes} CPUs=8 Gres={ng.node_gres()}\n" for ng in c.gpus)
    )
    (etc / "gres.conf").write_text(gres_conf(c.gpus))
    (etc / "job_submit.lua").write_text(render_job_submit_lua(c))
    _plugstack(etc, "optional {so}")
    system = doc.System(
        etc_slurm=etc,
        runner=FakeRunner(SBATCH_OK),
        ping=lambda cfg: {"ok": True},
        store_probe=lambda cfg: lambda: f"{cfg.store.url} ok",
        load_scores=load_scores,
        render_lua=render_job_submit_lua,
        which=lambda n: "/usr/bin/" + n,
        hostname="gpu01",
        hooks_env=hooks_env,
        lua_socket_globs=(str(_lua_socket(tmp_path)),),
    )
    return conf, system


def test_run_checks_all_ok_on_a_healthy_host(tmp_path):
    conf, system = _host(tmp_path)
    checks = doc.run_checks(conf, system)
    assert [c.name for c in checks] == [
        "config",
        "JobSubmitPlugins",
        "GresTypes",
        "SPANK plugin",
        "sbatch --colocate",
        "node hooks",
        "job_submit.lua",
        "lua-socket",
        "gres.conf",
        "Gres=",
        "agent",
        "records",
        "database",
        "scores",
        "MPS",
        "node files",
    ]
    assert all(c.status == OK for c in checks), [format_check(c) for c in checks]
    assert exit_code(checks) == 0


def test_run_checks_names_gpu_files_replaced_by_hand_and_damaged_job_state(tmp_path):
    """Expected: on a GPU node, a GPU lock replaced by a directory, then job state set
    aside as damaged, each a WARN naming what to do; off GPU nodes no such check."""
    from dataclasses import replace

    from slurm_colo.node.layout import NodeLayout

    conf, system = _host(tmp_path)
    lay = NodeLayout.of_config(load_config(conf))
    lay.gpu_lock(1).mkdir(parents=True)
    files = doc.run_checks(conf, system)[-1]
    assert (files.name, files.status) == ("node files", WARN)
    assert files.message == (
        f"{lay.gpu_lock(1)} is not a regular file: the hooks run that GPU's jobs without MPS"
    )
    assert "slurm-colo node cleanup" in files.fix
    lay.gpu_lock(1).rmdir()
    (lay.damaged_dir() / "17.1764300000000000000").mkdir(parents=True)
    files = doc.run_checks(conf, system)[-1]
    assert files.status == WARN and files.message == (
        f"job(s) 17 set aside in {lay.damaged_dir()} (state file damaged: no record)"
    )
    names = [c.name for c in doc.run_checks(conf, replace(system, hostname="head"))]
    assert "node files" not in names


def test_run_checks_agent_down_fails_and_sets_exit_code(tmp_path):
    conf, system = _host(tmp_path)
    from dataclasses import replace

    checks = doc.run_checks(conf, replace(system, ping=lambda cfg: None))
    bad = [c for c in checks if c.status != OK]
    assert [c.name for c in bad] == ["agent"]
    assert exit_code(checks) == 1
    text = format_check(bad[0])
    assert text.startswith("[FAIL] agent:") and "fix: systemctl start" in text


def test_run_checks_stops_at_invalid_config(tmp_path):
    conf, system = _host(tmp_path)
    conf.write_text("[nonsense]\n")
    checks = doc.run_checks(conf, system)
    assert len(checks) == 1 and checks[0].status == FAIL


def test_bad_scores_path_fails(tmp_path):
    conf, system = _host(tmp_path)

    def broken(path: str):
        raise ScoresError(f"score file {path} not found", hint="slurm-colo retrain")

    from dataclasses import replace

    checks = doc.run_checks(conf, replace(system, load_scores=broken))
    sc = [c for c in checks if c.name == "scores"][0]
    assert sc.status == FAIL and sc.fix == "slurm-colo retrain"


# ---- the command -----------------------------------------------------------------------
def test_cli_doctor_reports_and_exits_non_zero(tmp_path):
    from typer.testing import CliRunner

    from slurm_colo.cli import app

    # the socket named in the config does not exist: the agent check must fail
    conf, _ = _host(tmp_path, f'\n[agent]\nsocket = "{tmp_path}/none.sock"\n')
    r = CliRunner().invoke(
        app, ["doctor", "--config", str(conf), "--slurm-dir", str(tmp_path / "etc-slurm")]
    )
    assert r.exit_code == 1, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("[OK  ] config:")
    assert any(ln.startswith("[FAIL] agent:") and "none.sock" in ln for ln in lines)
    assert "[OK  ] gres.conf:" in r.output and "[OK  ] job_submit.lua:" in r.output
    assert lines[-1].startswith("15 checks: ")


def test_cli_doctor_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from slurm_colo.cli import app

    conf, _ = _host(tmp_path, f'\n[agent]\nsocket = "{tmp_path}/none.sock"\n')
    r = CliRunner().invoke(
        app, ["doctor", "--json", "--config", str(conf), "--slurm-dir", str(tmp_path / "etc-slurm")]
    )
    assert r.exit_code == 1
    checks = json.loads(r.output)
    assert {c["name"]: c["status"] for c in checks}["agent"] == "FAIL"
    assert set(checks[0]) == {"name", "status", "message", "fix"}


def test_doctor_says_where_a_gpu_nodes_records_go() -> None:
    from slurm_colo.config import AgentConfig, Config, NodeConfig
    from slurm_colo.contracts.enums import RecordsTo

    node = Config(agent=AgentConfig(address="tcp:head:6830"))
    c = doc.check_records(node)
    assert c.status == OK and "agent at tcp:head:6830" in c.message
    local = Config(
        agent=AgentConfig(address="tcp:head:6830"), node=NodeConfig(records_to=RecordsTo.STORE)
    )
    w = doc.check_records(local)
    assert w.status == WARN and "never reads" in w.message and "records_to" in (w.fix or "")
    assert doc.check_records(Config()).status == OK


def test_doctor_names_why_the_agent_refused_the_node() -> None:
    from slurm_colo.errors import CredentialForeign

    def refused() -> None:
        raise CredentialForeign("munge credential made with another key", hint="copy the key")

    c = doc.check_agent(refused, "tcp:head:6830")
    assert c.status == FAIL and "another key" in c.message and c.fix == "copy the key"


def test_each_gpu_models_own_score_set_is_checked(tmp_path):
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    live = tmp_path / "live.json"
    cfg = parse_config(
        f"""
[scores]
path = "{live}"
[[gpus]]
nodes = "k[1-2]"
count = 2
model = "k80"
memory_gib = 12.0
[[gpus]]
nodes = "v1"
count = 2
model = "v100"
memory_gib = 32.0
"""
    )
    from slurm_colo.scores import model_scores_path

    # neither model has a set of its own: both use the default, nothing to check
    assert doc.check_model_scores(load_scores, model_scores_path, cfg, now) == []
    k80 = model_scores_path(live, "k80")
    publish_scores(ScoreTable(id="k80-1", created=(now - timedelta(hours=60)).isoformat()), k80)
    (c,) = doc.check_model_scores(load_scores, model_scores_path, cfg, now)
    assert c.name == "scores (k80)" and c.status == WARN and "60.0 h old" in c.message
    model_scores_path(live, "v100").write_text("{not json")
    k, v = doc.check_model_scores(load_scores, model_scores_path, cfg, now)
    assert k.name == "scores (k80)" and v.name == "scores (v100)"
    assert v.status == FAIL and "corrupt" in v.message


# ---- the agent's rights in Slurm -------------------------------------------------------
OPERATOR = {"sacctmgr": Result(("sacctmgr",), 0, "Operator\n")}
NO_LEVEL = {"sacctmgr": Result(("sacctmgr",), 0, "None\n")}


def test_an_agent_running_as_root_or_slurmuser_may_change_jobs():
    c = doc.check_agent_rights({"user": "root"}, None, FakeRunner({}), cfg())
    assert c is not None and c.status == OK and "runs as root" in c.message
    assert "raise shared jobs' time limits (placement.time_limit)" in c.message
    conf = "ClusterName=x\nSlurmUser=slurm\n"
    c = doc.check_agent_rights({"user": "slurm"}, conf, FakeRunner({}), cfg())
    assert c is not None and c.status == OK
    assert doc.slurm_user(None) == "root" and doc.slurm_user(conf) == "slurm"


def test_another_user_needs_the_operator_level():
    runner = FakeRunner(OPERATOR)
    c = doc.check_agent_rights({"user": "slurm-colo"}, None, runner, cfg())
    assert c is not None and c.status == OK and "Operator level" in c.message
    assert runner.calls == [["sacctmgr", "-nP", "show", "user", "slurm-colo", "format=adminlevel"]]
    c = doc.check_agent_rights({"user": "slurm-colo"}, None, FakeRunner(NO_LEVEL), cfg())
    assert c is not None and c.status == WARN
    assert "sacctmgr says its level is None: Slurm will refuse it" in c.message
    assert "after the first refusal the agent holds no job and changes none" in c.message
    assert "sacctmgr -i add user slurm-colo account=root adminlevel=Operator" in c.fix
    # no accounting (sacctmgr absent or failing): it cannot tell, and says so
    c = doc.check_agent_rights({"user": "slurm-colo"}, None, FakeRunner({}), cfg())
    assert c is not None and c.status == WARN and "sacctmgr could not tell" in c.message


def test_nothing_to_check_without_an_agent_or_a_setting_that_changes_jobs():
    assert doc.check_agent_rights(None, None, FakeRunner({}), cfg()) is None
    assert doc.check_agent_rights({"pong": True}, None, FakeRunner({}), cfg()) is None  # older
    quiet = parse_config(
        CFG_TOML
        + '[placement]\nundo = "off"\nunplaced = "own-gpu"\nreplan = "off"\n'
        + 'time_limit = "keep"\n',
        "site.toml",
    )
    assert doc.check_agent_rights({"user": "nobody"}, None, FakeRunner({}), quiet) is None


def test_run_checks_names_the_agents_rights_when_it_says_its_user(tmp_path):
    from dataclasses import replace

    conf, system = _host(tmp_path)
    system = replace(system, ping=lambda cfg: {"ok": True, "user": "root"})
    checks = doc.run_checks(conf, system)
    names = [c.name for c in checks]
    assert names[names.index("agent") + 1] == "agent rights"
    assert all(c.status == OK for c in checks), [format_check(c) for c in checks]


CHRONY_SYNCED = """Reference ID    : C0A80001 (ntp.example.org)
Stratum         : 3
System time     : 0.000012 seconds fast of NTP time
Leap status     : Normal
"""
CHRONY_UNSYNCED = CHRONY_SYNCED.replace("Normal", "Not synchronised")
NO_SYSTEMD = Result(("timedatectl",), 1, "", "System has not been booted with systemd")


@pytest.mark.parametrize(
    ("answers", "status", "said"),
    [
        ({"timedatectl": Result(("timedatectl",), 0, "yes\n")}, OK, "(timedatectl)"),
        ({"timedatectl": Result(("timedatectl",), 0, "no\n")}, WARN, "NTPSynchronized=no"),
        (
            {"timedatectl": NO_SYSTEMD, "chronyc": Result(("chronyc",), 0, CHRONY_SYNCED)},
            OK,
            "leap status Normal",
        ),
        (
            {"timedatectl": NO_SYSTEMD, "chronyc": Result(("chronyc",), 0, CHRONY_UNSYNCED)},
            WARN,
            "leap status Not synchronised",
        ),
        (
            {"timedatectl": NO_SYSTEMD, "ntpstat": Result(("ntpstat",), 1, "unsynchronised")},
            WARN,
            "ntpstat",
        ),
        ({"ntpstat": Result(("ntpstat",), 0, "synchronised to NTP server")}, OK, "(ntpstat)"),
    ],
)
def test_the_clock_check_asks_the_time_service_the_host_runs(answers, status, said):
    from slurm_colo.admin.clock_check import check_clock

    c = check_clock(FakeRunner(answers))
    assert c is not None and (c.name, c.status) == ("clock", status) and said in c.message
    if status == WARN:
        assert "munge credentials" in c.message and "timedatectl set-ntp true" in c.fix


def test_the_clock_check_is_left_out_where_no_time_service_answers(tmp_path):
    from dataclasses import replace

    from slurm_colo.admin.clock_check import check_clock

    assert check_clock(FakeRunner({"timedatectl": NO_SYSTEMD})) is None
    assert check_clock(FakeRunner({"ntpstat": Result(("ntpstat",), 2, "")})) is None
    conf, system = _host(tmp_path)
    runner = FakeRunner({**SBATCH_OK, "timedatectl": Result(("timedatectl",), 0, "no\n")})
    checks = doc.run_checks(conf, replace(system, runner=runner))
    assert (checks[-1].name, checks[-1].status) == ("clock", WARN)
    assert exit_code(checks) == 0  # a warning: the host works, its measurements suffer
