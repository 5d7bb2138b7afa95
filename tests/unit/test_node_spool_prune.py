"""Ingested record files in the spool's done/ are deleted after node.spool_keep_days."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from slurm_colo.spool.directory import prune_done
from slurm_colo.spool.drain import ingest_pending
from slurm_colo.store import make_engine, upgrade

sys.path.insert(0, str(Path(__file__).parent))
from test_node_lifecycle import node_config


def _done_file(spool: Path, name: str, age_days: float) -> Path:
    (spool / "done").mkdir(parents=True, exist_ok=True)
    f = spool / "done" / name
    f.write_text("{}")
    t = time.time() - age_days * 86400.0
    os.utime(f, (t, t))
    return f


def test_prune_deletes_only_old_ingested_files(tmp_path: Path) -> None:
    old = _done_file(tmp_path, "old.json", 20)
    new = _done_file(tmp_path, "new.json", 1)
    other = _done_file(tmp_path, "notes.txt", 30)  # not a record file: left alone
    waiting = tmp_path / "waiting.json"  # not yet ingested: never touched
    waiting.write_text("{}")
    os.utime(waiting, (0, 0))
    assert prune_done(tmp_path, 14.0) == 1
    assert not old.exists() and new.exists() and other.exists() and waiting.exists()
    assert prune_done(tmp_path, 0.0) == 0 and new.exists()  # 0 keeps everything
    assert prune_done(tmp_path / "missing", 14.0) == 0


def test_node_ingest_prunes_with_the_configured_age(tmp_path: Path) -> None:
    cfg = node_config(tmp_path)
    assert cfg.node.spool_keep_days == 14.0
    upgrade(make_engine(cfg.store.url))
    spool = Path(cfg.node.spool_dir)
    old = _done_file(spool, "old.json", 15)
    recent = _done_file(spool, "recent.json", 13)
    rep = ingest_pending(cfg)
    assert not rep.errors and rep.pruned == 1 and "1 old ingested file(s) deleted" in rep.summary()
    assert not old.exists() and recent.exists()
