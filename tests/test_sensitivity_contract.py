"""The sensitivity contract, measured: one example moves a trainer's clipped sum by at most its claim.

One example's contribution is a function of that example and public values only (docs/privacy.md, "One example's contribution"),
so adding, removing or duplicating one row moves the clipped sum by
at most the clipper's own ``sensitivity`` (C for per-example clipping, 2C for micro-batch units).
Anything drawn per batch (MLM masks keyed by batch position or file index, dropout) breaks this
silently: the accountant still assumes C. So every registered trainer, task and clipping mode is
driven here the way its step drives it (the trainer's own batch building and masking, its own jitted
or torch clipped sum, noise off), on a dataset D of 10 rows and its neighbours (a row inserted in the
middle, the middle row removed, a row duplicated beside itself: rows after the change shift index
and batch position), every row sampled, and a clip norm so small that every unit is clipped (so
the bound is tight). Before masks were keyed by content, this measured e.g. 2.6-5.3C for the torch
MLM trainers and 3-4C for jax-bert (whose masks were keyed by the row's index in the file).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from dpaudit.training.api import available_trainers, load_trainer

CLIP = 1e-5  # far below every per-example gradient norm of these tiny models: every unit is clipped
BASE = list(range(10))
X, MIDDLE = 10, 5  # the added row; the removed one
NEIGHBOURS = {
    "add": BASE[:MIDDLE] + [X] + BASE[MIDDLE:],
    "remove": BASE[:MIDDLE] + BASE[MIDDLE + 1 :],
    "duplicate": BASE[:MIDDLE] + [MIDDLE - 1] + BASE[MIDDLE:],
}

#: (trainer, task, settings) of every mode whose clipped sum carries a sensitivity claim.
CASES = [
    ("jax-bert", "mlm", {"clip_engine": "ghost"}),
    ("jax-bert", "mlm", {"clip_engine": "vmap"}),
    *[
        ("edp-sgd", task, settings)
        for task in ("classify", "mlm", "clm")
        for settings in (
            {"mode": "dp-sgd", "clip_engine": "ghost"},
            {"mode": "dp-sgd", "clip_engine": "vmap"},
            {"mode": "edp-sgd", "clip_engine": "ghost"},
            {"mode": "edp-sgd", "clip_engine": "vmap"},
        )
    ],
    *[  # LoRA adapters (peft) over the frozen model: only they (and a classifier's head) are clipped
        ("edp-sgd", task, {"peft": "lora", "mode": mode, "clip_engine": "ghost"})
        for task in ("classify", "mlm", "clm")
        for mode in ("dp-sgd", "edp-sgd")
    ],
    *[  # ... and with the token embeddings trained in full beside them, tied to the output layer (one tensor, two uses)
        ("edp-sgd", task, {"peft": "lora", "mode": mode, "clip_engine": "ghost", "lora_modules_to_save": saved})
        for task, saved in (("mlm", "word_embeddings"), ("clm", "wte,wpe"))
        for mode in ("dp-sgd", "edp-sgd")
    ],
    *[  # --mask-draws: an example's K maskings are K rows of one clipping unit (their mean is what is clipped)
        ("edp-sgd", "mlm", {**settings, "mask_draws": 3})
        for settings in (
            {"mode": "dp-sgd", "clip_engine": "ghost"},
            {"mode": "dp-sgd", "clip_engine": "vmap"},
            {"mode": "edp-sgd", "clip_engine": "ghost"},
            {"mode": "edp-sgd", "clip_engine": "vmap"},
            {"peft": "lora", "mode": "dp-sgd", "clip_engine": "ghost", "lora_modules_to_save": "word_embeddings"},
        )
    ],
    ("rgp", "classify", {}),
    ("rgp", "mlm", {}),
    ("rgp", "clm", {}),  # GPT-2: the causal loss reads only the example's own tokens
    ("opacus", "classify", {}),  # Opacus's own per-example hooks and flat clipping
    # JAX Privacy's split_and_pad_global_batch and clipped_grad over padded minibatches of 4 rows (--physical-batch 4:
    # padding and accumulation; the default, one padded minibatch of the expected batch, is the same code and
    # another compile)
    ("jax-privacy", "mlm", {"physical_batch": "4"}),
]


def test_every_registered_trainer_is_covered():
    """A newly registered trainer must add its driver and cases here before it ships."""
    assert set(available_trainers()) <= {name for name, _, _ in CASES}


def _jax_sums(data_dir: Path, out: Path, task: str, settings: dict) -> tuple[float, dict[str, np.ndarray]]:
    """jax-bert: the run's own host batch building and masking (``_Plugin._chunks``) and its compiled
    step's clipped-sum accumulation (the engine's jitted ``_accumulate``, before the noise)."""
    import jax
    import jax.numpy as jnp

    from dpaudit.trainers.jax_bert.data import content_keys
    from dpaudit.trainers.jax_bert.trainer import _Plugin

    config = load_trainer("jax-bert").tiny_config(clip_norm=CLIP, noise_seed=3, data_parallel=False, **settings)
    run = _Plugin(data_dir, out, config, seed=5)
    run._setup()
    run._capacity = {}  # set where the loop starts
    engine = run.fns.step
    base = dict(run.train_enc)
    sums = {}
    for name, rows in {"S": BASE, **NEIGHBOURS}.items():
        enc = {key: value[rows] for key, value in base.items()}  # the neighbouring dataset's rows ...
        # ... whose mask keys are computed afresh from those rows (a key tied to the row index would move here)
        enc["content_key"] = content_keys(enc["input_ids"], enc["attention_mask"])
        run.train_enc = enc
        acc, stats = engine._zeros(run.params), engine.zero_stats()
        for batch, mask in run._chunks(0, np.arange(len(rows))):
            # C as the step passes it (a traced scalar)
            acc, stats = engine._accumulate(run.params, acc, stats, batch, mask, *engine._clip_args)
        assert float(stats.n_clipped) == len(rows)  # every example clipped: the bound is tight
        sums[name] = np.asarray(jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(acc)]), np.float64)
    return float(engine.sensitivity), sums


class _NoNoise:
    """The run's privacy plan with sigma 0 at every step (the clipped sum alone reaches the all-reduce)."""

    def __init__(self, plan) -> None:
        self._plan = plan

    def __getattr__(self, name: str):
        return getattr(self._plan, name)

    def sigma_at(self, step: int) -> float:
        return 0.0


