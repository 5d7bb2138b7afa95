"""The real MPS gate (slurm_colo.node.gpu.mps.MpsControl) driving the emulator executable as
if it were nvidia-cuda-mps-control: protocol, per-UID servers, faults."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_colo.errors import MPSError
from slurm_colo.node import procs
from slurm_colo.node.gpu.mps import (
    MpsControl,
    MpsHung,
    MpsNotRunning,
    MpsReplyMismatch,
    emulator_argv,
    parse_fault_lines,
)

REPO = Path(__file__).resolve().parents[2]


def _ctl(
    tmp_path: Path, timeout_s: float = 5.0, fault: str = "", argv: list[str] | None = None
) -> MpsControl:
    extra = (("SLURM_COLO_MPS_EMU_FAULT", fault),) if fault else ()
    return MpsControl(
        tuple(argv or emulator_argv()),
        tmp_path / "pipe",
        tmp_path / "log",
        "GPU-test-0",
        timeout_s,
        extra,
    )


@pytest.fixture
def clients() -> Iterator[list[subprocess.Popen]]:
    ps: list[subprocess.Popen] = []
    yield ps
    for p in ps:
        p.kill()
        p.wait()


def _client(ps: list[subprocess.Popen]) -> int:
    p = subprocess.Popen(["sleep", "60"])
    ps.append(p)
    return p.pid


def _stop(ctl: MpsControl) -> None:
    left = procs.mps_processes(str(ctl.pipe_dir))
    procs.kill_all(left)


def test_daemon_start_servers_and_clean_quit(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    pid = ctl.daemon_pid()
    assert procs.alive(pid)
    assert ctl.server_list() == []
    ctl.start_server(1000)
    servers = ctl.server_list()
    assert len(servers) == 1
    assert ctl.server_status(servers[0]) == "ACTIVE"
    assert set(procs.mps_processes(str(ctl.pipe_dir))) == {pid, servers[0]}
    with pytest.raises(MPSError, match="did not start"):
        ctl.start()  # one daemon per pipe directory
    ctl.quit()
    deadline = time.monotonic() + 3
    while procs.mps_processes(str(ctl.pipe_dir)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert procs.mps_processes(str(ctl.pipe_dir)) == []
    with pytest.raises(MpsNotRunning):
        ctl.server_list()
    assert "Starting control daemon" in ctl.log_text()


def test_limits_commands_and_unknown_command(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    try:
        ctl.set_default_thread_pct(50)
        assert ctl.command("get_default_active_thread_percentage") == "50.0"
        ctl.command("set_default_device_pinned_mem_limit 0 2G")
        assert ctl.command("get_default_device_pinned_mem_limit 0") == "2G"
        with pytest.raises(MPSError, match="Unknown command"):
            ctl.command("no_such_command")
    finally:
        ctl.quit()


def test_one_server_per_uid_second_user_queues(tmp_path: Path, clients: list) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    try:
        a = _client(clients)
        b = _client(clients)
        assert ctl.command(f"emu_client_connect 1000 {a}").startswith("OK")
        assert ctl.command(f"emu_client_connect 1001 {b}") == "QUEUED"
        servers = ctl.server_list()
        assert len(servers) == 1 and ctl.client_list(servers[0]) == [a]
        assert ctl.device_clients() == {0: [a]}
        ctl.command(f"emu_client_exit {a}")  # user 1000's last client leaves
        new = ctl.server_list()
        assert len(new) == 1 and new != servers and ctl.client_list(new[0]) == [b]
        assert not procs.alive(servers[0])
    finally:
        ctl.quit()


def test_hung_daemon_times_out(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path, timeout_s=0.5, fault="hang")
    ctl.start()
    t = time.monotonic()
    with pytest.raises(MpsHung, match="timed out"):
        ctl.server_list()
    assert time.monotonic() - t < 3.0
    _stop(ctl)
    assert procs.mps_processes(str(ctl.pipe_dir)) == []


def test_crashed_daemon_leaves_orphan_server_found_by_scan(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    ctl.start_server(1000)
    server = ctl.server_list()[0]
    with pytest.raises(MPSError):
        ctl.command("emu_fault crash")  # the daemon dies while answering
    time.sleep(0.1)
    with pytest.raises(MpsNotRunning):
        ctl.server_list()
    assert procs.mps_processes(str(ctl.pipe_dir)) == [server]  # the zombie server
    assert procs.kill_all([server]) == []


def test_fatal_client_fault_kills_all_clients_and_is_logged(tmp_path: Path, clients: list) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    try:
        a, b = _client(clients), _client(clients)
        ctl.command(f"emu_client_connect 1000 {a}")
        ctl.command(f"emu_client_connect 1000 {b}")
        server = ctl.server_list()[0]
        offset, server_offset = ctl.log_size(), ctl.log_size("server.log")
        ctl.command("emu_fault client_fatal")
        for p in clients:
            assert p.wait(timeout=3) == -9  # every co-located client dies together
        deadline = time.monotonic() + 3
        while ctl.server_status(server) != "ACTIVE" and time.monotonic() < deadline:
            time.sleep(0.05)
        # as captured on a real GPU (tests/fixtures/mps/server.log): the fault is in
        # server.log only, and the server outlives it and serves the next client
        assert ctl.server_list() == [server] and ctl.server_status(server) == "ACTIVE"
        assert parse_fault_lines(ctl.log_text(offset)) == []
        faults = parse_fault_lines(ctl.log_text(server_offset, "server.log"))
        assert len(faults) == 1 and faults[0].endswith(
            f"Client {{PID: {min(a, b)}, Context: 1}} encountered a fatal GPU error."
        )
        c = _client(clients)
        assert ctl.command(f"emu_client_connect 1000 {c}") == f"OK {server}"
    finally:
        ctl.quit()


def test_console_script_and_lab_wrapper_speak_the_same_protocol(tmp_path: Path) -> None:
    wrapper = REPO / "contrib" / "lab" / "bin" / "nvidia-cuda-mps-control"
    ctl = _ctl(tmp_path, argv=[str(wrapper)])
    ctl.start()
    try:
        ctl.start_server(4242)
        assert len(ctl.server_list()) == 1
    finally:
        ctl.quit()


def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path, argv=[str(tmp_path / "nvidia-cuda-mps-control")])
    with pytest.raises(MPSError, match="cannot run MPS control program"):
        ctl.server_list()


def test_run_wrapper_makes_a_command_an_mps_client(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path)
    ctl.start()
    try:
        p = subprocess.Popen([*emulator_argv(), "run", "--", "sleep", "30"], env=ctl.env())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not ctl.server_list():
            time.sleep(0.05)
        server = ctl.server_list()[0]
        assert ctl.client_list(server) == [p.pid]  # same PID after exec
        p.kill()
        p.wait()
        deadline = time.monotonic() + 3
        while ctl.client_list(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ctl.client_list(server) == []  # a dead client is dropped
    finally:
        ctl.quit()


def test_run_wrapper_without_daemon_just_runs(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path)
    cp = subprocess.run(
        [*emulator_argv(), "run", "--", "echo", "hi"],
        env=ctl.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert cp.returncode == 0 and cp.stdout == "hi\n"


def test_console_script_is_declared() -> None:
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["slurm-colo-mps-emulator"] == "slurm_colo.emulators.mps_control:main"
    from slurm_colo.emulators.mps_control import main

    assert main(["--help"]) == 0


def test_batched_session_one_start_replies_in_order(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    ctl = _ctl(tmp_path)
    ctl = MpsControl(
        ctl.argv,
        ctl.pipe_dir,
        ctl.log_dir,
        ctl.device,
        ctl.timeout_s,
        (("SLURM_COLO_MPS_EMU_TRACE", str(trace)),),
    )
    ctl.start()
    try:
        ctl.start_server(1000)
        (server,) = ctl.server_list()
        before = len(trace.read_text().splitlines())
        assert ctl.commands(
            [
                f"get_server_status {server}",
                "get_default_active_thread_percentage",
                "get_server_status 1",
            ]
        ) == ["ACTIVE", "100.0", "Server 1 not found"]
        assert ctl.server_statuses([server, 1]) == {server: "ACTIVE", 1: "UNKNOWN"}
        calls = trace.read_text().splitlines()[before:]
        assert [c.split()[1:] for c in calls] == [["cmd", "3"], ["cmd", "2"]]  # one run each
        with pytest.raises(MpsReplyMismatch):  # no server: an empty reply, nothing to pair
            ctl.commands(["get_client_list 1", "get_default_active_thread_percentage"])
    finally:
        ctl.quit()


def test_command_path_imports_only_what_a_small_binary_would_need(tmp_path: Path) -> None:
    """The emulator stands in for NVIDIA's C program, started once per control call: its
    command path must not import json, socket, signal or the daemon module."""
    import sys

    cp = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-X",
            "importtime",
            str(REPO / "slurm_colo" / "emulators" / "mps_control.py"),
        ],
        input="get_server_list\n",
        capture_output=True,
        text=True,
        env={"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path)},
        check=False,
    )
    assert cp.returncode == 1 and cp.stderr.endswith("Cannot find MPS control daemon process\n")
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in cp.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert not imported & {"json", "socket", "signal", "typing", "mps_server"}


def test_front_and_daemon_module_agree_on_names() -> None:
    from slurm_colo.emulators import mps_control, mps_server

    assert mps_control.PID_FILE == mps_server.PID_FILE
    assert mps_control.SOCKET == mps_server.SOCKET


def test_emulator_prints_what_the_real_program_printed(tmp_path: Path) -> None:
    """Reply texts, streams and exit statuses as captured from NVIDIA's program on a real GPU
    (tests/fixtures/mps)."""
    fix = REPO / "tests" / "fixtures" / "mps"
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
        "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log"),
    }

    def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        cp = subprocess.run(
            [*emulator_argv(), *args], input=stdin, capture_output=True, text=True, env=env
        )
        return cp.returncode, cp.stdout, cp.stderr

    assert run(stdin="get_server_list\n") == (1, "", (fix / "not_running.txt").read_text())
    assert run("-d")[0] == 0
    try:
        assert run("-d") == (1, (fix / "daemon_already_running.txt").read_text(), "")
        for name, stdin in (
            ("get_server_list_empty", "get_server_list"),
            ("get_default_active_thread_percentage", "get_default_active_thread_percentage"),
            ("get_server_status_unknown", "get_server_status 1"),
            ("unknown_command", "no_such_command"),
        ):
            assert run(stdin=stdin + "\n") == (0, (fix / f"{name}.txt").read_text(), ""), name
    finally:
        run(stdin="quit\n")
