"""Through the real gradient path of dpaudit's own dp-sgd step: three planted faults flagged in one run.

The cooperative audit block never passes through the model's per-example gradients, so a step that forgets the
classifier head passes that audit. An independent review planted three such faults in edp-sgd: the head left
unclipped, clipping applied after averaging (the batch's mean gradient clipped to C, then scaled back to a sum), no
noise on the head. Each is flagged here in one run in at least 9 of 10 seeds; the correct step is not.

The canaries are inputs whose per-example gradient the clipper itself computes (``PerExampleClipper``, edp-sgd's
dp-sgd engine: vmap over the model's own autograd) and which lands in the head: canary j (label c, hidden unit k)
feeds the one-hot vector e_k to the head's weight and its loss is ``gain * (W e_k)_c``, linear in the head; its
model loss is multiplied by 0. Its gradient is ``gain`` on ``classifier.weight[c, k]`` alone, so correct clipping
leaves exactly C on its own coordinate. The DP-SGD step around the clipper (Poisson sampling at q, Gaussian noise
of std sigma C on the clipped sum, 4 steps) is the mechanism dp-sgd claims; the audit observes the noisy clipped sum
on each canary's coordinate (:func:`dpaudit.whitebox.gradient_path.analyse_path`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from dpaudit.claim import Claim
from dpaudit.trainers.torch_common.clipped import Clipped
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper
from dpaudit.trainers.torch_common.data import additive_mask
from dpaudit.trainers.torch_common.model import build_model
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE
from dpaudit.whitebox.gradient_path import PathRun, analyse_path
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.layout import CANARY_GAIN, CanaryLayout
from tests.claims import poisson_claim

LABELS, HIDDEN = 8, 64  # the tiny preset: 8 x 64 head coordinates, one canary each
CANARIES = LABELS * HIDDEN
#: The power tests' layout: the first two labels' 128 head coordinates. Every fault here moves a canary's coordinate by
#: far more than C or leaves it without noise, which 128 canaries show at epsilon 1; a quarter of the rows to differentiate.
POWER_CANARIES = 2 * HIDDEN
REAL, LENGTH, STEPS, Q, SIGMA, CLIP, DELTA = 16, 6, 4, 0.5, 4.18, 1.0, 1e-5  # sigma 4.18: epsilon 1 claimed


class HeadUnclipped(PerExampleClipper):
    """The planted fault: the per-example clip factor is computed and applied without the classifier head, whose
    per-example gradients are summed as they are."""

    def clipped_sum(self, batch: dict[str, torch.Tensor]) -> Clipped:
        acc = [torch.zeros_like(p) for p in self.params]
        grads, losses, correct = self.per_example_grads(batch)
        flat = [grads[n] for n in self.names]
        body = [g for n, g in zip(self.names, flat) if not n.startswith("classifier.")]
        norms = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in body]), dim=0
        )
        factor = (self.clip_norm / norms.clamp(min=1e-12)).clamp(max=1.0)
        for n, a, g in zip(self.names, acc, flat):
            a.add_(g.sum(0) if n.startswith("classifier.") else torch.tensordot(factor, g, dims=1))
        zero = torch.zeros((), dtype=torch.float64)
        return Clipped(grads=acc, loss_sum=losses.sum(), correct_sum=zero, units=len(losses), clipped=zero)


class ClippedAfterAveraging(PerExampleClipper):
    """The planted fault: the batch's mean gradient is clipped to C and scaled back to a sum (units x the clipped
    mean), instead of each example's gradient clipped before summing. One example can then move the sum by up to
    units x C."""

    def clipped_sum(self, batch: dict[str, torch.Tensor]) -> Clipped:
        grads, losses, correct = self.per_example_grads(batch)
        units = len(losses)
        means = [grads[n].sum(0) / units for n in self.names]
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in means]))
        factor = (self.clip_norm / norm.clamp(min=1e-12)).clamp(max=1.0)
        zero = torch.zeros((), dtype=torch.float64)
        return Clipped(
            grads=[units * factor * g for g in means],
            loss_sum=losses.sum(),
            correct_sum=zero,
            units=units,
            clipped=zero,
        )


def noise_everywhere(name: str) -> bool:
    """The correct step: Gaussian noise on every trainable tensor's clipped sum."""
    return True


def head_not_noised(name: str) -> bool:
    """The planted fault: no noise on the classifier head (its clipped sum released as it is)."""
    return not name.startswith("classifier.")


