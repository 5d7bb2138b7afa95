"""``systemctl reload slurm-colo-agent`` (SIGHUP): the agent reads its score sets again at
once, even a file written over in place with its size and modification time kept, which
its look at the files misses, and keeps serving."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator

import pytest

from . import labtools as lt


@pytest.fixture
def scores_back(clean: None) -> Iterator[None]:
    backup = lt.SCORES.with_suffix(".reload-bak")
    shutil.copy2(lt.SCORES, backup)
    back_id = json.loads(backup.read_text())["id"]
    yield
    shutil.move(backup, lt.SCORES)
    pid = lt.agent_pid()
    if pid:
        os.kill(pid, signal.SIGHUP)
        lt.wait_for(
            lambda: lt.agent_status()["scores"]["id"] == back_id,
            10,
            0.2,
            "the lab's score set back",
        )


def test_sighup_reloads_a_score_set_written_over_with_its_time_and_size_kept(
    scores_back: None,
) -> None:
    pid = lt.agent_pid()
    assert pid is not None
    before = lt.agent_status()["scores"]["id"]
    text = lt.SCORES.read_text()
    assert json.loads(text)["id"] == before
    new = before[::-1]  # the same length: the file keeps its size
    st = lt.SCORES.stat()
    lt.SCORES.write_text(text.replace(f'"id": "{before}"', f'"id": "{new}"', 1))
    assert lt.SCORES.stat().st_size == st.st_size, "the set is not written as the lab wrote it"
    os.utime(lt.SCORES, ns=(st.st_atime_ns, st.st_mtime_ns))
    # the agent looks at the file's time, inode and size on every refresh (2 s in the lab):
    # all unchanged, so it keeps the set it has
    time.sleep(5)
    assert lt.agent_status()["scores"]["id"] == before
    os.kill(pid, signal.SIGHUP)
    lt.wait_for(lambda: lt.agent_status()["scores"]["id"] == new, 10, 0.2, "set reloaded")
    assert lt.agent_pid() == pid  # the same agent, still serving
    r = lt.sbatch("--colocate", "--colocate-class=resnet18-bs32", "--gres=gpu:1", sleep=1)
    assert r.rc == 0 and r.job_id is not None
    assert "agent unavailable" not in lt.squeue()[r.job_id]["comment"]
