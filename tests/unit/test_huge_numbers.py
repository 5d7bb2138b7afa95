"""Every reader of a file or message refuses an integer too long to convert (Python's
4,300-digit limit) or too large for a float, with its own error, not a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_colo.agent.kept import document
from slurm_colo.config import parse_config
from slurm_colo.contracts.protocol import parse_reply, parse_request
from slurm_colo.errors import ColoError, ConfigError, ProtocolError, ScoresError
from slurm_colo.gavel import load_gavel
from slurm_colo.scores import load_scores
from slurm_colo.store.ingest import BadRecord, record_from_json

LONG = "1" + "0" * 5000  # beyond the integer string limit
BIG = "1" + "0" * 400  # converts, but not to a float


def _file(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "f.json"
    f.write_text(text)
    return f


READERS: dict[str, tuple[Callable[[Path, str], object], type[ColoError]]] = {
    "spool record": (lambda _, n: record_from_json('{"job_id": %s}' % n), BadRecord),
    "kept file": (
        lambda _, n: document(('{"format": "x", "n": %s}' % n).encode(), "k", "x", ConfigError),
        ConfigError,
    ),
    "score file": (
        lambda t, n: load_scores(
            _file(
                t,
                '{"format": "slurm-colo-scores/1", "pairs": [{"a": "x", "b": "y", '
                '"n_a": %s, "n_b": 1}]}' % n,
            )
        ),
        ScoresError,
    ),
    "gavel file": (
        lambda t, n: load_gavel(_file(t, '{"v100": {"(\'A\', 1)": {"null": %s}}}' % n), "v100"),
        ScoresError,
    ),
    "request": (lambda _, n: parse_request(b'RECORDS\t{"n": %s}\n' % n.encode()), ProtocolError),
    "reply": (lambda _, n: parse_reply("STATUS", 'OK\t{"n": %s}' % n), ProtocolError),
    "config": (lambda _, n: parse_config("[agent]\nrequest_timeout_ms = %s\n" % n), ConfigError),
    "config float": (lambda _, n: parse_config("[scores]\nholdout_share = %s\n" % n), ConfigError),
}


@pytest.mark.parametrize("number", [LONG, BIG], ids=["5001 digits", "401 digits"])
@pytest.mark.parametrize("reader", list(READERS))
def test_a_huge_integer_is_refused_with_the_readers_error(
    tmp_path: Path, reader: str, number: str
) -> None:
    read, error = READERS[reader]
    if reader == "kept file" and number == BIG:
        assert document(b'{"format": "x", "n": %s}' % BIG.encode(), "k", "x", ConfigError)
        return  # any number is JSON; the kept file's own reader checks the values
    if reader in ("request", "reply") and number == BIG:
        assert read(tmp_path, number)  # a message is any JSON; each verb checks its fields
        return
    with pytest.raises(error):
        read(tmp_path, number)


def test_gavel_nested_too_deeply_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScoresError, match="not usable: nested too deeply$"):
        load_gavel(_file(tmp_path, "[" * 100_000 + "]" * 100_000), "v100")
    with pytest.raises(ProtocolError, match="not JSON"):
        parse_request(b"RECORDS\t" + b"[" * 30_000 + b"]" * 30_000 + b"\n")
