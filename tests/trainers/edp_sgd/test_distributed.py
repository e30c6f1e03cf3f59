"""gloo, 2 processes: the same result as the single-process run with the same seeds.

Each worker is a fresh ``python`` running ``dpaudit train`` through the CLI (so the test also checks,
in processes that trained, that nothing imported jax). Micro-batch j is computed by process j mod 2;
with ``--noise-draw micro-batch`` its noise is keyed by j, so the values cannot depend on the split.
"""

from __future__ import annotations

import json

from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

ARGS = [
    "--trainer",
    "edp-sgd",
    "--mode",
    "edp-sgd",
    "--noise-multiplier",
    "1.0",
    "--noise-draw",
    "micro-batch",
    "--noise-seed",
    "77",
    "--micro-batches",
    "4",
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


def test_two_gloo_processes_equal_one_process(data_dir, tmp_path, gloo_pair, assert_same_model):
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig

    single = tmp_path / "single"
    config = EdpSgdConfig(
        mode="edp-sgd",
        noise_multiplier=1.0,
        noise_draw="micro-batch",
        noise_seed=77,
        micro_batches=4,
        epochs=1,
        batch_size=24,
        learning_rate=1e-3,
        preset="tiny",
        vocab_size=300,
        max_length=16,
        eval_examples=8,
    )
    one = EdpSgdTrainer().train(data_dir, single, config, seed=2)

    out = tmp_path / "pair"
    gloo_pair(data_dir, out, ARGS, tmp_path / "rendezvous")
    assert_same_model(single, out, atol=2e-6, rtol=1e-5)  # the all-reduce sums in another order: float round-off
    pair = json.loads((out / "manifest.json").read_text())
    assert pair["summary"]["processes"] == 2 and one.summary["processes"] == 1
    assert json.loads((out / "privacy.json").read_text())["epsilon"] == one.epsilon
