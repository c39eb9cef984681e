"""CUPTI inside the profiled process: activity records (read in raw), the callback API and what it times."""
