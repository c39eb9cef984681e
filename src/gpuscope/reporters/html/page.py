"""The HTML page: one file with every script, style and datum inline (nothing is fetched).

The page's data is one JSON document in a ``<script type="application/json">`` element, with
``<``, ``>`` and ``&`` written as ``\\u003c``... so that no name in a report can end the element or
become markup; the page's scripts put every name on screen as text (``textContent``, canvas text).
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

ASSETS = ("style.css", "chart.umd.min.js", "format.js", "tables.js", "charts.js", "timeline.js", "app.js")


def asset(name: str) -> str:
    """Return the text of one of the page's files (scripts, style, template)."""
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def script_json(data: Any) -> str:
    """Return ``data`` as JSON that is safe inside an HTML ``<script>`` element."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026") \
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _inline_script(text: str) -> str:
    text = re.sub(r"^//# sourceMappingURL=.*$", "", text, flags=re.M)  # nothing to fetch, even for devtools
    if re.search(r"</script", text, re.I):
        raise ValueError("a page script must not contain </script")
    return text


def render(content: dict[str, Any], title: str, template: str = "page.html",
           scripts: tuple[str, ...] | None = None) -> str:
    """Return the page of ``content`` (see :mod:`.content`) as one HTML document: ``template``
    with the style and ``scripts`` (default: all of :data:`ASSETS`) inline."""
    import html

    names = scripts if scripts is not None else tuple(n for n in ASSETS if n.endswith(".js"))
    parts = {
        "TITLE": html.escape(title),
        "STYLE": asset("style.css"),
        "DATA": script_json(content),
        "SCRIPTS": "\n".join(f"<script>{_inline_script(asset(n))}</script>" for n in names),
    }
    # one pass over the template only: a name in the data that looks like a placeholder stays as it is
    return re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m.group(1)], asset(template))
