"""Small CPU training loops that time themselves, for the cost of the CPU-side collectors.

    python bench/workloads/cpu_train.py sgd4|adam8|cnn|infer OUT_JSON

- ``sgd4``: 4 x (Linear(128) + ReLU), batch 32, SGD, 1000 steps (about 80 operators a step);
- ``adam8``: 8 x (Linear(256) + ReLU), batch 32, Adam, 150 steps (as a new user would write it);
- ``cnn``: two 3x3 convolutions and a linear head on 16 x 3 x 32 x 32 batches from a DataLoader over a
  TensorDataset, SGD with momentum, 100 steps;
- ``infer``: inference, no optimizer: a 2-layer transformer encoder (d 64, 4 heads) over 8 x 32 token
  embeddings, 2000 batches, the whole loop inside one ``torch.inference_mode()`` as inference scripts
  often write it (about 60 operators a batch);
- ``hfgen``: Hugging Face ``generate`` (needs ``transformers``): a GPT-2 of 6 layers, d 64, random
  weights, 64 new tokens after 32, greedy, 20 calls inside one ``torch.inference_mode()`` (about 80
  module calls and 150 small operators per token).

One thread for PyTorch, so that the loop's time is the operators' and the Python's, not the
scheduling of PyTorch's thread pool on a shared machine. Writes ``total_s`` (from the start of the
process, to the end of the loop: the interpreter's start-up, gpuscope's agent where profiled, and
``import torch`` included),
``loop_s`` (the training loop), ``total_cpu_s`` and ``loop_cpu_s`` (the process's CPU time, all its
threads, over the same spans: less sensitive to other programs on a shared machine), ``mean_step_s`` and ``median_step_s`` (steps after the first 10).
"""

import json
import statistics
import sys
import time

import os  # noqa: E402


def _since_start() -> float:
    """Seconds since this process started (/proc: interpreter start-up and, when profiled, gpuscope's
    agent included), at the kernel clock tick's resolution."""
    with open("/proc/self/stat") as fh:
        start_ticks = int(fh.read().rpartition(")")[2].split()[19])
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


T0 = time.perf_counter() - _since_start()
C0 = 0.0  # process CPU time counts from the process's start

import torch  # noqa: E402
from torch import nn  # noqa: E402


def sgd4() -> tuple[nn.Module, torch.optim.Optimizer, list]:
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(128, 128), nn.ReLU())])
    x = torch.randn(32, 128)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3), [(x, None)] * 1000


def adam8() -> tuple[nn.Module, torch.optim.Optimizer, list]:
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(256, 256), nn.ReLU())])
    x = torch.randn(32, 256)
    return model, torch.optim.Adam(model.parameters(), lr=1e-3), [(x, None)] * 150


def cnn() -> tuple[nn.Module, torch.optim.Optimizer, object]:
    from torch.utils.data import DataLoader, TensorDataset

    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(32 * 16, 10))
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(16 * 100, 3, 32, 32, generator=g), torch.randint(0, 10, (16 * 100,), generator=g))
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), DataLoader(data, batch_size=16)


def infer() -> tuple[nn.Module, None, list]:
    layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), nn.Linear(64, 10)).eval()
    return model, None, [(torch.randn(8, 32, 64), None)] * 2000


def hfgen() -> tuple[object, None, list]:
    import transformers

    config = transformers.GPT2Config(n_layer=6, n_embd=64, n_head=2, vocab_size=1024, bos_token_id=1023,
                                     eos_token_id=1023)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None  # every call decodes all its tokens

    def call(x: torch.Tensor) -> torch.Tensor:
        return model.generate(x, max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)

    return call, None, [(torch.randint(0, 1000, (1, 32)), None)] * 20


def main() -> None:
    kind, out = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, opt, batches = {"sgd4": sgd4, "adam8": adam8, "cnn": cnn, "infer": infer, "hfgen": hfgen}[kind]()
    steps = []
    start = last = time.perf_counter()
    cpu_start = time.process_time()
    if opt is None:  # inference: the whole loop inside one guard
        with torch.inference_mode():
            for x, _ in batches:
                model(x).argmax(-1)  # hfgen: the generated tokens
                now = time.perf_counter()
                steps.append(now - last)
                last = now
    for x, y in batches if opt is not None else ():
        opt.zero_grad()
        out_ = model(x)
        loss = nn.functional.cross_entropy(out_, y) if y is not None else out_.square().mean()
        loss.backward()
        opt.step()
        now = time.perf_counter()
        steps.append(now - last)
        last = now
    cpu_end = time.process_time()
    rest = steps[10:]
    json.dump({"total_s": last - T0, "loop_s": last - start, "total_cpu_s": cpu_end - C0,
               "loop_cpu_s": cpu_end - cpu_start, "mean_step_s": statistics.fmean(rest),
               "median_step_s": statistics.median(rest), "steps": len(steps)}, open(out, "w"))


if __name__ == "__main__":
    main()
