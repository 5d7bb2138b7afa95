"""Typed gate to munge, the credential service Slurm sites already run on every node.

:func:`encode` wraps a payload in a credential that names the encoding process's uid and
gid; :func:`decode` checks one (made with this cluster's key, not expired, not seen
before on this host) and returns a :class:`Credential`. Failures raise the typed errors of
:mod:`slurm_colo.errors` (all :class:`~slurm_colo.errors.AuthError`), each with a hint an
administrator can act on.

Two backends, the same behaviour:

* ``"lib"``: libmunge (``libmunge.so.2``) through ctypes, one context per call, so calls
  from several threads never share one. About 0.05 ms per encode or decode (measured:
  ``benchmarks/transport_bench.py``), 1.8 ms once to load ctypes and the library.
* ``"cli"``: the ``munge`` / ``unmunge`` programs (argument lists, no shell), used when
  libmunge is missing. A process per call: 1 to 2 ms each.

``backend="auto"`` (the default) takes libmunge when it loads. The standard library only
(ctypes is imported on first use, so importing this module stays cheap).

Facts from munge 0.5.15 (``munge.h``, munge(3), unmunge(1)), checked on a private munged:
error numbers are ``EMUNGE_SOCKET`` 6, ``EMUNGE_BAD_CRED`` 8, ``EMUNGE_CRED_INVALID`` 14
(the credential was made with another key), ``EMUNGE_CRED_EXPIRED`` 15,
``EMUNGE_CRED_REWOUND`` 16, ``EMUNGE_CRED_REPLAYED`` 17, ``EMUNGE_CRED_UNAUTHORIZED`` 18;
``unmunge`` exits with that number. The replay cache is per munged, so a credential is
refused the second time it is decoded *on the same host* only. A requested TTL above
munged's ``--max-ttl`` (default 3600 s) is cut down to it; TTL 0 means munged's default
(300 s). Expiry is in whole seconds of the decoding host's clock. munged keeps the replay
cache in memory only: after it restarts, a credential it accepted before is accepted once
more while its TTL lasts. A missing socket fails at once (``EMUNGE_SOCKET``); a socket
left behind by a dead munged fails only after libmunge's retries, about 2.2 s. munged
refuses messages over 1 MiB (``EMUNGE_BAD_LENGTH``, 3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from slurm_colo.errors import (
    AuthError,
    CredentialExpired,
    CredentialForeign,
    CredentialInvalid,
    CredentialReplayed,
    MungeUnavailable,
)

# munge_err_t (munge.h)
EMUNGE_SUCCESS = 0
EMUNGE_SNAFU = 1
EMUNGE_BAD_ARG = 2
EMUNGE_BAD_LENGTH = 3
EMUNGE_OVERFLOW = 4
EMUNGE_NO_MEMORY = 5
EMUNGE_SOCKET = 6
EMUNGE_TIMEOUT = 7
EMUNGE_BAD_CRED = 8
EMUNGE_BAD_VERSION = 9
EMUNGE_BAD_CIPHER = 10
EMUNGE_BAD_MAC = 11
EMUNGE_BAD_ZIP = 12
EMUNGE_BAD_REALM = 13
EMUNGE_CRED_INVALID = 14
EMUNGE_CRED_EXPIRED = 15
EMUNGE_CRED_REWOUND = 16
EMUNGE_CRED_REPLAYED = 17
EMUNGE_CRED_UNAUTHORIZED = 18

# munge_opt_t (munge.h)
MUNGE_OPT_TTL = 4
MUNGE_OPT_ENCODE_TIME = 6
MUNGE_OPT_SOCKET = 8

BACKENDS = ("auto", "lib", "cli")
#: time limit of one munge / unmunge process (the cli backend)
CLI_TIMEOUT_S = 5.0
#: longest credential decode accepts: munged takes messages up to 1 MiB, base64 adds a third
MAX_CREDENTIAL = 1536 * 1024


@dataclass(frozen=True)
class Credential:
    """A credential munged accepted."""

    payload: bytes
    #: uid and gid of the process that encoded it (vouched for by the encoding munged)
    uid: int
    gid: int
    #: when it was encoded, seconds since the epoch on the encoding host's clock
    encoded_at: int
    #: its time-to-live, seconds
    ttl: int


# ---- errors ---------------------------------------------------------------------------

_KEY_HINT = (
    "every node of the cluster needs the same munge key (/etc/munge/munge.key): copy "
    "the head node's key to this node and restart munged"
)
_CLOCK_HINT = "check that the clocks of the head node and the GPU nodes agree (NTP)"


def _error(code: int, detail: str, socket_path: str | None) -> AuthError:
    """The typed error for munge error number ``code``."""
    detail = detail.strip() or f"munge error {code}"
    where = socket_path or (_lib.default_socket if _lib else "") or "munged's default socket"
    if code == EMUNGE_SOCKET:
        return MungeUnavailable(
            f"cannot reach munged at {where}: {detail}",
            hint="start munged on this host (systemctl start munge), or set agent.munge_socket "
            "to the socket it listens on",
            code=code,
        )
    if code == EMUNGE_CRED_EXPIRED:
        return CredentialExpired(f"munge credential expired: {detail}", hint=_CLOCK_HINT, code=code)
    if code == EMUNGE_CRED_REWOUND:
        return CredentialExpired(
            f"munge credential was made in the future (the sender's clock is ahead): {detail}",
            hint=_CLOCK_HINT,
            code=code,
        )
    if code == EMUNGE_CRED_REPLAYED:
        return CredentialReplayed(
            f"munge credential replayed: this host has already accepted it ({detail})",
            hint="a captured message was sent again; the agent log names the peer address",
            code=code,
        )
    if code == EMUNGE_CRED_INVALID:
        return CredentialForeign(
            f"munge credential made with another key (a foreign cluster, or altered on the "
            f"way): {detail}",
            hint=_KEY_HINT,
            code=code,
        )
    if code in (
        EMUNGE_BAD_CRED,
        EMUNGE_BAD_VERSION,
        EMUNGE_BAD_CIPHER,
        EMUNGE_BAD_MAC,
        EMUNGE_BAD_ZIP,
        EMUNGE_BAD_REALM,
        EMUNGE_CRED_UNAUTHORIZED,
    ):
        return CredentialInvalid(f"not an acceptable munge credential: {detail}", code=code)
    return AuthError(f"munge failed: {detail}", code=code)


def _unavailable(why: str) -> MungeUnavailable:
    return MungeUnavailable(
        f"munge is not usable: {why}",
        hint="install munge on this host (Debian: apt-get install munge libmunge2)",
    )


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"munge backend {backend!r}; accepted: {', '.join(BACKENDS)}")


def _check_credential(cred: str) -> bytes:
    if not isinstance(cred, str) or not cred or len(cred) > MAX_CREDENTIAL:
        raise CredentialInvalid("not a munge credential (empty or too long)", code=EMUNGE_BAD_CRED)
    try:
        raw = cred.strip().encode("ascii")
    except UnicodeEncodeError:
        raise CredentialInvalid(
            "not a munge credential (not ASCII)", code=EMUNGE_BAD_CRED
        ) from None
    if b"\0" in raw or b"\n" in raw:
        raise CredentialInvalid("not a munge credential (control characters)", code=EMUNGE_BAD_CRED)
    return raw


# ---- libmunge -------------------------------------------------------------------------


class _Lib:
    """libmunge and libc's free(), loaded once."""

    def __init__(self) -> None:
        import ctypes

        self.ct = ctypes
        try:  # dlopen by soname first: ctypes.util (subprocess, ldconfig) costs milliseconds
            dll = ctypes.CDLL("libmunge.so.2")
        except OSError:
            import ctypes.util

            name = ctypes.util.find_library("munge")
            if not name:
                raise OSError("libmunge.so.2 not found") from None
            dll = ctypes.CDLL(name)
        vp, ip = ctypes.c_void_p, ctypes.c_int
        dll.munge_ctx_create.restype = vp
        dll.munge_ctx_create.argtypes = []
        dll.munge_ctx_destroy.restype = None
        dll.munge_ctx_destroy.argtypes = [vp]
        dll.munge_ctx_strerror.restype = ctypes.c_char_p
        dll.munge_ctx_strerror.argtypes = [vp]
        dll.munge_strerror.restype = ctypes.c_char_p
        dll.munge_strerror.argtypes = [ip]
        # munge_ctx_set/get are variadic: only the result type is declared
        dll.munge_ctx_set.restype = ip
        dll.munge_ctx_get.restype = ip
        dll.munge_encode.restype = ip
        dll.munge_encode.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_char_p, ip]
        dll.munge_decode.restype = ip
        dll.munge_decode.argtypes = [
            ctypes.c_char_p,
            vp,
            ctypes.POINTER(vp),
            ctypes.POINTER(ip),
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.POINTER(ctypes.c_uint32),
        ]
        libc = ctypes.CDLL(None)
        libc.free.restype = None
        libc.free.argtypes = [vp]
        self.dll, self.free = dll, libc.free
        self.default_socket = self._default_socket()

    def _default_socket(self) -> str:
        ctx = self.dll.munge_ctx_create()
        if not ctx:
            return ""
        try:
            out = self.ct.c_char_p()
            rc = self.dll.munge_ctx_get(self.ct.c_void_p(ctx), MUNGE_OPT_SOCKET, self.ct.byref(out))
            return out.value.decode() if rc == EMUNGE_SUCCESS and out.value else ""
        finally:
            self.dll.munge_ctx_destroy(ctx)

    def _ctx(self, socket_path: str | None, ttl_s: int | None) -> Any:
        ctx = self.dll.munge_ctx_create()
        if not ctx:
            raise AuthError("munge: cannot create a context (out of memory)", code=EMUNGE_NO_MEMORY)
        c = self.ct.c_void_p(ctx)
        try:
            if socket_path:
                path = self.ct.c_char_p(os.fsencode(socket_path))
                rc = self.dll.munge_ctx_set(c, MUNGE_OPT_SOCKET, path)
                if rc != EMUNGE_SUCCESS:
                    raise _error(rc, self._strerror(c, rc), socket_path)
            if ttl_s is not None:
                rc = self.dll.munge_ctx_set(c, MUNGE_OPT_TTL, self.ct.c_int(int(ttl_s)))
                if rc != EMUNGE_SUCCESS:
                    raise _error(rc, self._strerror(c, rc), socket_path)
        except BaseException:
            self.dll.munge_ctx_destroy(c)
            raise
        return c

    def _strerror(self, ctx: Any, rc: int) -> str:
        msg = self.dll.munge_ctx_strerror(ctx) if ctx is not None else None
        if not msg:
            msg = self.dll.munge_strerror(rc)
        return (msg or b"").decode("utf-8", "replace")

    def encode(self, payload: bytes, socket_path: str | None, ttl_s: int | None) -> str:
        ct = self.ct
        ctx = self._ctx(socket_path, ttl_s)
        try:
            out = ct.c_void_p()
            rc = self.dll.munge_encode(ct.byref(out), ctx, payload, len(payload))
            try:
                if rc != EMUNGE_SUCCESS:
                    raise _error(rc, self._strerror(ctx, rc), socket_path)
                return ct.string_at(out.value).decode("ascii")
            finally:
                if out.value:
                    self.free(out)
        finally:
            self.dll.munge_ctx_destroy(ctx)

    def decode(self, raw: bytes, socket_path: str | None) -> Credential:
        ct = self.ct
        ctx = self._ctx(socket_path, None)
        try:
            buf, n = ct.c_void_p(), ct.c_int(0)
            uid, gid = ct.c_uint32(0), ct.c_uint32(0)
            rc = self.dll.munge_decode(
                raw, ctx, ct.byref(buf), ct.byref(n), ct.byref(uid), ct.byref(gid)
            )
            try:  # on expired/rewound/replayed the payload is allocated too
                payload = ct.string_at(buf.value, n.value) if buf.value else b""
            finally:
                if buf.value:
                    self.free(buf)
            if rc != EMUNGE_SUCCESS:
                raise _error(rc, self._strerror(ctx, rc), socket_path)
            t, ttl = ct.c_long(0), ct.c_int(0)
            self.dll.munge_ctx_get(ctx, MUNGE_OPT_ENCODE_TIME, ct.byref(t))
            self.dll.munge_ctx_get(ctx, MUNGE_OPT_TTL, ct.byref(ttl))
            return Credential(payload, uid.value, gid.value, int(t.value), int(ttl.value))
        finally:
            self.dll.munge_ctx_destroy(ctx)


