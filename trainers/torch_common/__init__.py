"""Torch machinery shared by the torch trainers (``edp-sgd``, ``rgp``); not a trainer itself.

Modules, one job each (this package imports nothing heavy): ``options`` (Config validators),
``config`` (the shared Config fields, their checks and the mode-dependent defaults), ``plugin`` (the
registered trainer object), ``privacy`` (the private run's ``privacy.json`` record), ``clipped``
(what a clipper returns), ``clipping`` (the per-example, micro-batch and ghost clipping engines), ``data`` (inject rows, tokens, MLM masking), ``model`` (HF model, per-example losses, layer groups),
``sampling`` (Poisson sampling, micro-batch slots), ``noise``, ``distributed`` (torch.distributed),
``checkpoint``, ``hf_export`` and ``loop`` (the training loop a trainer subclasses with its
mechanism). It never imports jax.
"""
