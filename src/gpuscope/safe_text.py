"""Names from a report, made safe for each place they are shown.

A report holds names the profiled program chose (modules, ranges, threads, files, kernels) and a
report may come from anyone, so a name is data: never a terminal code, a spreadsheet formula, Markdown
or HTML markup. Every reporter passes the text it did not write itself through one of these:

- :func:`terminal`: control characters (C0, DEL, C1) and the Unicode controls that reorder or hide
  text are shown escaped (``\\x1b``, ``\\n``, ``\\u202e``); nothing else changes.
- :func:`csv_cell`: control characters escaped as for a terminal, and a text cell that a spreadsheet
  would take for a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return)
  gets a leading ``'``, as OWASP recommends.
- :func:`markdown` and :func:`markdown_code`: inline text with Markdown's and HTML's markup
  characters backslash-escaped; a code span whose fence is longer than any run of backticks inside.
- :func:`html`: HTML-escaped, quotes included.
- :func:`plot`: text for a chart label (matplotlib reads ``$...$`` as math).

And one for the way in: :func:`storable` makes any Python text valid UTF-8 before it is stored.

Standard library only: the capture side (the end-of-run summary) uses it too.
"""

from __future__ import annotations

import html as _html
import re
from typing import Any

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# C0 and C1 controls, DEL, and the format characters that reorder or hide text (bidi overrides and
# isolates, zero-width joiners and marks, the BOM, line and paragraph separators).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Inline markup (emphasis, code, links, images, autolinks, HTML, entities, table cells, strikethrough,
# math on GitHub). Block markup (#, -, +, 1.) only counts at a line's start, which a name never is.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>&|~$])")
_BACKTICKS = re.compile("`+")
# Python text that is not Unicode: bytes of a file name or argument that were not UTF-8 (decoded
# with surrogateescape, U+DC80-U+DCFF) and any other lone surrogate.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: Any) -> str:
    """Return ``text`` as one line for a terminal: control characters shown as escapes."""
    s = text if isinstance(text, str) else str(text)
    return _CONTROL.sub(_escape, s)


def csv_cell(value: Any) -> Any:
    """Return ``value`` for a CSV cell: text with control characters escaped, and a leading ``'`` where a
    spreadsheet would run it as a formula; numbers and None are returned as they are."""
    if not isinstance(value, str):
        return value
    return "'" + terminal(value) if value.startswith(_FORMULA_START) else terminal(value)


def markdown(text: Any) -> str:
    """Return ``text`` as inline Markdown that shows it literally: one line, markup escaped."""
    return _MARKDOWN.sub(r"\\\1", terminal(text))


def markdown_code(text: Any) -> str:
    """Return ``text`` as a Markdown code span (its fence longer than any backtick run inside)."""
    s = terminal(text)
    longest = max((len(m) for m in _BACKTICKS.findall(s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def html(text: Any) -> str:
    """Return ``text`` HTML-escaped (quotes included), control characters shown as escapes."""
    return _html.escape(terminal(text), quote=True)


def plot(text: Any) -> str:
    """Return ``text`` for a chart label: one line, ``$`` not taken for math."""
    return terminal(text).replace("$", r"\$")


def _unsurrogate(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def storable(text: str) -> str:
    """Return ``text`` as valid UTF-8 text: unchanged if it is, else with each byte that was not
    UTF-8 (a name from the operating system, decoded with surrogateescape) written ``\\xe9`` and any
    other lone surrogate ``\\ud800``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(_unsurrogate, text)
    return text