_lib: _Lib | None = None
_lib_error: str | None = None


def _load_lib() -> _Lib | None:
    """libmunge, loaded on first use (two threads racing here load it twice, harmlessly)."""
    global _lib, _lib_error
    if _lib is None and _lib_error is None:
        try:
            _lib = _Lib()
        except (OSError, AttributeError) as e:
            _lib_error = str(e)
    return _lib


# ---- munge / unmunge programs ---------------------------------------------------------

# subprocess and shutil are imported here, not at the top: the hooks load this module and
# mostly never need them


def _tool(name: str) -> str:
    import shutil

    path = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/usr/local/bin/{name}") if os.access(p, os.X_OK)), None
    )
    if not path:
        raise _unavailable(f"libmunge.so.2 is missing and so is the {name} program")
    return path


def _run(argv: list[str], data: bytes, socket_path: str | None) -> tuple[int, bytes, str]:
    import subprocess

    try:
        p = subprocess.run(
            argv, input=data, capture_output=True, timeout=CLI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise MungeUnavailable(
            f"{os.path.basename(argv[0])} did not answer within {CLI_TIMEOUT_S:g}s",
            hint="check munged on this host",
            code=EMUNGE_SOCKET,
        ) from None
    except OSError as e:
        raise _unavailable(f"cannot run {argv[0]}: {e.strerror or e}") from None
    err = p.stderr.decode("utf-8", "replace").strip()
    err = err.split("Error: ", 1)[-1]  # "unmunge: Error: Invalid credential"
    if not err and p.returncode != EMUNGE_SUCCESS:  # unmunge says nothing on some refusals
        err = _TEXT.get(p.returncode, "")
    return p.returncode, p.stdout, err


#: munge_strerror() texts, for the refusals unmunge reports by exit status only
_TEXT = {
    EMUNGE_CRED_INVALID: "Invalid credential",
    EMUNGE_CRED_EXPIRED: "Expired credential",
    EMUNGE_CRED_REWOUND: "Rewound credential, future ctime",
    EMUNGE_CRED_REPLAYED: "Replayed credential",
    EMUNGE_CRED_UNAUTHORIZED: "Unauthorized credential decode",
}


def _cli_encode(payload: bytes, socket_path: str | None, ttl_s: int | None) -> str:
    argv = [_tool("munge")]
    if socket_path:
        argv += ["--socket", socket_path]
    if ttl_s is not None:
        argv += ["--ttl", str(int(ttl_s))]
    rc, out, err = _run(argv, payload, socket_path)  # payload on stdin
    if rc != EMUNGE_SUCCESS:
        raise _error(rc, err, socket_path)
    return out.decode("ascii").strip()


_CLI_KEYS = "STATUS UID GID ENCODE_TIME TTL LENGTH"


def _cli_decode(raw: bytes, socket_path: str | None) -> Credential:
    argv = [_tool("unmunge"), "--numeric", "--keys", _CLI_KEYS]
    if socket_path:
        argv += ["--socket", socket_path]
    rc, out, err = _run(argv, raw, socket_path)
    if rc != EMUNGE_SUCCESS:
        raise _error(rc, err, socket_path)
    # metadata "KEY:   value" lines, a blank line, then the payload as it was encoded
    head, sep, payload = out.partition(b"\n\n")
    meta: dict[str, str] = {}
    for line in head.decode("ascii", "replace").splitlines():
        k, _, v = line.partition(":")
        meta[k.strip().upper()] = v.strip()
    try:
        length = int(meta["LENGTH"])
        if not sep or len(payload) < length:
            raise ValueError("payload cut short")
        return Credential(
            payload[:length],
            int(meta["UID"]),
            int(meta["GID"]),
            int(meta["ENCODE_TIME"]),
            int(meta["TTL"]),
        )
    except (KeyError, ValueError) as e:
        raise AuthError(
            f"unmunge printed output this module does not understand ({e})", code=EMUNGE_SNAFU
        ) from None


# ---- public ---------------------------------------------------------------------------


def backend_in_use(backend: str = "auto") -> str:
    """``"lib"`` or ``"cli"``: what ``backend`` resolves to here. Raises
    :class:`~slurm_colo.errors.MungeUnavailable` when it is not usable."""
    _check_backend(backend)
    if backend in ("auto", "lib"):
        if _load_lib() is not None:
            return "lib"
        if backend == "lib":
            raise _unavailable(f"cannot load libmunge: {_lib_error}")
    _tool("munge")
    _tool("unmunge")
    return "cli"


def default_socket() -> str:
    """munged's socket as compiled into libmunge ("" when libmunge is missing)."""
    lib = _load_lib()
    return lib.default_socket if lib else ""


def encode(
    payload: bytes,
    socket_path: str | None = None,
    ttl_s: int | None = None,
    *,
    backend: str = "auto",
) -> str:
    """A credential carrying ``payload``, made by munged at ``socket_path`` (None or "":
    libmunge's default). ``ttl_s`` None or 0: munged's default TTL; above munged's maximum
    it is cut down to that."""
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError("munge payload must be bytes")
    if backend_in_use(backend) == "lib":
        assert _lib is not None
        return _lib.encode(bytes(payload), socket_path or None, ttl_s)
    return _cli_encode(bytes(payload), socket_path or None, ttl_s)


def decode(cred: str, socket_path: str | None = None, *, backend: str = "auto") -> Credential:
    """Check ``cred`` with munged at ``socket_path`` and return what it carries.

    Raises :class:`~slurm_colo.errors.CredentialReplayed`, ``CredentialExpired``,
    ``CredentialForeign`` (another key), ``CredentialInvalid`` (malformed),
    ``MungeUnavailable`` (munged not reachable) or another ``AuthError``."""
    raw = _check_credential(cred)
    if backend_in_use(backend) == "lib":
        assert _lib is not None
        return _lib.decode(raw, socket_path or None)
    return _cli_decode(raw, socket_path or None)
