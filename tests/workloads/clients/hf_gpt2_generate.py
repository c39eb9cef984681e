"""Greedy decoding with Hugging Face transformers: a 6-layer GPT-2 (d 512, 8 heads, random weights
from ``GPT2Config``) in bfloat16 generates 64 new tokens after a 32-token prompt, batch 1, with
``model.generate`` and its default (dynamic) KV cache. One iteration is one ``generate`` call: 64
decoding steps of a few small kernels per layer each, plus generate's own Python per token, so the
host's launches and Python likely set the time, not the GPU. The end-of-text token is switched off
so that every call decodes all 64 tokens.

Fixes, as transformers documents them for faster decoding:

- ``static_compiled``: ``generation_config.cache_implementation = "static"`` and
  ``model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)``: the
  decoding step compiled, and with a cache of fixed shape replayed as CUDA graphs (fewer launches);
- ``static_cache``: ``cache_implementation = "static"`` alone, as a user sets it. Recent transformers
  (generate's automatic compilation, unless ``generation_config.disable_compile``) then compile the
  decoding step by themselves on a GPU, so this may measure like the recipe; where they do not, it
  is the static cache without compiling, which by itself removes no launches. The plain run's
  timing (dynamo's counters) tells which happened;
- ``graphed_decode``: what the launch-bound finding asks for, written by hand: a ``StaticCache``, the
  prompt run once, then one decoding step (forward and greedy pick) captured with
  ``torch.cuda.graph`` and replayed for each new token, its inputs updated in place.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the shared harness, one folder up
from harness import Program, Setup, Step, Variant, main, need  # noqa: E402

NEW_TOKENS = 64


def build(variant: str, setup: Setup) -> Step:
    """One ``generate`` call of ``variant``."""
    transformers = need("transformers")
    dev = setup.device
    layers, d, heads, prompt, new = setup.pick((6, 512, 8, 32, NEW_TOKENS), (2, 64, 2, 8, 4))
    torch.manual_seed(0)
    tiny = {"vocab_size": 1024, "bos_token_id": 1023, "eos_token_id": 1023} if setup.quick else {}
    config = transformers.GPT2Config(n_layer=layers, n_embd=d, n_head=heads, **tiny)
    model = transformers.GPT2LMHeadModel(config).to(dev, dtype=torch.bfloat16).eval()
    model.generation_config.eos_token_id = None  # random weights: decode every token asked for
    model.generation_config.pad_token_id = config.eos_token_id
    if variant in ("static_cache", "static_compiled"):
        model.generation_config.cache_implementation = "static"
    if variant == "static_compiled":
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    input_ids = torch.randint(0, config.vocab_size, (1, prompt), device=dev)
    attention_mask = torch.ones_like(input_ids)
    if variant == "graphed_decode":
        return _graphed_decode(transformers, model, config, input_ids, new)

    def step() -> torch.Tensor:
        return model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=new, do_sample=False)

    return step


def _graphed_decode(transformers: Any, model: Any, config: Any, input_ids: torch.Tensor, new: int) -> Step:
    """Greedy decoding of ``new`` tokens: the prompt eagerly into a static cache, then each token by
    replaying one captured decoding step."""
    dev, prompt = input_ids.device, input_ids.shape[1]
    try:  # transformers 5: the cache's tensors are made at the first update
        cache = transformers.StaticCache(config=config, max_cache_len=prompt + new)
    except TypeError:  # transformers 4
        cache = transformers.StaticCache(config=config, max_batch_size=1, max_cache_len=prompt + new,
                                         device=dev, dtype=torch.bfloat16)
    ids = torch.zeros((1, 1), dtype=torch.long, device=dev)
    pos = torch.zeros((1,), dtype=torch.long, device=dev)
    prompt_pos = torch.arange(prompt, device=dev)

    def prefill() -> torch.Tensor:
        cache.reset()
        out = model(input_ids=input_ids, past_key_values=cache, cache_position=prompt_pos, use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def decode_one() -> torch.Tensor:
        out = model(input_ids=ids, past_key_values=cache, cache_position=pos, position_ids=pos.view(1, 1),
                    use_cache=True)
        return out.logits[:, -1].argmax(-1, keepdim=True)

    with torch.no_grad():
        ids.copy_(prefill())  # makes the cache's tensors before the capture
        pos.fill_(prompt)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                decode_one()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            picked = decode_one()

    def step() -> torch.Tensor:
        with torch.no_grad():
            first = prefill()
            ids.copy_(first)
            pos.fill_(prompt)
            tokens = [first]
            for _ in range(new - 1):
                graph.replay()
                tokens.append(picked.clone())
                ids.copy_(picked)
                pos.add_(1)
            return torch.cat([input_ids, *tokens], dim=1)

    return step


PROGRAM = Program(
    name="hf_gpt2_generate",
    description="transformers GPT-2 (6 layers, d 512) greedy generate of 64 tokens, batch 1, bf16, dynamic cache",
    variants=(
        Variant("as_written", "model.generate, default dynamic cache"),
        Variant("static_compiled", 'static cache + torch.compile(model.forward, mode="reduce-overhead")',
                ("launch_bound",)),
        Variant("static_cache", 'cache_implementation="static" alone', ("launch_bound",)),
        Variant("graphed_decode", "static cache, one decoding step captured in a CUDA graph and replayed per token",
                ("launch_bound",)),
    ),
    build=build,
    iterations=60,
    measure_iterations=10,
    warmup=5,
)

if __name__ == "__main__":
    main(PROGRAM)
