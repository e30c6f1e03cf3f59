"""The torch clipping engines every torch trainer and task may use; not tied to one mechanism.

Modules, one job each (this package imports nothing heavy; import the module you need):
``per_example`` (:class:`~.per_example.PerExampleClipper`: per-example gradients by ``torch.func.vmap``,
each clipped to C; the reference), ``microbatch`` (:class:`~.microbatch.MicrobatchClipper` and
:func:`~.microbatch.layer_clip_norms`: eDP-SGD's per-layer micro-batch clipping, Dupuy et al. 2021) and
``ghost`` (:class:`~.ghost.GhostClipper`: the same clipped sums in one backward pass by ghost norms and
book-keeping, Li et al. 2022, Bu et al. 2023). Each clipper states the sensitivity of the sum it
returns (a :class:`~dpaudit.trainers.torch_common.clipped.Clipped`). It never imports jax.
"""