def _torch_sums(
    data_dir: Path, out: Path, name: str, task: str, settings: dict, monkeypatch
) -> tuple[float, dict[str, np.ndarray]]:
    """edp-sgd / rgp: the run's own ``aggregate`` (batch building, masking, clipping), its clipped sum
    captured where the trainer hands it to ``noised_total`` (noise off)."""
    import importlib

    import torch

    from dpaudit.trainers.torch_common import data as data_mod
    from dpaudit.trainers.torch_common.sampling import example_slots

    trainer = load_trainer(name)
    module = importlib.import_module(type(trainer).__module__)
    extra = {"micro_batches": 8} if settings.get("mode") == "edp-sgd" else {}
    config = trainer.tiny_config(task=task, clip_norm=CLIP, noise_seed=3, **settings, **extra)
    run = trainer.Plugin(data_dir, out, config, seed=5)
    run._setup()
    run.plan = _NoNoise(run.plan)
    captured = []
    real = module.noised_total

    def capture(grad_sum, step_noise, stats, **kwargs):
        captured.append((torch.cat([g.detach().double().flatten() for g in grad_sum]).numpy().copy(), stats))
        return real(grad_sum, step_noise, stats, **kwargs)

    monkeypatch.setattr(module, "noised_total", capture)
    base_enc, base_labels, base_slots = run.encoded["train"], run.labels.get("train"), getattr(run, "slots", None)
    sums = {}
    for variant, rows in {"S": BASE, **NEIGHBOURS}.items():
        idx = torch.as_tensor(rows)
        fields = {f.name: getattr(base_enc, f.name)[idx] for f in dataclasses.fields(base_enc)}  # the neighbouring rows
        # Per-row keys computed afresh from the neighbour's own rows (a key tied to the row index would move here).
        fields["content"] = data_mod.content_hashes(fields["input_ids"], fields["lengths"])
        run.encoded["train"] = type(base_enc)(**fields)
        if base_labels is not None:
            run.labels["train"] = base_labels[idx]
        if base_slots is not None:  # each example's micro-batch is a hash of its own content
            texts = [run.data.train.texts[i] for i in rows]
            labels = None if run.data.train.labels is None else [run.data.train.labels[i] for i in rows]
            run.slots = example_slots(texts, labels, run.config.micro_batches, salt=run.seed)
            assert np.array_equal(run.slots, base_slots[np.asarray(rows)])
        captured.clear()
        run.aggregate(0, np.arange(len(rows)))
        ((total, stats),) = captured
        _, _, units, clipped = stats
        assert int(clipped) == int(units)  # every unit clipped: the bound is tight
        sums[variant] = total
    return float(run.clipper.sensitivity), sums


