"""A program that leaves a kernel spinning on the GPU when it ends (about ``--seconds`` long): what
the profiler does at the program's end must neither wait for it nor fail."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--seconds", type=float, default=20.0)
args = p.parse_args()
x = torch.zeros(1, device="cuda")
torch.cuda.synchronize()
torch.cuda._sleep(int(args.seconds * 1.9e9))  # cycles at about the H100's and H200's clock
print("left a kernel spinning", flush=True)
