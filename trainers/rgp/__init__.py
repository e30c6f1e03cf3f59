"""The ``rgp`` trainer: reparametrized gradient perturbation (Yu et al. 2021) for BERT-family models in PyTorch.

Yu, Zhang, Chen, Yin and Liu 2021, "Large Scale Private Learning via Low-rank Reparametrization"
(ICML), Algorithms 1-2: every weight matrix W of the attention and feed-forward layers and of the
heads is reparametrized as L R + (W - L R).stop_gradient() with gradient carriers L (p x r) and
R (r x d) taken from the historical update; per-example gradients of the carriers only (memory
O(m r d), not O(m d^2)) are clipped, summed and noised, and the noisy carrier gradients are turned
back into an update of W (Corollary 2.1.1). Modules, one job each (this package imports nothing
heavy): ``config`` (options), ``carriers`` (Algorithm 2, random carriers, Eq. 1 and Eq. 3),
``clipping`` (per-example carrier gradients from activations and output gradients, joint clipping),
``privacy`` (the record's fields for this mechanism) and ``trainer`` (one step, on the torch loop
shared with ``edp-sgd`` in :mod:`trainers.torch_common`). It never imports jax, nor another trainer.
"""
