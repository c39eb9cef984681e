"""Several processes as one job: ranks, collectives, nodes, and queries over many reports (fleet)."""
