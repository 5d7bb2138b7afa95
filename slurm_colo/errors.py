"""One error hierarchy for the whole suite.

Every error a user or admin can see derives from :class:`ColoError` and carries a message
that says what is wrong and, where there is one, the command that fixes it.
"""

from __future__ import annotations


class ColoError(Exception):
    """Base class of every slurm-colo error."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (fix: {self.hint})"


class ConfigError(ColoError):
    """The site configuration file is missing, unreadable or invalid."""


class OptionError(ColoError):
    """A user-supplied --colocate / --colocate-class value is invalid."""


class ScoresError(ColoError):
    """A score file is missing, corrupt or of an unknown format."""


class SlurmError(ColoError):
    """Reading Slurm state failed (command missing, timed out, bad output)."""


class AgentError(ColoError):
    """The placement agent could not be reached or answered garbage."""


class ProtocolError(AgentError):
    """A message on the agent socket does not follow the wire protocol."""


class StoreError(ColoError):
    """The history database is unreachable, locked or of the wrong schema."""


class MPSError(ColoError):
    """MPS control failed (binary missing, daemon hung or crashed)."""


class NVMLError(ColoError):
    """The NVML gate failed in a way that cannot be expressed as a 'not available' value."""


class ModelError(ColoError):
    """Training or validating compatibility scores failed."""


class AuthError(AgentError):
    """A message between a node and the agent failed munge authentication.

    ``reason`` is a short stable word for logs and metrics; ``code`` is munge's error
    number (``munge_err_t``) when munge reported the failure, else ``None``.
    """

    reason = "auth"

    def __init__(self, message: str, hint: str | None = None, code: int | None = None) -> None:
        super().__init__(message, hint)
        self.code = code


class MungeUnavailable(AuthError):
    """munged cannot be reached (not running, wrong socket) or munge is not installed."""

    reason = "munge-unavailable"


class CredentialExpired(AuthError):
    """The credential's time-to-live has passed, or it was made in the future (clock skew)."""

    reason = "expired"


class CredentialReplayed(AuthError):
    """The credential was already decoded on this host (munge's replay cache)."""

    reason = "replayed"


class CredentialForeign(AuthError):
    """The credential was made with another munge key: a foreign cluster, or it was altered."""

    reason = "foreign"


class CredentialInvalid(AuthError):
    """The credential or its payload is malformed, or munge refused it for another reason."""

    reason = "invalid"


class Unauthenticated(AuthError):
    """A plain request line arrived where a munge credential is required (TCP)."""

    reason = "unauthenticated"


class WrongCluster(AuthError):
    """A valid credential names another cluster than this one."""

    reason = "wrong-cluster"


class UntrustedSigner(AuthError):
    """A valid credential was made by a user who may not send this message."""

    reason = "untrusted-signer"
