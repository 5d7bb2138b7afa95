"""Spine commands: version, agent, explain, status."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import typer

from slurm_colo.contracts.hook_notes import FALLBACK_NOTE, HOOK_NOTES
from slurm_colo.contracts.placement import Placement, held_for_text

from .. import __version__
from ..config import load_config
from ..errors import AgentError, SlurmError
from .options import ConfigOpt


def _hook_note(comment: str) -> str:
    """Why the agent has no placement for a job: the note in its comment that the Lua hook
    writes on its own (it never asked the agent, or the agent did not answer in time) or
    for input the agent refused; "" if there is none."""
    at = [i for i in (comment.find(n) for n in HOOK_NOTES) if i >= 0]
    if not at:
        return ""
    note = comment[min(at) :].split(" | ")[0]
    text = f'not placed by the agent; its comment says "{note}"'
    if note.startswith(FALLBACK_NOTE):
        text += (
            " (the agent was down or did not answer within agent.request_timeout_ms:"
            " slurmctld's log gives the reason)"
        )
    return text


def _fmt_explain(ex: dict[str, Any]) -> str:
    job = ex.get("job_id")
    if not ex.get("known"):
        return f"job {job}: " + (
            _hook_note(str(ex.get("slurm_comment") or "")) or str(ex.get("reason"))
        )
    lines = [
        f"job {job} ({ex.get('name') or '?'}, user {ex.get('user')}, class {ex.get('cls')}, mode {ex.get('mode')})"
    ]
    if ex.get("class_unknown"):
        from ..contracts.options import unknown_class_hint

        lines.append(
            f"  class {ex.get('cls')}: no score set in use knows it, so it was placed on what the "
            f"set assumes of any job ({unknown_class_hint(str(ex.get('cls')))})"
        )
    if ex.get("action") == "share":
        partners = ex.get("partners") or []
        where = f"GPU {ex.get('gpu')} of node {ex.get('node')}"
        lines.append(
            f"  placed on {where} "
            + (
                f"with job(s) {', '.join(map(str, partners))}"
                if partners
                else "(opened it for sharing; no partner then)"
            )
        )
        if ex.get("predicted_delta") is not None:
            lines.append(
                f"  predicted speedup delta {ex['predicted_delta']:.2f}"
                + (f" ± {ex['predicted_sd']:.2f}" if ex.get("predicted_sd") else "")
            )
        if ex.get("mechanism") == "mps":
            lines.append(
                f"  MPS limits: {ex.get('thread_pct')}% of SMs, {ex.get('mem_limit_gib')} GiB pinned memory"
            )
        elif ex.get("mechanism"):
            lines.append(f"  sharing: {ex.get('mechanism')} (time-sliced, no MPS)")
        if ex.get("now_with") is not None:
            lines.append(f"  sharing now with: {', '.join(map(str, ex['now_with'])) or 'nobody'}")
        if ex.get("time_limit_added_min"):
            lines.append(
                f"  time limit raised by {ex['time_limit_added_min']} min so far, "
                "for the time sharing cost it"
            )
    else:  # the policy's reasons for a GPU of its own already start with "own GPU:"
        reason = str(ex.get("reason") or "")
        lines.append("  " + (reason if reason.startswith("own GPU") else f"not shared: {reason}"))
    if ex.get("scores"):
        model = ex.get("scores_model")  # None: the site has one score set
        whose = (
            ""
            if model is None
            else f" (GPU model {model}'s own set)"
            if model
            else " (the site default: this GPU's model has no set of its own)"
        )
        lines.append(f"  score set: {ex['scores']}{whose}")
    return "\n".join(lines)


def _explain_from_slurm(job_id: int, backend_kind: str, agent: AgentError) -> dict[str, Any]:
    """What the job's Slurm record says, for when the agent cannot be asked; neither can
    be asked: a :class:`SlurmError` naming both."""
    from ..slurm import open_backend

    try:
        j = open_backend(backend_kind).job(job_id)
    except SlurmError as e:
        raise SlurmError(
            f"job {job_id}: the agent is unreachable ({agent.message}) and {e.message}",
            hint=e.hint or "is slurmctld up and reachable? (scontrol ping)",
        ) from None
    if j is None:
        return {
            "job_id": job_id,
            "known": False,
            "reason": "job not found in Slurm and agent unreachable",
        }
    tag = Placement.from_tag(j.admin_comment) or Placement.from_tag(j.comment)
    if not tag:
        return {
            "job_id": job_id,
            "known": False,
            "reason": f"not a --colocate job (comment: {j.comment or '-'})",
        }
    ex: dict[str, Any] = {
        "job_id": job_id,
        "known": True,
        "name": j.name,
        "user": j.user,
        "cls": tag.cls,
        "mode": tag.mode,
        "gpu": tag.gpu,
        "node": tag.node,
        "mechanism": tag.mechanism,
        "thread_pct": tag.thread_pct,
        "mem_limit_gib": tag.mem_limit_gib,
        "predicted_delta": tag.predicted_delta,
        "partners": [],
        "action": "share" if tag.shared else "exclusive",
        "reason": j.comment,
    }
    return ex


def register(app: typer.Typer) -> None:
    @app.command()
    def version() -> None:
        """Print the slurm-colo version."""
        typer.echo(__version__)

    @app.command()
    def agent(config: Path | None = ConfigOpt) -> None:
        """Run the placement agent (a long-running daemon; systemd unit in contrib/).

        SIGHUP (systemctl reload) reads the score sets again at once, whatever their files' times; SIGTERM stops it. A change to the config file needs a restart."""
        from ..agent.server import Agent

        cfg = load_config(config)
        logging.basicConfig(
            level=cfg.agent.log_level.upper(),
            format="%(asctime)s %(name)s %(levelname)s %(message)s",
        )
        logging.getLogger("slurm_colo").info("config: %s", cfg.source)
        Agent(cfg).serve()

    @app.command()
    def explain(
        job_id: int = typer.Argument(..., min=1, help="Slurm job id"),
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
        config: Path | None = ConfigOpt,
    ) -> None:
        """Say where a --colocate job was placed and why (or why it got a GPU of its own)."""
        from slurm_colo.contracts import client

        cfg = load_config(config)
        try:
            ex = client.explain(cfg, job_id)
        except AgentError as e:
            ex = _explain_from_slurm(job_id, cfg.agent.slurm_backend, e)
            ex["note"] = f"agent unreachable ({e.message}); read from the job's Slurm record"
        if json_out:
            typer.echo(json.dumps(ex, indent=1, default=str))
            return
        typer.echo(_fmt_explain(ex))
        if ex.get("note"):
            typer.echo(f"  ({ex['note']})")

    @app.command()
    def held(
        release: bool = typer.Option(
            False,
            "--release",
            help="Release them all now, without the agent (see the admin guide).",
        ),
        config: Path | None = ConfigOpt,
    ) -> None:
        """Jobs held for the agent to release, read from Slurm; --release lets them go.

        A job is held when it was requeued after a harmful probe, or held at submission; --release lets it go without the agent."""
        from ..agent.held import held_in_slurm
        from ..slurm import open_backend
        from ..slurm.control import ScontrolControl

        cfg = load_config(config)
        jobs = held_in_slurm(open_backend(cfg.agent.slurm_backend).jobs())
        if not jobs:
            typer.echo("no job is held for the agent")
            return
        control = ScontrolControl()
        failed = 0
        for h in jobs:
            j = h.job
            typer.echo(
                f"job {j.job_id} ({j.user}, {j.name}) waits for {h.waits_for()}: {j.comment}"
            )
            if release:
                gres = h.release_gres()
                try:
                    control.aim_and_release(
                        j.scontrol_id, "", h.unheld_tag(), j.comment, gres, start_now=h.undone
                    )
                except SlurmError as e:  # one refusal must not keep the others held
                    failed += 1
                    typer.echo(f"  not released: {e}", err=True)
                    continue
                if gres:
                    said = f" with {gres.removeprefix('gres:')}: Slurm starts it where that fits"
                elif h.has_gpu_request():
                    said = f" with the GPU request it has ({j.tres_per_node})"
                else:
                    said = f": Slurm starts it on any {h.gres_type} GPU with a free shard"
                typer.echo(f"  released{said}")
        if failed:
            raise typer.Exit(1)

    @app.command()
    def status(
        json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
        config: Path | None = ConfigOpt,
    ) -> None:
        """Every shared GPU with its occupants, limits, time together and predicted delta."""
        from slurm_colo.contracts import client

        cfg = load_config(config)
        st = client.status(cfg)
        if json_out:
            typer.echo(json.dumps(st, indent=1, default=str))
            return
        now = time.time()
        sc = st.get("scores", {})
        typer.echo(
            f"score set: {sc.get('id')} (created {sc.get('created') or '?'})"
            + (f"  ERROR: {sc['error']}" if sc.get("error") else "")
        )
        for model, m in sorted((sc.get("models") or {}).items()):
            typer.echo(
                f"score set of GPU model {model}: {m.get('id') or '(none: the site default)'}"
                + (f" (created {m.get('created') or '?'})" if m.get("id") else "")
                + (f"  ERROR: {m['error']}" if m.get("error") else "")
            )
        typer.echo(f"pending placements: {st.get('pending_placements', 0)}")
        q = st.get("queue") or {}
        if q.get("per_gpu") is not None:
            typer.echo(
                f"waiting for a GPU: {q.get('waiting', 0)} job(s), "
                f"{q['per_gpu']:.2f} per shared GPU"
                + (
                    f", gone in about {q['drain_h']:.1f} h at the rate it shrinks"
                    if q.get("drain_h") is not None
                    else ""
                )
                + "; sets where a member loses (the throughput path): "
                + ("open" if q.get("throughput_path") else "closed")
            )
        refused = (st.get("slurm_changes") or {}).get("refused")
        if refused:
            typer.echo(
                f"changes to jobs in Slurm: NOT made, Slurm refuses the agent the right "
                f"({refused}): no undo, no new hold, no release, no time limit raised; "
                "one change is tried again every 10 min (slurm-colo doctor, admin guide)"
            )
        for node, why in sorted((st.get("nodes_refused") or {}).items()):
            typer.echo(f"node {node}: NO placement there: {why}")
        pr = st.get("probes") or {}
        if pr:
            typer.echo("probes: " + ", ".join(f"{v} {k}" for k, v in sorted(pr.items())))
        if st.get("learned_pairs"):
            typer.echo(
                f"measured by probes, laid over the score set: {st['learned_pairs']} pair(s)"
            )
        for h in st.get("held") or []:
            head = f"held: job {h['job_id']} ({h['cls']})"
            if h.get("waits_to_start"):  # its wait for a GPU has not begun
                typer.echo(f"{head}, may not start yet (waits for {h['waits_to_start']})")
                continue
            typer.echo(
                f"{head} for {int(h['waiting_s'])}s, waits for "
                f"{h.get('waits_for') or held_for_text(h['gres_type'])} that fits: {h['reason']}"
            )
        r = st.get("reservation")
        if r:
            typer.echo(
                f"draining GPU(s) {','.join(map(str, r['gpus']))} of {r['node']} for job {r['job_id']}, "
                f"waiting {r['waiting_s'] / 3600:.1f} h for {r.get('waits_for', 'whole GPUs')}: "
                "no new partners there"
            )
        for g in st.get("gpus", []):
            occ = g.get("occupants", [])
            head = f"{g['node']}:{g['index']} [{g['gres_type']}]"
            if g.get("exclusive_job"):
                typer.echo(f"{head}  exclusive job {g['exclusive_job']}")
                continue
            delta = f"  delta {g['predicted_delta']:.2f}" if g.get("predicted_delta") else ""
            if g.get("observed_slowdown"):
                delta += f"  measured slowdown {g['observed_slowdown']:.2f}"
            typer.echo(
                f"{head}  {len(occ)}/{g['slots']} slot(s){delta}"
                + ("" if g.get("available", True) else "  (node unavailable)")
                + (f"  (kept free for job {g['closed_for']})" if g.get("closed_for") else "")
                + "".join(
                    f"  (no new partner while job {o['job_id'] or o['key']} runs: "
                    "requeued once already)"
                    for o in occ
                    if o.get("no_partners")
                )
            )
            for o in occ:
                state = (
                    "pending"
                    if o["pending"]
                    else f"running {int(now - o['since'])}s"
                    if o.get("since")
                    else "running"
                )
                added = o.get("time_limit_added_min")
                typer.echo(
                    f"    job {o['job_id'] or o['key']:>8}  {o['user']:<10} {o['cls']:<24} "
                    f"{o['thread_pct']:>3}% {o['mem_limit_gib'] or '-':>6} GiB  {state}"
                    + (f", time limit +{added} min" if added else "")
                )
