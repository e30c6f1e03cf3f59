"""gloo, 2 processes: the same rgp run as one process with the same seeds.

Each worker is a fresh ``python`` running ``dpaudit train --trainer rgp`` through the CLI. Both
processes compute the same carriers (the same weights, the public seed), each clips its half of the
batch, process 0 adds the noise, and the carrier sums are all-reduced before Eq. 3: the result can
differ from one process only by the order of float additions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file

from trainers.rgp.trainer import RgpTrainer

ARGS = ["--noise-multiplier", "1.0", "--noise-seed", "77", "--rank", "4", "--warmup-steps", "2", "--epochs", "1",
        "--batch-size", "24", "--preset", "tiny", "--vocab-size", "300", "--max-length", "16", "--eval-examples", "8",
        "--seed", "2"]

WORKER = """
import sys
from click.testing import CliRunner
from dpaudit.cli import cli
r = CliRunner().invoke(cli, ["train", "--trainer", "rgp", "--data", sys.argv[1], "--out", sys.argv[2], *sys.argv[3:]],
                       catch_exceptions=False)
assert r.exit_code == 0, r.output
print("JAX:", sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "flax", "optax")))
"""


def test_two_gloo_processes_equal_one_process(data_dir, tmp_path, rgp_config):
    single = tmp_path / "single"
    config = rgp_config(noise_multiplier=1.0, noise_seed=77, rank=4, warmup_steps=2, epochs=1, batch_size=24,
                        eval_examples=8, checkpoint_every=50)
    one = RgpTrainer().train(data_dir, single, config, seed=2)

    out = tmp_path / "pair"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WORLD_SIZE": "2",
           "DPAUDIT_DIST_INIT_METHOD": f"file://{tmp_path / 'rendezvous'}"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(data_dir), str(out), *ARGS],
                              env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (stdout, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
        assert "JAX: []" in stdout  # the rgp trainer never imports jax
    a = load_file(str(single / "model" / "model.safetensors"))
    b = load_file(str(out / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    for key in a:  # the all-reduce sums in another order: equal to float round-off
        torch.testing.assert_close(b[key], a[key], atol=2e-5, rtol=1e-4, msg=key)
    pair = json.loads((out / "manifest.json").read_text())
    assert pair["summary"]["processes"] == 2 and one.summary["processes"] == 1
    assert json.loads((out / "privacy.json").read_text())["epsilon"] == one.epsilon
