"""The mechanism's parameters come from public values only (q, the steps, the sensitivity factor).

Neighbouring datasets are built here (40 rows, 41 rows, 40 rows plus a copy of row 0) from the shared tiny
inject directory, re-hashed into their own manifests.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation

from dpaudit.claim.record import PrivacyRecord
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer, _Plugin


def _rows_dir(data_dir, dest, pick):
    """A copy of ``data_dir`` whose train.jsonl holds ``pick(rows)`` (manifest re-hashed)."""
    shutil.copytree(data_dir, dest)
    lines = (data_dir / "train.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    body = "".join(pick(lines))
    (dest / "train.jsonl").write_text(body, encoding="utf-8")
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["outputs"]["train.jsonl"] = hashlib.sha256(body.encode("utf-8")).hexdigest()
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


@pytest.fixture(scope="module")
def neighbours(data_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("neighbours")
    return {
        "40": _rows_dir(data_dir, root / "n40", lambda rows: rows[:40]),
        "41": _rows_dir(data_dir, root / "n41", lambda rows: rows[:41]),
        "40+dup": _rows_dir(data_dir, root / "dup", lambda rows: rows[:40] + rows[:1]),
    }


FAST = dict(mode="dp-sgd", epochs=1, batch_size=8, eval_examples=0, checkpoint_every=1000)


def test_declared_dataset_size_fixes_steps_and_event_and_hides_the_real_n(neighbours, tmp_path, edp_config):
    """With --dataset-size 48 the 40- and 41-row datasets run the same 6 steps at q = 8/48 and write the same event;
    privacy.json holds no real N (today: 5 vs 6 steps, q = 8/40 vs 8/41, dataset_size 40 vs 41)."""
    records = {}
    for name in ("40", "41"):
        out = tmp_path / name
        result = EdpSgdTrainer().train(neighbours[name], out, edp_config(**FAST, dataset_size=48), seed=0)
        assert result.steps == 6
        raw = json.loads((out / "privacy.json").read_text())
        records[name] = raw
        record = PrivacyRecord.from_json(raw)
        assert record.n_public is False and record.dataset_size is None and record.declared_dataset_size == 48
        assert record.epsilon_replace_one is None and "declared public --dataset-size 48" in record.public_parameters
        assert all(seg["sampling_probability"] == 8 / 48 for seg in raw["segments"])
        assert f"{name} rows" not in json.dumps(raw) and f"N = {name}" not in json.dumps(raw)
    assert records["40"]["event"] == records["41"]["event"] and records["40"]["delta"] == records["41"]["delta"]
    assert records["40"]["epsilon"] == records["41"]["epsilon"]


def test_without_a_declared_size_n_is_public_and_the_replace_one_epsilon_is_stated(neighbours, tmp_path, edp_config):
    """40 rows, batch 8: 5 steps at q = 0.2 from the real N, which privacy.json then states as public, with the
    replace-one epsilon worked out here by plain dp_accounting (per-example clipping: multiplier sigma = 1)."""
    out = tmp_path / "run"
    EdpSgdTrainer().train(neighbours["40"], out, edp_config(**FAST), seed=0)
    record = PrivacyRecord.from_json(json.loads((out / "privacy.json").read_text()))
    assert record.steps == 5 and record.n_public is True and record.dataset_size == 40
    assert "N is treated as public" in record.public_parameters
    golden = PLDAccountant(NeighboringRelation.REPLACE_ONE)
    golden.compose(dp_event.PoissonSampledDpEvent(8 / 40, dp_event.GaussianDpEvent(1.0)), 5)
    add_remove = PLDAccountant()
    add_remove.compose(dp_event.PoissonSampledDpEvent(8 / 40, dp_event.GaussianDpEvent(1.0)), 5)
    assert record.epsilon == pytest.approx(add_remove.get_epsilon(1e-5), rel=1e-9)
    assert record.epsilon_replace_one == pytest.approx(golden.get_epsilon(1e-5), rel=1e-9)
    assert record.epsilon_replace_one > record.epsilon
    # The float sampler's reach (Philox words, Box-Muller with a 96-bit radius uniform: u >= 2^-97, sqrt(194 ln 2)
    # sigma) and the run's own tail figure, counted inside delta: the epsilon is the accountant's at delta - figure.
    tail = record.noise_tail
    z_max = math.sqrt(194 * math.log(2))
    assert tail["sampler"] == "philox-c-bm96" and tail["z_max"] == pytest.approx(z_max, abs=1e-3)
    figure = 5 * 0.2 * 0.5 * math.erfc((tail["z_max"] - 1.0) / math.sqrt(2))
    assert record.noise_tail_delta == pytest.approx(figure, rel=1e-9) and record.delta == 1e-5
    assert record.delta_parts() == (1e-5, pytest.approx(1e-5 - figure, rel=1e-12), record.noise_tail_delta)


def test_edp_sgd_sensitivity_factor_does_not_depend_on_the_slot_occupancy(neighbours, tmp_path, edp_config):
    """--micro-batches 100000: 40 distinct rows sit one per micro-batch; a copy of row 0 shares its micro-batch.
    The factor (and so the noise std and the event) must be the same for both: 2, from public parameters only
    (today: factor 1 and std 0.673, then 2 and 1.381)."""
    seen = []
    for name in ("40", "40+dup"):
        config = edp_config(
            mode="edp-sgd",
            micro_batches=100000,
            target_epsilon=4.0,
            noise_multiplier=None,
            epochs=1,
            batch_size=8,
            dataset_size=48,
            eval_examples=0,
        )
        run = _Plugin(neighbours[name], tmp_path / name, config, seed=0)
        run._setup()
        seen.append((run.clipper.sensitivity_factor, run.plan.noise_std(0, run.clipper.clip_norm), run.plan.event()))
    assert seen[0][0] == seen[1][0] == 2.0
    assert seen[0][1] == seen[1][1] and seen[0][2] == seen[1][2]


def test_philox_reach_is_not_exceeded_by_a_large_draw():
    """A sanity check of the Philox sampler's stated reach: 2^22 draws stay within sqrt(64 ln 2) = 6.66."""
    from dpaudit.trainers.torch_common import philox

    if not philox.available():
        pytest.skip("no C compiler: the torch sampler runs instead")
    out = torch.empty(1 << 22)
    philox.normal_(out, [1, 2, 3, 4], 1.0)
    assert float(out.abs().max()) <= math.sqrt(64 * math.log(2)) + 1e-4
    assert float(out.std()) == pytest.approx(1.0, rel=0.01)
