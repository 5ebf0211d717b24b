"""What a health check finds: a Problem with a Severity (shared by health and its checks)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """In order of precedence: a model's status is the first severity among its problems."""

    INCOMPLETE = "incomplete"  # a pull was interrupted; pulling again completes it
    BROKEN = "broken"  # corrupt, missing or unsupported: cannot run
    REFUSED = "refused"  # ships code or pickles: mlxd will not run it
    TOO_LARGE = "too_large"  # sound, but its weights do not fit the memory this process has


@dataclass(frozen=True, slots=True)
class Problem:
    severity: Severity
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"severity": self.severity.value, "code": self.code, "message": self.message}


def broken(code: str, message: str) -> Problem:
    return Problem(Severity.BROKEN, code, message)
