"""Steps: where they are (marks, patterns, windows), how they are counted and tabled, and what profiling cost them (the probe)."""
