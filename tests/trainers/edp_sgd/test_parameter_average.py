"""``--ema-decay D`` (parameter averaging, De et al. 2022): the average follows its formula over the run's own
iterates, the evaluated and exported model is the average, the training itself is untouched, the claim is the
same run's, a resumed run equals a straight one, and bad values are refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file

from dpaudit.cli import cli
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer
from dpaudit.trainers.torch_common.averaging import ParameterAverage
from dpaudit.training.train_dir import list_checkpoints


def test_the_average_follows_its_warmed_up_decay_and_the_swap_restores_the_iterate():
    a, b = torch.zeros(3), torch.ones(2)
    average = ParameterAverage([a, b], 0.5)
    assert [average.decay_at(t) for t in range(3)] == pytest.approx([0.1, 2 / 11, 0.25])
    assert ParameterAverage([a], 0.9).decay_at(1000) == 0.9  # the warm-up reaches D, then D holds
    expected_a, expected_b = torch.zeros(3), torch.ones(2)
    for t, (x, y) in enumerate([(1.0, 3.0), (2.0, -1.0), (4.0, 0.5)]):
        a.fill_(x), b.fill_(y)
        average.update(t)
        d = min(0.5, (1 + t) / (10 + t))
        expected_a, expected_b = d * expected_a + (1 - d) * x, d * expected_b + (1 - d) * y
    torch.testing.assert_close(average.tensors[0], expected_a)
    torch.testing.assert_close(average.tensors[1], expected_b)
    with average.swapped():
        torch.testing.assert_close(a, expected_a)
        torch.testing.assert_close(b, expected_b)
    assert torch.equal(a, torch.full((3,), 4.0)) and torch.equal(b, torch.full((2,), 0.5))
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        ParameterAverage([a], 1.0)


def _privacy(out):
    record = json.loads((out / "privacy.json").read_text())
    details = record.pop("details")
    return record, details


def _last(out, key):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r[key] for r in rows if key in r][-1]


@pytest.fixture(scope="module")
def averaged_runs(data_dir, tmp_path_factory, edp_config):
    """The same dp-sgd run (noise seed, sample, schedule) with and without --ema-decay 0.8: a checkpoint every
    step, kept."""
    root = tmp_path_factory.mktemp("ema")
    runs = {}
    for name, extra in (("last", {}), ("ema", {"ema_decay": 0.8})):
        config = edp_config(mode="dp-sgd", epochs=1, checkpoint_every=1, keep_checkpoints=True, **extra)
        EdpSgdTrainer().train(data_dir, root / name, config, seed=5)
        runs[name] = root / name
    return runs


def test_the_exported_model_is_the_average_of_the_same_iterates(averaged_runs, assert_same_model):
    last, ema = averaged_runs["last"], averaged_runs["ema"]
    (t1, c1), (t2, c2) = list_checkpoints(ema / "checkpoints")[-2:]
    assert t2 == t1 + 1 == 6
    before, after = load_file(str(c1 / "arrays.safetensors")), load_file(str(c2 / "arrays.safetensors"))
    plain = load_file(str(list_checkpoints(last / "checkpoints")[-1][1] / "arrays.safetensors"))
    exported = load_file(str(ema / "model" / "model.safetensors"))
    names = [k.removeprefix("params/") for k in after if k.startswith("params/")]
    assert names and all(f"average/{n}" in after for n in names)
    d = min(0.8, (1 + t1) / (10 + t1))  # the update after step t1 (from 0): the checkpoint of t1 + 1 steps
    moved = 0
    for n in names:
        # The averaging touches no iterate: the run without it took the very same steps.
        assert torch.equal(after[f"params/{n}"], plain[f"params/{n}"]), n
        torch.testing.assert_close(
            after[f"average/{n}"], d * before[f"average/{n}"] + (1 - d) * after[f"params/{n}"], msg=n
        )
        torch.testing.assert_close(exported[n], after[f"average/{n}"], atol=0, rtol=0, msg=n)
        moved += int(not torch.equal(after[f"average/{n}"], after[f"params/{n}"]))
    assert moved > 0  # the average is not the last iterate
    with pytest.raises(AssertionError):
        assert_same_model(last, ema, atol=1e-6, rtol=0)
    # Evaluated on the average too: the held-out loss differs from the last iterate's.
    assert _last(ema, "eval_loss") != _last(last, "eval_loss")


def test_the_claim_is_the_same_run_s_and_names_the_average(averaged_runs):
    last_record, last_details = _privacy(averaged_runs["last"])
    ema_record, ema_details = _privacy(averaged_runs["ema"])
    assert ema_record == last_record  # epsilon, delta, noise, sampling, clipping: post-processing changes none
    average = ema_details.pop("parameter_average")
    assert "parameter_average" not in last_details and ema_details == last_details
    assert average["kind"] == "ema" and average["decay"] == 0.8 and "post-processing" in average["rule"]


def test_a_resumed_averaged_run_equals_the_straight_one(edp_config, assert_resume_equals_straight):
    # the average restored too
    assert_resume_equals_straight(edp_config(mode="dp-sgd", epochs=1, checkpoint_every=2, ema_decay=0.8))


@pytest.mark.parametrize("value", ["1", "0", "-0.5", "nan"])
def test_a_decay_outside_0_1_is_refused_in_one_line(data_dir, tmp_path, value):
    out = tmp_path / "x"
    args = ["train", "--trainer", "edp-sgd", "--data", str(data_dir), "--out", str(out), "--mode", "sgd"]
    result = CliRunner().invoke(cli, [*args, "--preset", "tiny", "--ema-decay", value])
    assert result.exit_code == 2, result.output
    assert "--ema-decay must be a finite number > 0 and < 1" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()
