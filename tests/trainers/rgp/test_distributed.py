"""gloo, 2 processes: the same rgp run as one process with the same seeds.

Each worker is a fresh ``python`` running ``dpaudit train --trainer rgp`` through the CLI. Both
processes compute the same carriers (the same weights, the public seed), each clips its half of the
batch, process 0 adds the noise, and the carrier sums are all-reduced before Eq. 3: the result can
differ from one process only by the order of float additions.
"""

from __future__ import annotations

import json

from dpaudit.trainers.rgp.trainer import RgpTrainer

ARGS = [
    "--trainer",
    "rgp",
    "--noise-multiplier",
    "1.0",
    "--noise-seed",
    "77",
    "--rank",
    "4",
    "--warmup-steps",
    "2",
    "--epochs",
    "1",
    "--batch-size",
    "24",
    "--learning-rate",
    "1e-3",
    "--preset",
    "tiny",
    "--vocab-size",
    "300",
    "--max-length",
    "16",
    "--eval-examples",
    "8",
    "--seed",
    "2",
]


def test_two_gloo_processes_equal_one_process(data_dir, tmp_path, rgp_config, gloo_pair, assert_same_model):
    single = tmp_path / "single"
    config = rgp_config(
        noise_multiplier=1.0,
        noise_seed=77,
        rank=4,
        warmup_steps=2,
        epochs=1,
        batch_size=24,
        learning_rate=1e-3,
        eval_examples=8,
        checkpoint_every=50,
    )
    one = RgpTrainer().train(data_dir, single, config, seed=2)

    out = tmp_path / "pair"
    gloo_pair(data_dir, out, ARGS, tmp_path / "rendezvous")
    assert_same_model(single, out, atol=2e-5, rtol=1e-4)  # the all-reduce sums in another order: float round-off
    pair = json.loads((out / "manifest.json").read_text())
    assert pair["summary"]["processes"] == 2 and one.summary["processes"] == 1
    assert json.loads((out / "privacy.json").read_text())["epsilon"] == one.epsilon
