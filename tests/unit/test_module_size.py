"""Small modules: no Python file of the package is over 500 lines (a module that grows past that
is split by what its parts do, as torch_hooks.py into backward_ranges.py and own_code.py)."""

from __future__ import annotations

from pathlib import Path

import gpuscope

LIMIT = 500


def test_no_module_is_over_the_limit() -> None:
    root = Path(gpuscope.__file__).parent
    sizes = {str(p.relative_to(root)): sum(1 for _ in p.open(encoding="utf-8")) for p in root.rglob("*.py")}
    assert len(sizes) > 100  # the package was found
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
