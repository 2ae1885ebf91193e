"""The tool's name in its messages, its error type and exit status, and short
exception text for warnings."""

from __future__ import annotations

PROG = "shardplan_capture"
EXIT_ERROR = 2


class CaptureError(Exception):
    """A user-facing error: which argument is at fault, and why."""

    def __init__(self, arg, message):
        super().__init__(f"{arg}: {message}" if arg else message)


def brief(exc):
    """An exception's type and first line, short enough for a warning."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(exc).__name__}: {text}"
