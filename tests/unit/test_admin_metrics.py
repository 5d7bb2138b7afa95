"""The Prometheus text rendering, parsed back line by line."""

from __future__ import annotations

import re
from datetime import UTC

from slurm_colo.metrics import escape_label, format_value, render

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


def _unescape(v: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


def parse(text: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, dict[str, str], str]]]:
    """A strict reader of the exposition format: families (help, type) and samples."""
    assert text.endswith("\n")
    families: dict[str, dict[str, str]] = {}
    samples: list[tuple[str, dict[str, str], str]] = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            families.setdefault(name, {})["help"] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in ("counter", "gauge", "summary", "histogram", "untyped")
            assert "help" in families.get(name, {}), f"TYPE before HELP for {name}"
            families[name]["type"] = kind
        else:
            m = SAMPLE_RE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, _, body, value = m.groups()
            labels: dict[str, str] = {}
            if body:
                pos = 0
                while pos < len(body):
                    lm = LABEL_RE.match(body, pos)
                    assert lm, f"bad labels in {line!r}"
                    labels[lm.group(1)] = _unescape(lm.group(2))
                    pos = lm.end()
            float(value)  # must parse (NaN/+Inf included)
            family = next(
                (f for f in families if name == f or name in (f + "_sum", f + "_count")), None
            )
            assert family, f"sample {name} without HELP/TYPE"
            samples.append((name, labels, value))
    return {k: (v["help"], v["type"]) for k, v in families.items()}, samples


SNAPSHOT = {
    "gpus": [
        {
            "node": "gpu01",
            "index": 1,
            "gres_type": "v100_s1",
            "occupants": [
                {
                    "job_id": 42,
                    "cls": "resnet50",
                    "user": "ana",
                    "pending": False,
                    "thread_pct": 50,
                },
                {
                    "job_id": None,
                    "cls": 'we"ird\\cls\nx',
                    "user": "bo",
                    "pending": True,
                    "thread_pct": 50,
                },
            ],
            "predicted_delta": 1.31,
            "observed_slowdown": None,
        },
        {
            "node": "gpu02",
            "index": 0,
            "gres_type": "v100_s0",
            "occupants": [],
            "predicted_delta": None,
            "observed_slowdown": 1.12,
            "slots": 4,
            "exclusive_job": 77,
            "closed_for": 91,
            "available": False,
        },
    ],
    "nodes_refused": {"gpu02": "Slurm lists its GPUs as gpu:v100:1,gpu:v100_s0:1 where ..."},
    "decisions": {"share:compatible": 7, "exclusive:no_partner": 2},
    "fallbacks": {"agent_timeout": 3},
    "scores": {"id": "2026-11-22T03:00", "age_s": 5400.0},
    "requests_total": 12,
    "request_seconds": {"sum": 0.25, "count": 12},
    "place_lock_wait_seconds": {"sum": 0.125, "count": 10, "max": 0.0625},
    "pending_placements": 2,
    "probes": {"kept": 5, "undone": 1},
    "held": [{"job_id": 93, "gres_type": "v100_s1"}],
}


def _values(samples, name):
    return [(labels, value) for n, labels, value in samples if n == name]


def test_every_family_has_help_and_type_and_counters_end_in_total():
    families, _ = parse(render(SNAPSHOT))
    assert families, "no metric families"
    for name, (help_text, kind) in families.items():
        assert name.startswith("slurm_colo_")
        assert help_text
        if kind == "counter":
            assert name.endswith("_total")


def test_gpu_occupants_split_running_and_pending():
    _, samples = parse(render(SNAPSHOT))
    running = {
        (lab["node"], lab["gpu"]): v for lab, v in _values(samples, "slurm_colo_gpu_occupants")
    }
    pending = {
        (lab["node"], lab["gpu"]): v
        for lab, v in _values(samples, "slurm_colo_gpu_pending_occupants")
    }
    assert running == {("gpu01", "1"): "1", ("gpu02", "0"): "0"}
    assert pending == {("gpu01", "1"): "1", ("gpu02", "0"): "0"}


def test_label_values_are_escaped_and_round_trip():
    text = render(SNAPSHOT)
    assert 'class="we\\"ird\\\\cls\\nx"' in text
    _, samples = parse(text)
    occ = _values(samples, "slurm_colo_gpu_occupant_thread_percent")
    classes = {lab["class"]: (lab["job_id"], lab["pending"], v) for lab, v in occ}
    assert classes == {"resnet50": ("42", "false", "50"), 'we"ird\\cls\nx': ("", "true", "50")}


