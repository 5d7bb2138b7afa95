"""Every generated figure of docs/simulator.md, written afresh by one command: the per-seed
tables, the held-out seeds' summary, the jitter table, the drain-setting and oracle-error
tables, and, given a Gavel file with a P100 part, the P100 summary::

    .venv/bin/python benchmarks/simulator_doc.py                     # ~70 min (2 cores)
    .venv/bin/python benchmarks/simulator_doc.py --gavel simulation_throughputs.json
    .venv/bin/python benchmarks/simulator_doc.py --print             # the commands, run nothing

It checks first that the page has every block's markers, then runs each writer
(``simulator_tables.py``, ``makespan_jitter.py``, ``seed_sensitivity.py``; same directory)
in turn and stops at the first that fails. Without ``--gavel`` the P100 block is left as it
is (the P100 part of Gavel's file is not bundled).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from simulator_tables import markers, run_args

HERE = Path(__file__).resolve().parent


def writers(gavel: str, workers: int, doc: Path) -> list[tuple[tuple[str, ...], list[str]]]:
    """(the blocks it writes, the command) for each writer, in the order they run."""
    common = ["--workers", str(workers), "--doc", str(doc)]
    tables, jitter = str(HERE / "simulator_tables.py"), str(HERE / "makespan_jitter.py")
    sens = str(HERE / "seed_sensitivity.py")
    out = [
        (("tables",), [tables, *common]),
        (("held-out",), [tables, "--held-out", *common]),
        (("jitter",), [jitter, "--write", *common]),
        (("drain-setting", "oracle-error"), [sens, "--write", *common]),
    ]
    if gavel:
        p100 = ["--gavel", gavel, "--campaigns", "p100", "--summary-into", "p100"]
        out.append((("p100",), [tables, *p100, *common]))
    return out


def missing_markers(doc: Path, blocks: list[str]) -> list[str]:
    page = doc.read_text(encoding="utf-8")
    return [m for b in blocks for m in markers(b) if m not in page]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gavel", default="", metavar="FILE", help="a Gavel file with a p100 part")
    run_args(ap, size=False)
    ap.add_argument("--print", action="store_true", help="print the commands, run nothing")
    a = ap.parse_args()
    if a.gavel and not Path(a.gavel).is_file():
        sys.exit(f"{a.gavel}: no such file (a Gavel-format throughputs file with a p100 part)")
    plan = writers(a.gavel, a.workers, a.doc)
    gone = missing_markers(a.doc, [b for blocks, _ in plan for b in blocks])
    if gone:
        sys.exit(f"{a.doc}: no {', '.join(gone)}; nothing was run")
    for blocks, args in plan:
        block = blocks[0]  # named by its first block (seed_sensitivity writes two)
        cmd = [sys.executable, *args]
        print(f"[{block}] {' '.join(cmd)}", file=sys.stderr, flush=True)
        if a.print:
            continue
        t0 = time.perf_counter()
        done = subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
        if done.returncode != 0:
            sys.exit(f"[{block}] failed (exit {done.returncode}); the blocks before it are written")
        print(f"[{block}] written ({(time.perf_counter() - t0) / 60:.0f} min)", file=sys.stderr)


if __name__ == "__main__":
    main()
