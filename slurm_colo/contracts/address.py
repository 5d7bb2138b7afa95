"""Where the agent is: ``unix:/path`` (or a bare path) and ``tcp:HOST:PORT``.

Apart from :mod:`.transport` so that reading the configuration, which every hook does,
checks addresses without loading munge, sockets or hashing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurm_colo.errors import ConfigError

UNIX, TCP = "unix", "tcp"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HOST = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class Address:
    scheme: str  # "unix" or "tcp"
    path: str = ""  # unix
    host: str = ""  # tcp: a name, an IPv4 or an IPv6 address (without brackets)
    port: int = 0  # tcp

    def __str__(self) -> str:
        if self.scheme == UNIX:
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp:{host}:{self.port}"


def parse_address(text: str) -> Address:
    """``unix:/path``, ``tcp:HOST:PORT`` or a bare path. Raises :class:`ConfigError`."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("empty address; write unix:/path or tcp:HOST:PORT")
    if text != text.strip() or "\0" in text:
        raise ConfigError(f"address {text!r} has surrounding blanks or a NUL")
    if text.startswith(("/", ".")):
        return Address(UNIX, path=text)
    m = _SCHEME.match(text)
    if not m:
        return Address(UNIX, path=text)
    scheme, rest = m.group(1).lower(), text[m.end() :]
    if scheme == UNIX:
        if not rest:
            raise ConfigError(f"address {text!r}: no socket path after unix:")
        return Address(UNIX, path=rest)
    if scheme != TCP:
        hint = f"; did you mean tcp:{text}?" if rest.isdigit() else ""
        raise ConfigError(
            f"address {text!r}: unknown scheme {m.group(1)!r} "
            f"(accepted: unix:/path, tcp:HOST:PORT){hint}"
        )
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"address {text!r}: write tcp:HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host or not re.fullmatch(r"[0-9A-Fa-f:.%A-Za-z]+", host) or ":" not in host:
            raise ConfigError(f"address {text!r}: {host!r} is not an IPv6 address")
    elif ":" in host:
        raise ConfigError(
            f"address {text!r}: write an IPv6 address in brackets, tcp:[{host}]:{port_text}"
        )
    elif not _HOST.match(host):
        raise ConfigError(f"address {text!r}: bad host name {host!r}")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(
            f"address {text!r}: port must be a number from 1 to 65535, got {port_text!r}"
        )
    return Address(TCP, host=host, port=int(port_text))
