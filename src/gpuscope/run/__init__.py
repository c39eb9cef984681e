"""A profiling run from start to end: a launched program or a block of this process, its report and its
summary; and the roof micro-benchmarks of ``gpuscope roofline --calibrate``."""
