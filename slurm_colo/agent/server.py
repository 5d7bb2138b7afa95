"""The agent daemon: requests, Slurm refresher, score reloader.

It listens (:mod:`.listeners`) on its unix socket (the Lua hook in slurmctld, the local
CLI; the caller's uid comes from SO_PEERCRED) and on every ``tcp:`` address of
``agent.listen`` (node hooks on other hosts; each line is a munge envelope, the caller's
uid is the one munged vouches for, and the reply is signed:
:mod:`slurm_colo.contracts.transport`).

Threads: one per connection (requests are tiny), one refresher polling Slurm every
``agent.refresh_interval_s`` and re-reading the score file when it changes, and optionally
an HTTP thread serving Prometheus metrics. All state lives in :class:`.state.AgentState`
(the scores, the view, the ledger, the held jobs) behind one lock; answering a placement
touches only memory. This module only does the I/O: sockets, threads, timers, the Slurm
commands the state asks for, and the metrics page.
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
import socketserver
import sys
import threading
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from slurm_colo.contracts.client import JOBSTART_TIMEOUT_S
from slurm_colo.contracts.placement import whole_in_limits
from slurm_colo.contracts.probe import ProbeReport
from slurm_colo.contracts.protocol import format_error, format_reply, parse_request

from ..clock import WallClock, boot_id
from ..config import Config
from ..contracts.enums import TimeLimit
from ..errors import ColoError, ProtocolError, SlurmError
from ..slurm import SlurmBackend, open_backend
from ..slurm.control import JobControl, ScontrolControl
from ..slurm.snapshot import ChildSnapshots
from ..slurm.version import can_change_pending_gres
from . import learned, listeners, score_files, time_owed
from .actions import Action
from .records import RecordSink
from .state import AgentState

log = logging.getLogger("slurm_colo.agent")
#: a JOBSTART answered slower than this is logged with where its time went: the Prolog
#: waits JOBSTART_TIMEOUT_S, then runs the job without its placement's setup
JOBSTART_SLOW_S = JOBSTART_TIMEOUT_S / 4
PRIVILEGED_VERBS = ("PLACE", "JOBSTART", "JOBEND", "PROBE", "RECORDS", "RELOAD")
SWITCH_INTERVAL_S = 0.0005
#: how long after a job's end or start (the hooks' reports) the view is built again, off
#: the request path: the reports that come meanwhile (a job array's) are built with it
VIEW_DELAY_S = 0.05


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def trusted_uids() -> set[int]:
    """root, the agent's own user and SlurmUser ("slurm") may place and report jobs."""
    uids = {0, os.getuid()}
    try:
        uids.add(pwd.getpwnam("slurm").pw_uid)
    except KeyError:
        pass
    return uids


def _job_id(p: dict[str, Any]) -> int:
    """The request's Slurm job id (Slurm's are 32-bit, 0 is none)."""
    if "job" not in p:
        raise ProtocolError("'job' is missing")
    return whole_in_limits(p["job"], "job")


def _gpu_indexes(p: dict[str, Any]) -> list[int]:
    """JOBSTART's ``gpus``: the job's GPU indexes on the node (none when absent)."""
    gpus = p.get("gpus")
    if gpus is None:
        return []
    if not isinstance(gpus, list):
        raise ProtocolError(f"gpus: must be a list of GPU indexes, not {type(gpus).__name__}")
    return [whole_in_limits(g, "gpu", "gpus") for g in gpus]


def _nothing_after(delivered: bool = True) -> None:
    """The ``after`` of a request with no bookkeeping to run."""


