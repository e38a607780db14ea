"""Text that reaches a terminal: labels, instructions, keys and error messages come from
plugins, records and files, and a control sequence among them (ESC ``[2J``, an OSC title or
hyperlink, a carriage return that overwrites a line) would be run by the terminal instead
of shown. :func:`printable` writes every C0 and C1 control character (and DEL) as a visible
escape, so that nothing is lost and nothing is interpreted."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object, keep: str = "\n\t") -> str:
    """``text`` with its control characters shown as ``\\x1b``-style escapes, except those in ``keep``."""
    return _CONTROL.sub(lambda m: m[0] if m[0] in keep else f"\\x{ord(m[0]):02x}", str(text))


__all__ = ["printable"]
