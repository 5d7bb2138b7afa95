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
