"""The ``edp-sgd`` trainer: sgd, dp-sgd and eDP-SGD fine-tuning of BERT-family models in PyTorch.

Dupuy et al. 2021 ("An Efficient DP-Federated Learning Mechanism", Algorithm 1) with honest
accounting, built on the trainer-neutral core (inject reader, privacy plan and record, run directory) (DESIGN section 5). Modules, one job each (this package imports nothing heavy):
``config`` (options), ``data`` (inject rows, tokens, MLM masking), ``model`` (HF model, per-example
losses, layer groups), ``sampling`` (Poisson sampling, micro-batch slots), ``clipping`` (per-example
and per-layer micro-batch clipping, each with its sensitivity), ``noise``, ``privacy`` (privacy.json
through the core's PrivacyRecord, the paper's claim; the plan and ledger are the core's), ``distributed`` (torch.distributed), ``checkpoint``, ``hf_export`` and ``trainer``
(the loop that composes them). It never imports jax.
"""
