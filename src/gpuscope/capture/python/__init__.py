"""Recorders of Python and PyTorch calls inside the profiled process: ranges, module hooks, operators, the
``nvtx`` package, the stack sampler, and the post-import hooks that install them."""
