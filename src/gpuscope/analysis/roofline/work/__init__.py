"""The work of operators and kernels: FLOPs and bytes from the work model, measured by ncu, or carried
from sampled launches; and how it is handed to the kernels."""
