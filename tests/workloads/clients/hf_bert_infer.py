"""Encoder inference with Hugging Face transformers: BERT-base (``BertConfig()`` defaults: 12
layers, d 768, 12 heads; random weights) in bfloat16 under ``torch.inference_mode()``, batch 64 of
128 random token ids with an all-ones attention mask; the model's default attention implementation.
One iteration is one forward: matrix products on the tensor cores plus the elementwise work around
them (bias, GELU, LayerNorm, residual adds) as separate kernels.

Fixes:

- ``compiled``: ``torch.compile(model)``: Inductor fuses the elementwise work around the matrix
  products (fewer passes over the activations, fewer launches);
- ``cuda_graph``: the forward captured once in a CUDA graph (``torch.cuda.CUDAGraph``) on a static
  input, each iteration copies its tokens in and replays it: what the launch-bound finding proposes.
  The all-ones ``attention_mask`` is left out there: the model checks it on the host (a sync, which
  a capture forbids), and all ones means no padding, the same attention;
- ``reduce_overhead``: ``torch.compile(model, mode="reduce-overhead")``, the same through Inductor's
  CUDA graphs, compiled as well (so the findings whose fix is compiling count toward it too);
- ``eager_attention``: ``attn_implementation="eager"``, the implementation that is not the default
  where ``sdpa`` is (recent transformers): attention as separate products and a softmax instead of
  one fused kernel. Expected slower than the default; it measures what the fused kernel is worth,
  and only the attention rule's finding could name a switch between the two.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, capture, main, need  # noqa: E402


def build(variant: str, setup: Setup) -> Step:
    """One forward of ``variant``."""
    transformers = need("transformers")
    dev = setup.device
    batch, seq = setup.pick((64, 128), (2, 16))
    torch.manual_seed(0)
    if setup.quick:
        config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                                         intermediate_size=128)
    else:
        config = transformers.BertConfig()
    kwargs = {"attn_implementation": "eager"} if variant == "eager_attention" else {}
    model = transformers.AutoModel.from_config(config, **kwargs).to(dev, dtype=torch.bfloat16).eval()
    if variant == "compiled":
        model = torch.compile(model)
    elif variant == "reduce_overhead":
        model = torch.compile(model, mode="reduce-overhead")
    batches = itertools.cycle([torch.randint(0, config.vocab_size, (batch, seq), device=dev) for _ in range(4)])
    mask = torch.ones(batch, seq, dtype=torch.long, device=dev)
    if variant == "cuda_graph":
        static = next(batches).clone()

        def forward() -> torch.Tensor:
            with torch.inference_mode():
                return model(input_ids=static).last_hidden_state

        replay = capture(forward)

        def graphed() -> torch.Tensor:
            static.copy_(next(batches))
            return replay()

        return graphed

    def step() -> torch.Tensor:
        with torch.inference_mode():
            return model(input_ids=next(batches), attention_mask=mask).last_hidden_state

    return step


PROGRAM = Program(
    name="hf_bert_infer",
    description="transformers BERT-base inference, batch 64 x 128 tokens, bf16, inference_mode",
    variants=(
        Variant("as_written", "AutoModel.from_config(BertConfig()), default attention", samples=64),
        Variant("compiled", "torch.compile(model)", ("unfused_elementwise",), samples=64),
        Variant("cuda_graph", "the forward captured in a CUDA graph, replayed", ("launch_bound",), samples=64,
                needs_cuda=True),
        Variant("reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound", "unfused_elementwise"),
                samples=64),
        Variant("eager_attention", 'attn_implementation="eager" (the non-default)', ("fused_attention",),
                samples=64),
    ),
    build=build,
    iterations=800,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
