"""``dpaudit train`` and the float noise sampler's tail: refused when the tail alone reaches delta (exit 2, one line
naming the option and ``--accept-noise-tail``, nothing written); with ``--accept-noise-tail`` the run states
delta + tail, what holds, and privacy.json records both parts."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from dpaudit import accounting
from dpaudit.accounting import noise_tail
from dpaudit.claim.record import PrivacyRecord
from dpaudit.cli import cli
from dpaudit.common.figures import format_up

EDP = [
    "--trainer",
    "edp-sgd",
    "--mode",
    "dp-sgd",
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "--vocab-size",
    "300",
    "--max-length",
    "16",
    "--eval-examples",
    "8",
]  # 96 rows: 6 steps at q = 1/6, delta 1e-5


def _train(data_dir, out, *args):
    return CliRunner().invoke(cli, ["train", "--data", str(data_dir), "--out", str(out), *EDP, *args])


def test_a_tiny_noise_multiplier_whose_tail_reaches_delta_is_refused_and_nothing_is_written(data_dir, tmp_path):
    """sigma 0.12: even at the 96-bit sampler's reach, each sampled step carries a lone neighbour past 11.596 sigma
    with probability P(Z > 11.596 - 1/0.12) = 5.5e-4, 55 times delta."""
    out = tmp_path / "run"
    result = _train(data_dir, out, "--noise-multiplier", "0.12")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    figure = 6 * (16 / 96) * 0.5 * math.erfc((11.596 - 1 / 0.12) / math.sqrt(2))
    assert line.startswith("Error: --noise-multiplier 0.12: the noise sampler's tail figure ")
    assert f"{figure:.3g}"[:4] in line and "--accept-noise-tail" in line and "delta 1e-05" in line
    assert not out.exists()


@pytest.fixture
def short_reach(monkeypatch):
    """The torch trainers' sampler replaced, in name, by one of reach 5.22 (the retired float32 JAX sampler's): its
    tail reaches delta at a noise multiplier PLD can still account, so the accepted run trains."""
    from dpaudit.trainers.torch_common import privacy

    monkeypatch.setitem(noise_tail.SAMPLERS, "test-short", ("a test sampler of reach 5.22", 5.22))
    monkeypatch.setattr(privacy, "noise_sampler", lambda device: "test-short")


def test_an_accepted_tail_is_stated_inside_delta(data_dir, tmp_path, short_reach):
    refused = _train(data_dir, tmp_path / "refused", "--noise-multiplier", "0.6")
    assert refused.exit_code == 2 and "--accept-noise-tail" in refused.output and not (tmp_path / "refused").exists()
    out = tmp_path / "run"
    result = _train(data_dir, out, "--noise-multiplier", "0.6", "--accept-noise-tail")
    assert result.exit_code == 0, result.output
    privacy = json.loads((out / "privacy.json").read_text())
    record = PrivacyRecord.from_json(privacy)
    figure = 6 * (16 / 96) * 0.5 * math.erfc((5.22 - 1 / 0.6) / math.sqrt(2))
    assert figure > 1e-5
    assert record.delta_parts() == (pytest.approx(1e-5 + figure), 1e-5, pytest.approx(figure, rel=1e-9))
    assert privacy["noise_tail"]["sampler"] == "test-short" and "--accept-noise-tail" in privacy["guarantee"]
    event = accounting.event_from_json(privacy["event"])
    assert privacy["epsilon"] == pytest.approx(accounting.epsilon(event, 1e-5), rel=1e-9)
    head = result.stdout.splitlines()
    assert f"at delta = {format_up(privacy['delta'], 2)}," in head[0]
    assert any("includes the noise sampler's tail figure" in line for line in head)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["accept_noise_tail"] is True
