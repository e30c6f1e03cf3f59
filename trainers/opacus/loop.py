"""One Opacus training run as Opacus documents it, optionally hosting canaries through the real gradient path.

``PrivacyEngine(accountant=...).make_private(module, optimizer, data_loader, noise_multiplier, max_grad_norm,
poisson_sampling=True, grad_sample_mode=..., clipping=...)``, then the usual loop (``zero_grad``, forward, the
loss, ``backward``, ``step``), stopped after a fixed number of optimizer updates. What dpaudit adds is only
observation: a pre-hook on the wrapped optimizer's own ``step`` (it runs once per update Opacus actually takes,
never for a skipped micro-step) counts the updates and reads the released noisy gradient on the canary rows
(:mod:`.canary_layer`), multiplied back by the public normalizer Opacus documents for ``loss_reduction="mean"``
(``int(N * sample_rate)``, from public N and q only: a library that divided by anything else shows it). The facts of
what ran (the sampler's rate, the updates counted, the noise multiplier) are read from the objects that ran, for
dpaudit's own accounting beside the library's (:mod:`.privacy`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from dpaudit.trainers.opacus.canary_layer import AuditedModel, CanaryDataset, CanaryLayer

__all__ = ["LibrarySetup", "OpacusRun", "PrivacySettings", "run_opacus"]


@dataclass
class LibrarySetup:
    """What a user's training is made of: the model, its optimizer (over the model's parameters), the training
    loader (rows ``(*inputs, label)``; its ``batch_size`` over the dataset's size is q) and a per-example loss
    (``criterion(output, label)`` with ``reduction="none"``; default cross-entropy)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loader: torch.utils.data.DataLoader  # type: ignore[type-arg]
    criterion: Any = None
    #: What a physical batch of canary rows only feeds the model (:class:`.canary_layer.AuditedModel`'s ``shorten``;
    #: None: the rows as they are).
    canary_inputs: Callable[..., tuple[Any, ...]] | None = None


@dataclass(frozen=True)
class PrivacySettings:
    """The ``make_private`` arguments of the run and its length (optimizer updates)."""

    noise_multiplier: float
    clip_norm: float
    steps: int
    delta: float
    accountant: str = "prv"
    grad_sample_mode: str = "hooks"
    clipping: str = "flat"
    noise_seed: int | None = None
    #: Opacus's ``BatchMemoryManager(max_physical_batch_size=...)``: each logical (Poisson) batch runs as physical
    #: batches whose clipped gradients accumulate; one noisy update per logical batch (None: one physical batch).
    physical_batch: int | None = None


@dataclass
class OpacusRun:
    """What ran, as read from the objects that ran."""

    updates: int
    sample_rate: float
    poisson: bool
    dataset_size: int
    noise_multiplier: float
    clip_norm: float
    history: list[tuple[float, float, int]]
    library_epsilon: float
    library_version: str
    normalizer: float
    losses: list[float] = field(default_factory=list)
    observations: np.ndarray | None = None
    final: np.ndarray | None = None
    model: nn.Module | None = None


@functools.lru_cache(maxsize=256)
def library_epsilon(accountant: str, history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """Opacus's own epsilon for an accountant ``history`` (what ``PrivacyEngine.get_epsilon`` returns: a fresh
    accountant of that kind holding the same history), cached: the runs of one audit share their history, and
    Opacus's PRV and RDP accountants take about a second each."""
    from opacus.accountants import create_accountant

    fresh = create_accountant(mechanism=accountant)
    fresh.history = list(history)
    try:
        return float(fresh.get_epsilon(delta=delta))
    except (MemoryError, ValueError, OverflowError, ArithmeticError):  # e.g. PRV's domain for a tiny sigma
        return math.inf


def _per_example(criterion: Any) -> Any:
    """``criterion`` with ``reduction="none"`` (a torch loss module is switched; a callable is taken as it is)."""
    if criterion is None:
        return nn.CrossEntropyLoss(reduction="none")
    if hasattr(criterion, "reduction"):
        criterion.reduction = "none"
    return criterion


class _AuditedLoss(nn.Module):
    """The run's loss as a criterion module, what Opacus's ghost clipping wraps (``DPLossFastGradientClipping``
    switches ``reduction`` to "none" to read the per-example losses): ``input`` is (the model's output, the canary
    terms, the real-row mask) with canaries, else the output alone."""

    def __init__(self, base: Any, canaries: bool) -> None:
        super().__init__()
        self.base, self.canaries, self.reduction = base, canaries, "mean"

    def forward(self, input: Any, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 - torch's criterion signature
        if self.canaries:
            out, term, real = input
            each = self.base(_output(out), target) * real + term
        else:
            each = self.base(_output(input), target)
        return each if self.reduction == "none" else each.mean() if self.reduction == "mean" else each.sum()


def _output(out: Any) -> Any:
    return out.logits if hasattr(out, "logits") else out


def _empty_batch_gradients(optimizer: Any, *, ghost: bool) -> None:
    """Set what Opacus's optimizer reads after a backward pass over no rows: an empty batch is a real outcome of
    Poisson sampling (probability (1 - q)^N), and DP-SGD's update is then the noise alone. Opacus handles zero
    per-example gradients itself, but a Hugging Face model cannot run a forward pass over zero rows, so none is run:
    the hooks path gets per-example gradients of length 0 (clipped sum 0), the ghost path a zero gradient."""
    for p in optimizer.params:
        if ghost:
            p.grad = torch.zeros_like(p)
        else:
            p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)


def run_opacus(
    setup: LibrarySetup,
    settings: PrivacySettings,
    *,
    gains: np.ndarray | None = None,
    canary_layers: int = 1,
    per_layer_norms: list[float] | None = None,
    batch_size: int | None = None,
) -> OpacusRun:
    """Train ``setup`` with Opacus for ``settings.steps`` updates; with ``gains`` ((m,), 0 for a non-member), host
    m canaries through the real gradient path and return their observations (updates, m) and final values.

    ``per_layer_norms``: with ``clipping="per_layer"``, the clip norm of each of the model's parameter tensors (the
    canary tables get ``settings.clip_norm / sqrt(canary_layers)`` each unless the list already covers them).
    ``batch_size``: the expected batch over the rows trained (canaries included); default: the user's loader's q
    (its batch size over its dataset) times those rows."""
    import opacus
    from opacus import PrivacyEngine

    from dpaudit.trainers.torch_common.noise import keyed_generator
    from dpaudit.training.noise_source import NoiseSource

    seed = NoiseSource.resolve(settings.noise_seed).seed  # the given --noise-seed, or 128 bits of OS entropy
    # full mt19937 states keyed by the whole seed: torch's manual_seed keeps 32 bits, a guessable key
    sampling_rng, noise_rng = keyed_generator(int(seed), 0), keyed_generator(int(seed), 1)
    model, loader = setup.model, setup.loader
    base = loader.dataset
    n_real = len(base)  # type: ignore[arg-type]
    q_user = min(1.0, (loader.batch_size or 1) / n_real)
    layer: CanaryLayer | None = None
    if gains is not None:
        layer = CanaryLayer(gains, layers=canary_layers)
        model = AuditedModel(model, layer, setup.canary_inputs)
        dataset: Any = CanaryDataset(base, len(gains))
        defaults = {k: v for k, v in setup.optimizer.defaults.items() if k != "params"}
        setup.optimizer.add_param_group({**defaults, "params": list(layer.parameters()), "weight_decay": 0.0})
    else:
        dataset = base
    n = len(dataset)
    batch = batch_size if batch_size is not None else max(1, round(q_user * n))
    train_loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch, collate_fn=loader.collate_fn, generator=sampling_rng
    )
    max_grad_norm: Any = settings.clip_norm
    if settings.clipping == "per_layer":
        norms = list(per_layer_norms or [])
        params = [p for p in model.parameters() if p.requires_grad]
        if layer is not None and len(norms) == len(params) - canary_layers:
            norms += [settings.clip_norm / math.sqrt(canary_layers)] * canary_layers
        if len(norms) != len(params):
            raise ValueError(
                f"per-layer clipping needs {len(params)} clip norms (one per parameter), got {len(norms)}."
            )
        max_grad_norm = norms
    model.train()  # Opacus validates a model in training mode
    engine = PrivacyEngine(accountant=settings.accountant)
    ghost = settings.grad_sample_mode == "ghost"
    audited_loss = _AuditedLoss(_per_example(setup.criterion), canaries=layer is not None)
    private = engine.make_private(
        module=model,
        optimizer=setup.optimizer,
        criterion=audited_loss,
        data_loader=train_loader,
        noise_multiplier=settings.noise_multiplier,
        max_grad_norm=max_grad_norm,
        poisson_sampling=True,
        grad_sample_mode=settings.grad_sample_mode,
        clipping=settings.clipping,
        noise_generator=noise_rng,
    )
    if ghost:  # fast gradient (ghost) clipping: Opacus's criterion wrapper runs its two backward passes
        module, optimizer, dp_criterion, dp_loader = private
    else:
        module, optimizer, dp_loader = private
        dp_criterion = None
    sample_rate = float(getattr(dp_loader.batch_sampler, "sample_rate", 1.0 / len(dp_loader)))
    poisson = type(dp_loader.batch_sampler).__name__ == "UniformWithReplacementSampler"
    normalizer = float(int(n * (1.0 / len(dp_loader))))  # Opacus's documented expected_batch_size, from N and q
    seen: list[np.ndarray] = []
    updates = 0

    def observe(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        nonlocal updates
        updates += 1
        if layer is not None:
            seen.append(layer.released() * normalizer)

    hook = optimizer.original_optimizer.register_step_pre_hook(observe)
    audited_loss.reduction = "none"  # the hooks path reads per-example losses itself
    losses: list[float] = []
    module.train()
    if settings.physical_batch is not None:
        from opacus.utils.batch_memory_manager import BatchMemoryManager

        batches: Any = BatchMemoryManager(
            data_loader=dp_loader, max_physical_batch_size=settings.physical_batch, optimizer=optimizer
        )
    else:
        batches = contextlib.nullcontext(dp_loader)
    try:
        with batches as loader_rows:
            while updates < settings.steps:
                for row in loader_rows:
                    if updates >= settings.steps:
                        break
                    optimizer.zero_grad()
                    if len(row[-1]) == 0:  # Poisson sampling drew no row: the update is the noise alone
                        _empty_batch_gradients(optimizer, ghost=ghost)
                        losses.append(0.0)
                        optimizer.step()
                        continue
                    if layer is not None:
                        canary, *inputs, label = row
                        out, term = module(canary, *inputs)
                        output: Any = (out, term, (canary == 0).to(term.dtype))
                    else:
                        *inputs, label = row
                        output = module(*inputs)
                    if dp_criterion is not None:
                        loss = dp_criterion(output, label)
                        loss.backward()
                        losses.append(float(loss.item()))
                    else:
                        loss_each = audited_loss(output, label)
                        loss_each.mean().backward()
                        losses.append(float(loss_each.detach().mean()) if len(loss_each) else 0.0)
                    optimizer.step()
    finally:
        hook.remove()
    history = [(float(s), float(r), int(t)) for s, r, t in engine.accountant.history]
    run = OpacusRun(
        updates=updates,
        sample_rate=sample_rate,
        poisson=poisson,
        dataset_size=n,
        noise_multiplier=float(optimizer.noise_multiplier),
        clip_norm=float(optimizer.max_grad_norm),
        history=history,
        library_epsilon=library_epsilon(settings.accountant, tuple(history), settings.delta),
        library_version=str(opacus.__version__),
        normalizer=normalizer,
        losses=losses,
        model=setup.model,
    )
    if layer is not None:
        run.observations = np.stack(seen) if seen else np.zeros((0, layer.size))
        run.final = layer.values()
    return run
