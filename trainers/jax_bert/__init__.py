"""The ``jax-bert`` trainer: DP-SGD masked-LM pretraining of BERT in JAX/Flax (Anil et al. 2021).

Modules, each with one job (import them directly; this package imports nothing heavy so that
``dpaudit --help`` and the trainer registry stay fast):

- :mod:`trainers.jax_bert.model`: the Flax BERT masked-LM (architecture and parameter names of
  ``transformers.BertForMaskedLM``), its config and presets, and the per-example / batch MLM losses.
- :mod:`trainers.jax_bert.data`: text -> padded token arrays, and jittable BERT 80/10/10 masking.
- :mod:`dpaudit.training.tokenizer`: the WordPiece tokenizer (digits split one per token), trained on
  ``public.jsonl`` only.
- :mod:`trainers.jax_bert.hf_io`: export to and import from the Hugging Face directory layout.
- ``dp_step``, ``sampling``, ``optimizer``, ``parallel``, ``trainer``: the DP-SGD engine and the loop.
"""
