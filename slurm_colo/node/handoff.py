"""The Epilog's detached helper: ``python -m slurm_colo.node.handoff [--stop GPU]... [--ingest]``.

Started by :func:`.detached.start_handoff` (at nice 10, in its own session) once the
Epilog has spooled the job's record, so the Epilog waits for neither. In order:

1. ``--stop GPU`` (repeatable): stop the GPU's MPS daemon if no job uses it any more
   (:func:`.mps_daemon.stop_if_idle`, under the GPU lock: a Prolog that arrived meanwhile
   keeps the daemon; one arriving during the stop waits on the lock and finds the GPU
   clean).
2. ``--ingest``: ingest the spool and the fallback spool into the history store
   (:func:`.ingest.ingest_pending`; one ingest at a time per node, idempotent by record
   id, a locked database leaves the files for the next run).
3. Always: delete the job directories the Epilogs moved to ``<run_dir>/trash/``
   (:func:`.jobstate.empty_trash`), and those set aside in ``<run_dir>/damaged/`` over
   30 days ago (:func:`.jobstate.prune_damaged`).

One interpreter for both jobs (before: one per GPU plus one for the ingest). Logs to
syslog like the hooks. Exit status 1 when a stop left problems or the ingest reported
errors; nothing is lost either way (records stay spooled, ``slurm-colo node cleanup``
stops what is left).
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("slurm_colo.node.handoff")

USAGE = "usage: python -m slurm_colo.node.handoff [--stop GPU_INDEX]... [--ingest]"


def parse_args(argv: list[str]) -> tuple[list[int], bool] | None:
    """(GPUs to stop, ingest?) or None for a usage error."""
    gpus: list[int] = []
    ingest = False
    it = iter(argv)
    for a in it:
        if a == "--ingest":
            ingest = True
        elif a == "--stop":
            g = next(it, "")
            if not g.isdigit():
                return None
            gpus.append(int(g))
        else:
            return None
    return gpus, ingest


def main(argv: list[str]) -> int:
    parsed = parse_args(argv)
    if parsed is None or parsed == ([], False):
        print(USAGE, file=sys.stderr)
        return 2
    gpus, ingest = parsed
    from slurm_colo.logsetup import setup_logging

    from ..config import load_config

    setup_logging("epilog-helper")  # detached: syslog is where an admin looks
    try:
        cfg = load_config()
    except Exception as e:
        log.error("%s", e)
        return 1
    rc = 0
    if gpus:
        from slurm_colo.node.gpu.mps_daemon import stop_if_idle

        for g in gpus:
            try:
                if stop_if_idle(cfg, g):
                    rc = 1  # stop() logged the problems
            except TimeoutError:
                log.warning(
                    "GPU %d: lock busy; MPS stop left to the next hook or 'slurm-colo "
                    "node cleanup'",
                    g,
                )
                rc = 1
            except Exception:  # one GPU's trouble must not keep the others or the ingest
                log.exception("GPU %d: MPS stop failed", g)
                rc = 1
    if ingest:
        from slurm_colo.spool.drain import ingest_logged

        if ingest_logged(cfg).errors:
            rc = 1
    from .jobstate import DAMAGED_KEEP_S, empty_trash, prune_damaged
    from .layout import NodeLayout

    lay = NodeLayout.of(cfg.node.run_dir, cfg.node.spool_dir)
    empty_trash(lay)
    gone = prune_damaged(lay)
    if gone:
        log.info(
            "deleted the files of job(s) %s from %s (damaged state, set aside over %d days ago)",
            ",".join(map(str, gone)),
            lay.damaged_dir(),
            DAMAGED_KEEP_S // 86400,
        )
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
