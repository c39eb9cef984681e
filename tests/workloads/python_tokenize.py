"""Text classification inference whose batches are tokenized in Python inside the loop: 64
sentences of about 100 words, lower-cased, split, and each word looked up in a vocabulary or
broken into word pieces by greedy longest match, then padded to 128 tokens (a few milliseconds of
Python), before a fast model forward (embedding and 2 transformer encoder layers, width 512,
bfloat16). No step marks. Fix: tokenize the corpus once before the loop and copy ready token
batches from pinned memory.
"""

from __future__ import annotations

import random

import torch
from torch import nn

from harness import Program, Setup, Step, Variant, main

SEQ = 128
PAD, UNK, CLS = 0, 1, 2


def make_corpus(n: int, words_per: int, seed: int = 0) -> tuple[list[str], dict[str, int]]:
    """Sentences of made-up words, and a vocabulary of whole words and word pieces ('##piece')."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
    vocab = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS}
    for w in words[:1200]:  # the rest must be split into pieces
        vocab.setdefault(w, len(vocab))
    for w in words:
        for k in range(1, len(w) - 1, 2):
            vocab.setdefault(w[:k], len(vocab))
            vocab.setdefault("##" + w[k:k + 2], len(vocab))
    sentences = [" ".join(rng.choice(words).capitalize() if rng.random() < 0.1 else rng.choice(words)
                          for _ in range(words_per)) + "." for _ in range(n)]
    return sentences, vocab


def word_pieces(word: str, vocab: dict[str, int]) -> list[int]:
    """Greedy longest-match word pieces of one word."""
    ids = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                break
            end -= 1
        else:
            return [UNK]
        start = end
    return ids


def tokenize(sentences: list[str], vocab: dict[str, int]) -> list[list[int]]:
    """Token ids of each sentence: [CLS], the words' pieces, padded or cut to SEQ."""
    batch = []
    for s in sentences:
        ids = [CLS]
        for word in s.lower().replace(".", " ").split():
            if word in vocab:
                ids.append(vocab[word])
            else:
                ids.extend(word_pieces(word, vocab))
        ids = ids[:SEQ] + [PAD] * (SEQ - len(ids))
        batch.append(ids)
    return batch


class Classifier(nn.Module):
    """Embedding, transformer encoder, first token, linear head."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens))[:, 0])


def build(variant: str, setup: Setup) -> Step:
    """One inference iteration of ``variant``."""
    dev = setup.device
    batch, words, d = setup.pick((64, 100, 512), (4, 20, 32))
    sentences, vocab = make_corpus(batch * 16, words)
    torch.manual_seed(0)
    model = Classifier(len(vocab), d, 8 if d >= 512 else 2, 2).to(dev, torch.bfloat16).eval()
    i = 0

    if variant == "pretokenized":
        ready = torch.tensor(tokenize(sentences, vocab)).view(-1, batch, SEQ)
        ready = ready.pin_memory() if setup.cuda else ready

        def step() -> torch.Tensor:
            nonlocal i
            tokens = ready[i % len(ready)].to(dev, non_blocking=True)
            i += 1
            with torch.inference_mode():
                return model(tokens).argmax(1)

        return step

    def step() -> torch.Tensor:
        nonlocal i
        k = (i % 16) * batch
        i += 1
        tokens = torch.tensor(tokenize(sentences[k:k + batch], vocab)).to(dev)
        with torch.inference_mode():
            return model(tokens).argmax(1)

    return step


PROGRAM = Program(
    name="python_tokenize",
    description="text classifier inference, each batch of 64 sentences tokenized in Python in the loop",
    variants=(
        Variant("as_written", "tokenize each batch in the loop", samples=64),
        Variant("pretokenized", "tokenized once before the loop, pinned token batches", ("hot_line",),
                samples=64),
    ),
    build=build,
    iterations=400,
    measure_iterations=100,
    warmup=10,
)

if __name__ == "__main__":
    main(PROGRAM)
