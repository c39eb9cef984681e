"""How many timeline slices the file of ``gpuscope report`` holds whole: a constant of its own
module, so that building the command line (``--max-events``'s default) imports no page code."""

from __future__ import annotations

# The file of ``gpuscope report`` holds every slice while the report has at most this many, and
# otherwise each lane's slices only while they fit, the others as per-pixel buckets.
STATIC_SLICES = 150_000
