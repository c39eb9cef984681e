"""Analyses: a report in, tables or findings out; no printing."""

# The reports of ``gpuscope stats``, in order (functions of cuda_summaries.REPORTS). Kept here so
# the command line can list them without importing the analyses.
STATS_REPORTS = (
    "cuda_gpu_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
    "cuda_gpu_sum",
    "cuda_kern_exec_sum",
)