def test_none_values_give_no_sample():
    _, samples = parse(render(SNAPSHOT))
    delta = {lab["node"]: v for lab, v in _values(samples, "slurm_colo_gpu_predicted_delta")}
    slow = {lab["node"]: v for lab, v in _values(samples, "slurm_colo_gpu_observed_slowdown")}
    assert delta == {"gpu01": "1.31"}
    assert slow == {"gpu02": "1.12"}


def test_decisions_fallbacks_scores_and_requests():
    _, samples = parse(render(SNAPSHOT))
    dec = {
        (lab["action"], lab["reason"]): v
        for lab, v in _values(samples, "slurm_colo_decisions_total")
    }
    assert dec == {("share", "compatible"): "7", ("exclusive", "no_partner"): "2"}
    fb = {lab["reason"]: v for lab, v in _values(samples, "slurm_colo_fallbacks_total")}
    assert fb == {"agent_timeout": "3"}
    assert _values(samples, "slurm_colo_scores_info") == [({"id": "2026-11-22T03:00"}, "1")]
    assert _values(samples, "slurm_colo_scores_age_seconds") == [({}, "5400.0")]
    assert _values(samples, "slurm_colo_requests_total") == [({}, "12")]
    assert _values(samples, "slurm_colo_request_duration_seconds_sum") == [({}, "0.25")]
    assert _values(samples, "slurm_colo_request_duration_seconds_count") == [({}, "12")]
    assert _values(samples, "slurm_colo_place_lock_wait_seconds_sum") == [({}, "0.125")]
    assert _values(samples, "slurm_colo_place_lock_wait_seconds_count") == [({}, "10")]
    assert _values(samples, "slurm_colo_place_lock_wait_max_seconds") == [({}, "0.0625")]
    pr = {lab["verdict"]: v for lab, v in _values(samples, "slurm_colo_probes_total")}
    assert pr == {"kept": "5", "undone": "1"}
    assert _values(samples, "slurm_colo_held_jobs") == [({}, "1")]


def test_empty_snapshot_still_valid_text():
    families, samples = parse(render({}))
    assert "slurm_colo_requests_total" in families
    assert samples == []


def test_value_and_escape_helpers():
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("inf")) == "+Inf"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(True) == "1"
    assert format_value(3) == "3"
    assert escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_optional_capacity_exclusive_and_pending():
    _, samples = parse(render(SNAPSHOT))
    assert _values(samples, "slurm_colo_gpu_slots") == [
        ({"node": "gpu02", "gpu": "0", "gres_type": "v100_s0"}, "4")
    ]
    assert _values(samples, "slurm_colo_gpu_exclusive") == [
        ({"node": "gpu02", "gpu": "0", "gres_type": "v100_s0"}, "1")
    ]
    assert _values(samples, "slurm_colo_gpu_drained") == [
        ({"node": "gpu02", "gpu": "0", "gres_type": "v100_s0"}, "1")
    ]
    assert _values(samples, "slurm_colo_pending_placements") == [({}, "2")]


def test_a_node_the_agent_closed_is_a_series_to_alert_on():
    _, samples = parse(render(SNAPSHOT))
    assert _values(samples, "slurm_colo_nodes_closed") == [({"node": "gpu02"}, "1")]
    assert _values(samples, "slurm_colo_gpu_available") == [
        ({"node": "gpu02", "gpu": "0", "gres_type": "v100_s0"}, "0")
    ]
    _, none = parse(render({"gpus": [{"node": "n", "index": 1, "available": True}]}))
    assert _values(none, "slurm_colo_gpu_available") == [
        ({"node": "n", "gpu": "1", "gres_type": ""}, "1")
    ]
    assert _values(none, "slurm_colo_nodes_closed") == []


def test_score_age_from_created_time():
    from datetime import datetime

    created = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
    snap = {"scores": {"id": "s", "created": created.isoformat()}}
    _, samples = parse(render(snap, now=created.timestamp() + 5400.0))
    assert _values(samples, "slurm_colo_scores_age_seconds") == [({}, "5400.0")]
    _, samples = parse(render({"scores": {"id": "s", "created": "yesterday"}}))
    assert _values(samples, "slurm_colo_scores_age_seconds") == []


def test_pending_placements_without_job_id_keep_unique_series():
    occ = [
        {
            "job_id": None,
            "key": f"tok{i}",
            "cls": "c",
            "user": "u",
            "pending": True,
            "thread_pct": 50,
        }
        for i in range(2)
    ]
    snap = {"gpus": [{"node": "n", "index": 0, "gres_type": "s0", "occupants": occ}]}
    _, samples = parse(render(snap))
    ids = [lab["job_id"] for lab, _ in _values(samples, "slurm_colo_gpu_occupant_thread_percent")]
    assert ids == ["tok0", "tok1"]