def _opacus_sums(data_dir: Path, task: str) -> tuple[float, dict[str, np.ndarray]]:
    """opacus: the trainer's model and rows, Opacus's own GradSampleModule hooks and its optimizer's
    ``clip_and_accumulate`` (flat clipping to C; the noise is added after it)."""
    import torch
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    from dpaudit.trainers.opacus.trainer import _inject_setup

    trainer = load_trainer("opacus")
    built = _inject_setup(data_dir, trainer.tiny_config(clip_norm=CLIP, noise_seed=3), seed=5)
    model = GradSampleModule(built.setup.model.train())
    optimizer = DPOptimizer(built.setup.optimizer, noise_multiplier=0.0, max_grad_norm=CLIP, expected_batch_size=10)
    rows = built.setup.loader.dataset
    sums = {}
    for variant, idx in {"S": BASE, **NEIGHBOURS}.items():
        ids, mask, labels = (t[torch.as_tensor(idx)] for t in rows.tensors)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(ids, mask).logits, labels)
        loss.backward()
        optimizer.clip_and_accumulate()
        sums[variant] = torch.cat([p.summed_grad.detach().double().flatten() for p in optimizer.params]).numpy()
    return CLIP, sums


def _jax_privacy_sums(data_dir: Path, task: str, settings: dict) -> tuple[float, dict[str, np.ndarray]]:
    """jax-privacy: the trainer's own rows (its tokenizer and content-keyed MLM masking, :func:`_masked_rows`, run
    afresh on each neighbouring dataset's texts) and its step's clipped sum (:func:`clipped_batch_sum`: JAX Privacy's
    ``split_and_pad_global_batch`` and ``clipped_grad``, jitted once per loss and clip norm; the privatizer's noise
    comes after it)."""
    import jax
    import jax.numpy as jnp

    from dpaudit.inject_dir.reader import TRAIN
    from dpaudit.trainers.jax_bert.trainer import load_inject_dir
    from dpaudit.trainers.jax_privacy.loop import _clipped_sum, clipped_batch_sum
    from dpaudit.trainers.jax_privacy.trainer import _inject_setup, _masked_rows

    config = load_trainer("jax-privacy").tiny_config(clip_norm=CLIP, noise_seed=3)
    built = _inject_setup(data_dir, config, seed=5)
    texts = list(load_inject_dir(data_dir).split(TRAIN).texts)
    params = built.setup.params
    clipped_sum = _clipped_sum(built.setup.loss, CLIP)
    zeros = jax.tree.map(jnp.zeros_like, params)
    sums = {}
    for variant, rows in {"S": BASE, **NEIGHBOURS}.items():
        data = _masked_rows([texts[i] for i in rows], built.tokenizer, built.bert_config, config, seed=5)
        # every row predicts a token: its gradient is nonzero, so clipped to CLIP (the bound is tight)
        assert np.all(data["masked_weights"].sum(axis=1) > 0)
        total, _ = clipped_batch_sum(
            clipped_sum, params, data, np.arange(len(rows)), int(settings["physical_batch"]), zeros
        )
        sums[variant] = np.asarray(jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(total)]), np.float64)
    return float(config.clip_norm), sums  # clipped_grad's bound on one example: its l2_clip_norm


