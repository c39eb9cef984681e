"""Comparing runs: what changed between two sets of reports, with what confidence, and where."""
