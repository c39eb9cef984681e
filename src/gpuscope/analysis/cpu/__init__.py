"""The CPU side: sampled stacks as hot functions, lines and threads."""
