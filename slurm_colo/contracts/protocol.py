"""Wire protocol on the agent socket: one request line, one reply line.

Request: ``VERB<TAB>...``. ``PLACE`` (from the Lua hook) carries ``key=value`` fields
separated by tabs; every other verb carries one JSON object. Reply: ``OK<TAB>...`` (again
``key=value`` fields for PLACE, JSON otherwise) or ``ERR<TAB>message``.
"""

from __future__ import annotations

import json
from typing import Any

from slurm_colo.errors import ProtocolError

MAX_LINE = 64 * 1024
VERBS = ("PLACE", "JOBSTART", "JOBEND", "PROBE", "RECORDS", "EXPLAIN", "STATUS", "PING", "RELOAD")
KV_VERBS = ("PLACE",)


_SEPARATORS = str.maketrans("\t\r\n", "   ")


def _clean(v: object) -> str:
    return str(v).translate(_SEPARATORS)


def parse_request(line: bytes | str) -> tuple[str, dict[str, Any]]:
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise ProtocolError("request too long")
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("request is not UTF-8") from None
    line = line.rstrip("\r\n")
    verb, _, rest = line.partition("\t")
    if verb not in VERBS:
        raise ProtocolError(f"unknown verb {verb[:20]!r}")
    if verb in KV_VERBS:
        fields: dict[str, Any] = {}
        for item in rest.split("\t"):
            if not item:
                continue
            k, sep, v = item.partition("=")
            if not sep or not k.isidentifier():
                raise ProtocolError(f"bad field {item[:40]!r}")
            fields[k] = v
        return verb, fields
    if not rest:
        return verb, {}
    try:
        obj = json.loads(rest)
    except (ValueError, RecursionError):  # not JSON, nested too deeply, a 4,300-digit number
        raise ProtocolError(f"{verb}: payload is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{verb}: payload must be a JSON object")
    return verb, obj


def format_request(verb: str, payload: dict[str, Any]) -> bytes:
    if verb in KV_VERBS:
        body = "\t".join(f"{k}={_clean(v)}" for k, v in payload.items())
    else:
        body = json.dumps(payload, separators=(",", ":"))
    return f"{verb}\t{body}\n".encode()


def format_reply(verb: str, payload: dict[str, Any]) -> bytes:
    if verb in KV_VERBS:
        body = "\t".join(f"{k}={_clean(v)}" for k, v in payload.items() if v is not None)
    else:
        body = json.dumps(payload, separators=(",", ":"), default=str)
    return f"OK\t{body}\n".encode()


def format_error(message: str) -> bytes:
    return f"ERR\t{_clean(message)}\n".encode()


def parse_reply(verb: str, line: bytes | str) -> dict[str, Any]:
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    line = line.rstrip("\r\n")
    status, _, rest = line.partition("\t")
    if status == "ERR":
        raise ProtocolError(f"agent error: {rest}")
    if status != "OK":
        raise ProtocolError(f"malformed reply {line[:60]!r}")
    if verb in KV_VERBS:
        return dict(item.split("=", 1) for item in rest.split("\t") if "=" in item)
    try:
        obj = json.loads(rest) if rest else {}
    except (ValueError, RecursionError):
        raise ProtocolError("reply payload is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("reply payload is not an object")
    return obj