class Agent:
    def __init__(
        self,
        cfg: Config,
        backend: SlurmBackend | None = None,
        control: JobControl | None = None,
        learned_file: Path | None = None,
        owed_file: Path | None = None,
        clock: WallClock | None = None,
    ) -> None:
        self.cfg = cfg
        self.backend = backend or open_backend(cfg.agent.slurm_backend)
        self.control = control or ScontrolControl()
        #: Slurm changes (undo, re-aim) run one at a time, outside the state lock
        self._control_lock = threading.Lock()
        # the periodic refresh reads Slurm in a child process (see slurm/snapshot.py), so
        # parsing a large squeue output never holds up placement requests; a backend
        # handed in (tests, embedding) is read in-process
        self.snapshots = ChildSnapshots(self.backend.name) if backend is None else None
        self.state = AgentState(cfg)
        # Slurm 23.11+ changes a pending job's GRES: an undone job may change shard type
        self.state.holds.retype_after_undo = can_change_pending_gres(
            getattr(self.control, "version", None)
        )
        #: probe measurements survive a restart (agent/learned.py)
        self.learned_file = learned_file or learned.learned_path(cfg)
        self.state.restore_learned(learned.load(self.learned_file))
        self._save_lock = threading.Lock()
        self._saved_changes = 0
        #: the time-limit accounts survive a restart too (agent/time_owed.py), kept beside
        #: the probe measurements
        self.owed_file = owed_file or self.learned_file.with_name(time_owed.FILE_NAME)
        saved = time_owed.load(self.owed_file)
        if saved is not None:
            self.state.credit.restore(saved)
            log.info(
                "time limits: %d shared job account(s) read back from %s",
                len(saved.jobs) + len(saved.left),
                self.owed_file,
            )
        #: when the time-limit accounts were last saved (they are, ``time_owed.SAVE_S`` on)
        self.owed_saved_at = 0.0
        self.lock = threading.Lock()
        #: the wall clock, with its steps found (read under ``lock``: :meth:`now`); on the
        #: boot the accounts were saved in, from the offset saved with them, so a step
        #: made while the agent was down is found at its first reading too
        self.clock = clock or WallClock()
        self.boot = boot_id()
        if saved is not None and saved.clock is not None and saved.clock[0] == self.boot:
            self.clock.resume(saved.clock[1])
        self.stop = threading.Event()
        #: set when a hook's report left the view behind (:meth:`_view_builder`)
        self.view_due = threading.Event()
        self.trusted = trusted_uids()
        #: whose rights the agent changes jobs with (PING says it; slurm-colo doctor checks)
        self.user = self.state.user = _user_name(os.geteuid())
        self.req_count = 0
        self.req_seconds = 0.0
        #: how long PLACE requests waited for the agent's lock (held by a look at Slurm,
        #: a probe, another request): sum, count and the longest, seconds
        self.place_wait: dict[str, float] = {"sum": 0.0, "count": 0, "max": 0.0}
        #: time spent answering PLACE requests, the wait for the lock included, seconds
        self.place_seconds = 0.0
        self.score_files = score_files.ScoreFiles(cfg)
        self._server: socketserver.UnixStreamServer | None = None
        self._tcp: list[socketserver.TCPServer] = []
        #: the head node's history, where the GPU nodes' RECORDS go
        self.records = RecordSink(cfg)
        self._http: ThreadingHTTPServer | None = None

    # ---- scores and Slurm --------------------------------------------------------------
    def reload_scores(self, force: bool = False) -> None:
        """Load the score files that changed (agent/score_files.py): the site default set
        and the sets of the GPU models that have their own. Read outside the lock."""
        files = self.score_files.read(force)
        if files:
            with self.lock:
                score_files.apply(self.state.live, files)

    def now(self) -> float:
        """The wall time; to be read under the agent's lock. When the wall clock stepped
        since the last reading, the times the agent keeps itself are moved by the step
        first (slurm_colo/clock.py), so no time read from the stepped clock meets one from
        before the step."""
        now, step = self.clock.read()
        if step:
            log.warning(
                "the wall clock stepped %+.1f s: the agent's own times (placements not yet "
                "in Slurm, held jobs, time owed to shared jobs) move with it; Slurm's "
                "times are as Slurm has them",
                step,
            )
            self.state.shift_clock(step)
            self.owed_saved_at += step
        return now

    def refresh(self) -> None:
        with self.lock:
            asked = self.now()
        try:
            if self.snapshots is not None:
                jobs, nodes = self.snapshots.take()
            else:
                jobs, nodes = self.backend.jobs(), self.backend.nodes()
        except SlurmError as e:
            log.warning("slurm refresh failed, keeping the previous view: %s", e)
            return
        with self.lock:
            now = self.now()
            self.state.apply_snapshot(jobs, nodes, now, asked)
            actions = self.state.withdraw()
            actions += self.state.reaim(now)
            actions += self.state.replan(now)
            actions += self.state.extend_limits(now)
        self.run_actions(actions)
        if now - self.owed_saved_at >= time_owed.SAVE_S:
            self.save_time_owed(now)

    def save_time_owed(self, now: float) -> None:
        """Save the time-limit accounts (agent/time_owed.py), once the agent has looked."""
        if self.cfg.placement.time_limit != TimeLimit.EXTEND:
            return
        with self.lock:
            saved = self.state.credit.accounts()
            offset = self.clock.offset
        if self.boot is not None and offset is not None:
            saved.clock = (self.boot, offset)
        if saved.at is not None:
            with self._save_lock:
                time_owed.save(self.owed_file, saved)
            self.owed_saved_at = now

    def run_actions(self, actions: list[Action]) -> None:
        """Make the changes an undo or a re-aim asked for. A failure is logged; a job whose
        requeue failed is forgotten (it runs on), one whose release failed is aimed again at
        the next look at Slurm. While Slurm refuses the agent the right, only one change is
        tried now and then (agent/rights.py); the others are handled as refused."""
        with self._control_lock:
            with self.lock:
                was_refused = self.state.rights.refused is not None
                now = self.now()
                run, skip = self.state.rights.gate(actions, now)
                for a in skip:
                    self.state.failed(a, now, made=False)
            for a in run:
                if not was_refused and self.state.rights.refused is not None:
                    with self.lock:  # refused for the right earlier in this batch
                        self.state.failed(a, self.now(), made=False)
                    continue
                try:
                    if a.kind == "requeue_hold":
                        self.control.requeue_hold(a.target, a.admin_comment, a.comment, a.restore)
                    elif a.kind == "admin_hold":
                        self.control.admin_hold(a.target)
                    elif a.kind == "withdraw":
                        self.control.hold_pending(a.target, a.admin_comment, a.comment, a.restore)
                    elif a.kind == "retarget":
                        self.control.retarget(a.target, a.node, a.admin_comment, a.comment, a.gres)
                    elif a.kind == "extend":
                        self.control.extend_time_limit(a.target, a.minutes)
                        log.info(
                            "job %s: time limit +%d min for the time sharing cost it",
                            a.job_id,
                            a.minutes,
                        )
                    else:
                        self.control.aim_and_release(
                            a.target,
                            a.node,
                            a.admin_comment,
                            a.comment,
                            a.gres,
                            a.start_now,
                            a.restore,
                        )
                except SlurmError as e:
                    with self.lock:
                        self.state.failed(a, self.now(), str(e))
                else:
                    if self.state.rights.refused is not None:
                        with self.lock:
                            if self.state.rights.granted():
                                log.warning(
                                    "Slurm accepts the agent's changes again (%s of job %s); "
                                    "it resumes them",
                                    a.kind,
                                    a.job_id,
                                )

    def _save_learned(self, measured: learned.Learned, changes: int) -> None:
        """Save a copy of the measurements, unless a newer one was saved meanwhile."""
        with self._save_lock:
            if changes > self._saved_changes:
                learned.save(self.learned_file, measured)
                self._saved_changes = changes

    def _refresher(self) -> None:
        while not self.stop.wait(self.cfg.agent.refresh_interval_s):
            self.reload_scores()
            self.refresh()

    def _view_builder(self) -> None:
        """Build the view again soon after a job's end or start left it behind, so the next
        request finds it built; whatever reads it first builds it anyway (Occupancy.view)."""
        while not self.stop.is_set():
            if not self.view_due.wait(1.0):
                continue
            self.stop.wait(VIEW_DELAY_S)
            self.view_due.clear()
            with self.lock:
                self.state.fresh()

    # ---- requests ---------------------------------------------------------------------
    def handle(self, line: bytes, peer_uid: int | None) -> bytes:
        reply, after = self.answer(line, peer_uid)
        after()
        return reply

    def answer(self, line: bytes, peer_uid: int | None) -> tuple[bytes, Callable[[bool], None]]:
        """The reply to one request line, and what must run right after it is sent (told
        whether the reply was delivered).

        A PLACE request is answered first and recorded afterwards, so slurmctld (which
        waits, holding its locks) gets its answer before the bookkeeping runs; the agent's
        lock is held from the decision until ``after`` has run, so no other request is
        decided on a view that lacks this placement. ``after`` must always be called.
        """
        t0 = time.perf_counter()
        try:
            verb, payload = parse_request(line)
        except ProtocolError as e:
            return format_error(str(e)), _nothing_after
        if verb in PRIVILEGED_VERBS and peer_uid is not None and peer_uid not in self.trusted:
            return format_error(
                f"{verb} is reserved to slurmctld and the node hooks"
            ), _nothing_after
        if verb == "PLACE":
            self.lock.acquire()
            wait = time.perf_counter() - t0
            try:
                reply, record = self.state.decide(payload, self.now())
            except (ColoError, KeyError, ValueError, TypeError) as e:
                self.lock.release()
                log.warning("PLACE failed: %s", e)
                return format_error(f"PLACE failed: {e}"), _nothing_after
            except BaseException:
                self.lock.release()
                raise
            self.req_count += 1
            dt = time.perf_counter() - t0
            self.req_seconds += dt
            self.place_seconds += dt
            pw = self.place_wait
            pw["sum"] += wait
            pw["count"] += 1
            pw["max"] = max(pw["max"], wait)
            name = payload.get("name") or "a job"
            # the hook has given up on an answer this late: the job gets the fallback, and
            # the placement, never to appear in Slurm, must not hold a slot on its GPU
            late = dt * 1000 > self.cfg.agent.request_timeout_ms
            if late:
                log.warning(
                    "PLACE for %s took %.0f ms (%.0f ms of it waiting for the agent's lock, "
                    "held by a look at Slurm, a probe or another request), longer than the "
                    "Lua hook waits (agent.request_timeout_ms = %d): the job got the "
                    "fallback; placement dropped",
                    name,
                    dt * 1000,
                    wait * 1000,
                    self.cfg.agent.request_timeout_ms,
                )

            def after(delivered: bool = True) -> None:
                try:
                    if delivered and not late:
                        record()
                    elif not late:
                        log.warning(
                            "PLACE for %s: the Lua hook was gone before the answer "
                            "(it timed out): placement dropped",
                            name,
                        )
                except Exception:  # bookkeeping must never take the agent down
                    log.exception("recording a placement failed")
                finally:
                    self.lock.release()

            return format_reply(verb, reply), after
        try:
            reply = self._dispatch(verb, payload)
        except (ColoError, KeyError, ValueError, TypeError, ArithmeticError) as e:
            log.warning("%s failed: %s", verb, e)
            return format_error(f"{verb} failed: {e}"), _nothing_after
        dt = time.perf_counter() - t0
        with self.lock:
            self.req_count += 1
            self.req_seconds += dt
        return format_reply(verb, reply), _nothing_after

    def _slurm_tag(self, job_id: int) -> tuple[str | None, bool]:
        """The placement tag in the job's Slurm record (None when it has none or Slurm
        does not know the job), and whether Slurm could be asked at all (logged if not)."""
        try:
            j = self.backend.job(job_id)
        except SlurmError as e:
            log.warning("job %d: its placement could not be read from Slurm: %s", job_id, e)
            return None, False
        return (j.admin_comment if j else None), True

    def _job_start(self, p: dict[str, Any]) -> dict[str, Any]:
        """JOBSTART: the reply to a node's Prolog: the job's placement, or None; with
        ``slurm_unreachable`` when the job had to be read from Slurm and could not be (the
        Prolog then reads its tag itself). Logs where the time went when the answer took
        over ``JOBSTART_SLOW_S``."""
        t0 = time.perf_counter()
        job_id = _job_id(p)
        gpus = _gpu_indexes(p)
        with self.lock:
            t_lock = time.perf_counter()
            need = self.state.needs_lookup(job_id)
        tag_text, asked = None, True
        if need:  # placed before the last refresh: read its tag from Slurm (outside the lock)
            tag_text, asked = self._slurm_tag(job_id)
        t_slurm = time.perf_counter()
        with self.lock:
            t_lock2 = time.perf_counter()
            placement = self.state.job_started(
                job_id,
                tag_text,
                self.now(),
                str(p.get("node", "")),
                gpus,
            )
            if self.state.stale:
                self.view_due.set()
        dt = time.perf_counter() - t0
        if dt > JOBSTART_SLOW_S:
            log.warning(
                "JOBSTART for job %d took %.0f ms (waiting for the agent's lock %.0f ms, "
                "reading the job from Slurm %.0f ms, recording the start %.0f ms); the "
                "Prolog waits %g s for the answer",
                job_id,
                dt * 1000,
                (t_lock - t0 + t_lock2 - t_slurm) * 1000,
                (t_slurm - t_lock) * 1000,
                (time.perf_counter() - t_lock2) * 1000,
                JOBSTART_TIMEOUT_S,
            )
        if placement is None and not asked:
            return {"placement": None, "slurm_unreachable": True}
        return {"placement": placement}

    def _dispatch(self, verb: str, p: dict[str, Any]) -> dict[str, Any]:
        if verb == "PING":
            return {
                "pong": True,
                "pid": os.getpid(),
                "user": self.user,
                "backend": self.backend.name,
                "scores": self.state.scores.id,
            }
        if verb == "JOBSTART":
            return self._job_start(p)
        if verb == "PROBE":
            report = ProbeReport.from_wire(p)
            with self.lock:
                reply, actions = self.state.probe(report, self.now())
                changes = self.state.live.changes
                measured = dict(self.state.live.learned) if changes > self._saved_changes else None
            if measured is not None:
                self._save_learned(measured, changes)
            if actions:  # Slurm commands take tens of ms: run them after the reply
                threading.Thread(
                    target=self.run_actions, args=(actions,), name="undo", daemon=True
                ).start()
            return reply
        if verb == "RECORDS":
            return self.records.store(p)
        if verb == "JOBEND":
            with self.lock:
                self.state.job_ended(_job_id(p), self.now())
            self.view_due.set()
            return {}
        if verb == "EXPLAIN":
            job_id = _job_id(p)
            with self.lock:
                known = not self.state.needs_lookup(job_id)
            try:
                j = None if known else self.backend.job(job_id)
                slurm_error = None
            except SlurmError as e:
                j, slurm_error = None, e.message
            with self.lock:
                ex = self.state.explain(job_id, j.admin_comment if j else None)
            if j is not None:
                ex.setdefault("state", j.state)
                ex["slurm_comment"] = j.comment
            if slurm_error:
                ex["note"] = f"Slurm could not be asked about the job: {slurm_error}"
            return ex
        if verb == "STATUS":
            with self.lock:
                st = self.state.status(self.now())
                st["requests_total"] = self.req_count
                st["request_seconds"] = {"sum": self.req_seconds, "count": self.req_count}
                st["place_lock_wait_seconds"] = dict(self.place_wait)
                return st
        if verb == "RELOAD":
            self.reload_scores(force=True)
            self.refresh()
            return {"scores": self.state.scores.id}
        raise ProtocolError(f"unhandled verb {verb}")

    # ---- serving ----------------------------------------------------------------------
    def serve(self) -> None:
        path = Path(self.cfg.agent.socket)
        self._server = listeners.unix_server(
            path, self.answer, self.stop, exempt=lambda uid: uid in self.trusted
        )
        self._start_tcp()
        self.reload_scores(force=True)
        self.refresh()
        threading.Thread(target=self._refresher, name="refresher", daemon=True).start()
        threading.Thread(target=self._view_builder, name="view", daemon=True).start()
        if self.cfg.agent.metrics_listen:
            self._http = listeners.metrics_server(
                self.cfg.agent.metrics_listen, lambda: self._dispatch("STATUS", {})
            )
        log.info(
            "agent listening on %s (backend %s, %d shared GPU(s) configured)",
            path,
            self.backend.name,
            len(self.state.view.gpus),
        )
        # requests from slurmctld must not wait out the default 5 ms interpreter-lock
        # interval while another thread (metrics, a job lookup) runs Python code
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(
                sig, lambda *_: threading.Thread(target=self.shutdown, daemon=True).start()
            )
        signal.signal(signal.SIGHUP, lambda *_: self.reload_scores(force=True))
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self._server.server_close()
            path.unlink(missing_ok=True)
            log.info("agent stopped: %s", self.place_summary())

    def place_summary(self) -> str:
        """The placement requests answered since the agent started, for its last log line:
        how many, how long they took and how long they waited for the lock."""
        pw = self.place_wait
        n = int(pw["count"])
        if n == 0:
            return "0 placement requests answered"
        return (
            f"{n} placement requests answered in {1000 * self.place_seconds / n:.1f} ms on "
            f"average, waiting {1000 * pw['sum'] / n:.1f} ms on average for the agent's lock, "
            f"{1000 * pw['max']:.1f} ms at the longest"
        )

    def _start_tcp(self) -> None:
        """A server thread per ``tcp:`` address of ``agent.listen``."""
        self._tcp = listeners.tcp_servers(self.cfg.agent, self.handle, self.stop)

    def shutdown(self) -> None:
        self.stop.set()
        with self.lock:
            now = self.now()
        self.save_time_owed(now)
        for srv in self._tcp:
            srv.shutdown()
            srv.server_close()
        if self._http:
            self._http.shutdown()
        if self._server:
            self._server.shutdown()
