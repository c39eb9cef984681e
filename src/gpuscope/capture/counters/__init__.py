"""Counters sampled from the launcher, beside the program: host and process counters, NVML."""
