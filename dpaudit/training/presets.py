"""BERT architecture presets shared by every trainer (vocab_size comes from the tokenizer).

Framework-free: a plain table, so that the torch trainers and the JAX trainer build the same
architectures from the same ``--preset`` name without importing one another.

``mini`` is the 4-layer BERT of Dupuy et al. 2021 (hidden 312, 12 heads, intermediate 1200);
``base`` and ``large`` are Devlin et al. 2019; ``tiny`` is for tests.
"""

from __future__ import annotations

#: Architecture presets: number of layers, width, heads and feed-forward width.
PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128},
    "mini": {"num_hidden_layers": 4, "hidden_size": 312, "num_attention_heads": 12, "intermediate_size": 1200},
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
}

#: GPT-2-shaped causal LM presets (``--task clm``), as ``transformers.GPT2Config`` keyword arguments (vocab_size,
#: n_positions beyond the preset's and the special token ids come from the tokenizer and the run). ``tiny`` is for
#: tests; ``mini`` is the benchmark's and the demo's (4 x 256, 4 heads, 128 positions).
CAUSAL_PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
    "mini": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 128},
}
