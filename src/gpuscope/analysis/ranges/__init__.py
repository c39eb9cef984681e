"""Ranges: NVTX and annotation ranges, PyTorch modules (layers) and operators, and the GPU work inside each."""
