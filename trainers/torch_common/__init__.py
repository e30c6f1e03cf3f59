"""Torch machinery shared by the torch trainers (``edp-sgd``, ``rgp``); not a trainer itself.

Modules, one job each (this package imports nothing heavy): ``options`` (Config validators),
``data`` (inject rows, tokens, MLM masking), ``model`` (HF model, per-example losses, layer groups),
``sampling`` (Poisson sampling, micro-batch slots), ``noise``, ``distributed`` (torch.distributed),
``checkpoint``, ``hf_export`` and ``loop`` (the training loop a trainer subclasses with its
mechanism). It never imports jax.
"""
