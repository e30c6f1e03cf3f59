"""BERT architecture presets shared by every trainer (vocab_size comes from the tokenizer).

Framework-free: a plain table, so that the torch trainers and the JAX trainer build the same
architectures from the same ``--preset`` name without importing one another.

``mini`` is the 4-layer BERT of Dupuy et al. 2021 (hidden 312, 12 heads, intermediate 1200);
``base`` and ``large`` are Devlin et al. 2019 (``bert-base`` names ``base`` as people call it); ``tiny`` is for
tests.

Causal LMs (``--task clm``) come in two families: GPT-2 (Radford et al. 2019; :data:`CAUSAL_PRESETS`, ``gpt2-small``
is GPT-2's own 124M shape) and Llama-style (Touvron et al. 2023: RMSNorm, rotary positions, SwiGLU;
:data:`LLAMA_PRESETS`, ``llama-100m`` is 12 x 768 with a tied output layer, ~110M parameters at a 32,000-token
vocabulary, the size of the small models people pretrain and fine-tune; ``llama-tiny`` is for tests).
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
PRESETS["bert-base"] = PRESETS["base"]

#: GPT-2-shaped causal LM presets (``--task clm``), as ``transformers.GPT2Config`` keyword arguments (vocab_size,
#: n_positions beyond the preset's and the special token ids come from the tokenizer and the run). ``tiny`` is for
#: tests; ``mini`` is the benchmark's and the demo's (4 x 256, 4 heads, 128 positions).
CAUSAL_PRESETS: dict[str, dict[str, int]] = {
    "tiny": {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 128},
    "mini": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 128},
    "gpt2-small": {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_positions": 1024},
}

#: Llama-style causal LM presets (``--task clm``), as ``transformers.LlamaConfig`` keyword arguments (vocab_size and
#: the special token ids come from the tokenizer; positions are rotary, so no table of them).
LLAMA_PRESETS: dict[str, dict[str, int]] = {
    "llama-tiny": {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 172,
        "max_position_embeddings": 128,
    },
    "llama-100m": {
        "num_hidden_layers": 12,
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_key_value_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 1024,
    },
}

#: Every ``--task clm`` preset name.
CAUSAL_PRESET_NAMES: tuple[str, ...] = (*CAUSAL_PRESETS, *LLAMA_PRESETS)
