"""A tiny causal LM in dpaudit's own layout (docs/scoring.md, convention 1), for tests written before the clm trainer.

:func:`build_tiny_causal` trains the project's WordPiece tokenizer on the given texts, builds a 2-layer
``GPT2LMHeadModel`` (``bos`` = ``[CLS]``, ``eos`` = ``[SEP]``, ``pad`` = ``[PAD]``, tied embeddings) and, with
``steps > 0``, fits it non-privately with plain torch Adam on ``[CLS] text [SEP]`` (loss on every token
after the first), then writes the Hugging Face directory with the trainers' own ``save_hf``. Torch and
transformers are imported inside the function: importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: GPT2Config kwargs of the tiny shape (the clm trainer's ``tiny`` preset has the same numbers).
TINY_CAUSAL = dict(n_layer=2, n_embd=64, n_head=2, n_positions=64)


def build_tiny_causal(
    path: Path,
    texts: Sequence[str],
    *,
    steps: int = 0,
    seed: int = 0,
    vocab_size: int = 200,
    learning_rate: float = 1e-2,
) -> Path:
    """Write a tiny GPT-2 causal LM (tokenizer learned from ``texts``) to ``path``; returns ``path``.

    ``steps`` full-batch Adam steps on all ``texts`` (0: random weights, seeded by ``seed``).
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.training.tokenizer import special_token_ids, train_wordpiece

    tokenizer = train_wordpiece(texts, vocab_size=vocab_size, min_frequency=1)
    ids = special_token_ids(tokenizer)
    config = GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=True,
        **TINY_CAUSAL,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    if steps > 0:
        encodings = [e.ids[: config.n_positions] for e in tokenizer.encode_batch(list(texts))]
        width = max(len(e) for e in encodings)
        input_ids = torch.tensor([e + [ids["pad"]] * (width - len(e)) for e in encodings])
        mask = torch.tensor([[1] * len(e) + [0] * (width - len(e)) for e in encodings])
        labels = input_ids.masked_fill(mask == 0, -100)  # HF shifts: every token after the first is scored
        optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
        model.train()
        for _ in range(steps):
            optimizer.zero_grad()
            model(input_ids=input_ids, attention_mask=mask, labels=labels).loss.backward()
            optimizer.step()
    model.eval()
    save_hf(Path(path), model, tokenizer)
    return Path(path)
