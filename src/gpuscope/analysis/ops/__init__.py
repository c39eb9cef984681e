"""GPU operations: where each was launched and which ranges enclose it, read in bulk; the CUDA summaries of ``nsys stats``; host syncs."""
