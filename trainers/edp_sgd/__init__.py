"""The ``edp-sgd`` trainer: sgd, dp-sgd and eDP-SGD fine-tuning of BERT-family models in PyTorch.

Dupuy et al. 2021 ("An Efficient DP-Federated Learning Mechanism", Algorithm 1) with honest
accounting (DESIGN section 5), built on the trainer-neutral core: the inject reader
(:mod:`dpaudit.inject_run`), the privacy plan and ledger (:mod:`dpaudit.privacy_plan`), the one
``privacy.json`` record (:mod:`dpaudit.privacy_record`) and the run-directory helpers
(:mod:`dpaudit.train_rundir`). Modules, one job each (this package imports nothing heavy):
``config`` (options), ``data`` (inject rows, tokens, MLM masking), ``model`` (HF model, per-example
losses, layer groups), ``sampling`` (Poisson sampling, micro-batch slots), ``clipping`` (per-example
and per-layer micro-batch clipping, each with its sensitivity), ``noise``, ``privacy`` (the record's
fields for this mechanism, the paper's claim, group privacy), ``distributed`` (torch.distributed),
``checkpoint``, ``hf_export`` and ``trainer`` (the loop that composes them). It never imports jax.
"""
