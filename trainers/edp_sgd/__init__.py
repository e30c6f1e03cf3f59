"""The ``edp-sgd`` trainer: sgd, dp-sgd and eDP-SGD fine-tuning of BERT-family models in PyTorch.

Dupuy et al. 2021 ("An Efficient DP-Federated Learning Mechanism", Algorithm 1) with honest
accounting (docs/trainers.md, "edp-sgd"), built on the trainer-neutral core: the inject reader
(:mod:`dpaudit.inject_dir.reader`), the privacy plan and ledger (:mod:`dpaudit.training.privacy_plan`), the one
``privacy.json`` record (:mod:`dpaudit.claim.record`) and the run-directory helpers
(:mod:`dpaudit.training.train_dir`). Modules, one job each (this package imports nothing heavy): ``config``
(options), ``privacy`` (the record's fields for this mechanism, the paper's claim, group privacy) and
``trainer`` (the aggregation of one step, on the torch loop, data, model, sampling, noise, processes,
checkpoints, Hugging Face export and clipping engines -- per-example, per-layer micro-batch and ghost,
each with its sensitivity, in :mod:`dpaudit.trainers.torch_common.clipping` -- it shares with ``rgp``
in :mod:`dpaudit.trainers.torch_common`). It never imports jax.
"""