@pytest.mark.parametrize(
    ("name", "task", "settings"),
    CASES,
    ids=[f"{n}-{t}-{'-'.join(map(str, s.values())) or 'default'}" for n, t, s in CASES],
)
def test_one_example_moves_the_clipped_sum_by_at_most_the_claimed_sensitivity(
    name, task, settings, data_dir, tmp_path, monkeypatch
):
    if name == "jax-bert":
        sensitivity, sums = _jax_sums(data_dir, tmp_path / "out", task, settings)
    elif name == "opacus":
        sensitivity, sums = _opacus_sums(data_dir, task)
    elif name == "jax-privacy":
        sensitivity, sums = _jax_privacy_sums(data_dir, task, settings)
    else:
        sensitivity, sums = _torch_sums(data_dir, tmp_path / "out", name, task, settings, monkeypatch)
    ratios = {variant: float(np.linalg.norm(sums[variant] - sums["S"])) / CLIP for variant in NEIGHBOURS}
    print(
        f"\n{name} {task} {settings}: sensitivity {sensitivity / CLIP:g}C, moved by "
        + ", ".join(f"{v} {r:.3f}C" for v, r in ratios.items())
    )
    assert all(r > 1e-3 for r in ratios.values()), ratios  # the changed row did reach the sum
    for variant, ratio in ratios.items():
        assert ratio * CLIP <= sensitivity * (1 + 1e-4), (
            f"{variant}: moved by {ratio:.3f}C > claimed {sensitivity / CLIP:g}C"
        )


# -- the rule at the masking functions themselves ------------------------------------------------


def _torch_mask(ids, lengths, seed=7):
    import torch

    from dpaudit.trainers.torch_common.data import mask_tokens

    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    return mask_tokens(
        ids * mask,
        mask,
        generator=torch.Generator().manual_seed(seed),
        mask_id=4,
        vocab_size=100,
        special_ids=[0, 1, 2, 3, 4],
        mask_prob=0.3,
        n_predictions=6,
    )


def test_torch_mask_of_a_row_ignores_its_position_the_other_rows_and_the_padding_width():
    import torch

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (6, 20), generator=gen)
    lengths = torch.tensor([12, 7, 20, 9, 12, 5])
    alone = _torch_mask(ids[1:2, :7], lengths[1:2])  # row 1 alone, padded to its own length
    for order in ([1, 0, 2], [3, 4, 5, 1], [2, 1, 1]):  # other rows, other positions, wider padding, a duplicate
        out = _torch_mask(ids[order], lengths[order])
        row = order.index(1)
        used, used_alone = out["weights"][row].bool(), alone["weights"][0].bool()  # unused slots: weight 0
        assert used_alone.any() and torch.equal(used, used_alone), order
        for key in ("positions", "targets"):
            assert torch.equal(out[key][row][used], alone[key][0][used_alone]), (order, key)
        assert torch.equal(out["input_ids"][row, :7], alone["input_ids"][0])
    assert not torch.equal(_torch_mask(ids, lengths, seed=8)["input_ids"], _torch_mask(ids, lengths)["input_ids"])


def test_torch_masking_keeps_berts_rates():
    """15%-style selection and the 80/10/10 split still hold with the per-example streams."""
    import torch

    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 100, (2000, 16), generator=gen)
    out = _torch_mask(ids, torch.full((2000,), 16))
    chosen = out["weights"].bool()
    assert 0.27 < chosen.sum().item() / (2000 * 14) < 0.33  # mask_prob 0.3 of 14 candidates (6 slots cap a few)
    new = out["input_ids"].gather(1, out["positions"])[chosen]
    kept = (new == out["targets"][chosen]).float().mean().item()
    masked = (new == 4).float().mean().item()
    assert 0.77 < masked < 0.83 and 0.09 < kept < 0.13  # kept: 10% plus random draws of the same token


def test_jax_noise_key_uses_every_bit_of_the_128_bit_seed():
    """Seeds that differ only above bit 63 (or only by the old XOR fold) give different noise."""
    import jax

    from dpaudit.trainers.jax_bert.trainer import noise_key_of
    from dpaudit.training.noise_source import NoiseSource

    s, x = 0x0123456789ABCDEF0011223344556677, 0xDEADBEEF12345678

    def noise(seed):
        return jax.random.normal(jax.random.fold_in(noise_key_of(NoiseSource(seed=seed, explicit=True)), 0), (4,))

    base = noise(s)
    for other in (s ^ x ^ (x << 64), s ^ (1 << 100), s ^ (1 << 127)):
        assert not np.allclose(noise(other), base)
    np.testing.assert_array_equal(noise(s), base)