def _loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["mask4"]).logits
    real = (batch["gain"] == 0).to(logits.dtype)
    ce = F.cross_entropy(logits, batch["labels"], reduction="none") * real
    # The canary's head input e_k (one_hot checks its bounds with .item(), which vmap refuses).
    hidden = (batch["unit"][:, None] == torch.arange(HIDDEN)).to(logits.dtype)
    # The head's weight alone (not its bias, which the canaries of one label would share): canary j's whole
    # gradient is on its own coordinate, so correct clipping leaves exactly C there.
    head = F.linear(hidden, model.classifier.weight)
    term = batch["gain"] * head.gather(1, batch["target"][:, None])[:, 0]
    return ce + term, torch.zeros_like(ce)


def _run(
    clipper_cls: type, member: np.ndarray, seed: int, noised: Callable[[str], bool] = noise_everywhere
) -> tuple[np.ndarray, np.ndarray]:
    """T DP-SGD steps around ``clipper_cls`` with the canaries (``member.size`` of them: canary j on head coordinate
    (j // HIDDEN, j % HIDDEN)), noise on the tensors ``noised`` names; (observations (T, m), final (m,))."""
    canaries = member.size
    model = build_model(
        "classify", preset="tiny", vocab_size=60, max_length=LENGTH, label_names=[str(i) for i in range(LABELS)], seed=0
    )
    rng = torch.Generator().manual_seed(seed)
    n = REAL + canaries
    ids = torch.randint(5, 60, (n, LENGTH), generator=rng)
    rows = {
        "input_ids": ids,
        "mask4": additive_mask(torch.ones(n, LENGTH, dtype=torch.long)),
        "labels": torch.randint(0, LABELS, (n,), generator=rng),
        "gain": torch.cat(
            [torch.zeros(REAL), torch.as_tensor(np.where(member, CANARY_GAIN, 0.0), dtype=torch.float32)]
        ),
        "unit": torch.cat([torch.zeros(REAL, dtype=torch.long), torch.arange(canaries) % HIDDEN]),
        "target": torch.cat([torch.zeros(REAL, dtype=torch.long), torch.arange(canaries) // HIDDEN]),
    }
    clipper = clipper_cls(model, _loss, clip_norm=CLIP, physical_batch=n)
    coords = (rows["target"][REAL:], rows["unit"][REAL:])
    seen = []
    for _ in range(STEPS):
        take = torch.rand(n, generator=rng) < Q
        clipped = clipper.clipped_sum({k: v[take] for k, v in rows.items()})
        noise = [torch.randn(g.shape, generator=rng) * SIGMA * CLIP for g in clipped.grads]
        noisy = [g + z if noised(name) else g for name, g, z in zip(clipper.names, clipped.grads, noise)]
        weight = dict(zip(clipper.names, noisy))["classifier.weight"]
        seen.append(weight[coords].double().numpy().copy())
        with torch.no_grad():
            for p, g in zip(clipper.params, noisy):
                p.sub_(0.01 * g / (Q * n))
    final = dict(zip(clipper.names, clipper.params))["classifier.weight"].detach()[coords].double().numpy()
    return np.stack(seen), final


def _claim() -> Claim:
    return poisson_claim(
        Q, STEPS, SIGMA, delta=DELTA, clip_norm=CLIP, source="stated", accountant="pld", sampling="poisson"
    )


def _flagged(
    clipper: type, seed: int, canaries: int = CANARIES, noised: Callable[[str], bool] = noise_everywhere
) -> bool:
    claim = _claim()
    member = np.random.default_rng(seed).integers(0, 2, canaries).astype(bool)
    observations, final = _run(clipper, member, seed=seed, noised=noised)
    evidence = RunEvidence(
        layout=CanaryLayout(member=member, unit=UNIT_EXAMPLE), claim=claim, observations=observations, final=final
    )
    run = PathRun(evidence=evidence, ran=claim, record=None)  # type: ignore[arg-type]  # no privacy.json here
    return analyse_path([run], full=False, min_scale=1.0).alarm


def test_a_classifier_head_left_unclipped_is_flagged_in_one_run_through_the_gradient_path():
    flags = [_flagged(HeadUnclipped, seed, POWER_CANARIES) for seed in range(10)]
    assert sum(flags) >= 9, flags


def test_clipping_after_averaging_is_flagged_in_one_run_through_the_gradient_path():
    flags = [_flagged(ClippedAfterAveraging, seed, POWER_CANARIES) for seed in range(10)]
    assert sum(flags) >= 9, flags


def test_no_noise_on_the_head_is_flagged_in_one_run_through_the_gradient_path():
    flags = [_flagged(PerExampleClipper, seed, POWER_CANARIES, noised=head_not_noised) for seed in range(10)]
    assert sum(flags) >= 9, flags


def test_the_correct_dp_sgd_step_is_not_flagged_through_the_gradient_path():
    assert not any(
        _flagged(PerExampleClipper, seed, canaries) for seed, canaries in ((0, CANARIES), (1, POWER_CANARIES))
    )
