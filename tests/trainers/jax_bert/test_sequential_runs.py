"""Several models trained in one process (shadow models) equal the same models trained alone.

Process-wide state (the CPU runtime tuning of :mod:`trainers.jax_bert.cpu_runtime`, the compiled
function cache of :func:`trainers.jax_bert.trainer.compiled_functions`) must not leak from one run
into the next: a process that trains model A then model B writes B's weights byte for byte as a
fresh process that trains B alone (fixed ``--seed`` and ``--noise-seed``). The cache is keyed on
shapes only, not on the run's length: B (another number of steps) reuses what A compiled.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer, compiled_functions

SECOND = {"steps": 4, "batch_size": 24, "noise_seed": 21}


def test_second_model_in_a_process_equals_it_trained_in_a_fresh_process(data_dir, tmp_path, tiny_config):
    trainer = JaxBertTrainer()
    trainer.train(data_dir, tmp_path / "first", tiny_config(steps=3, noise_seed=20), seed=4)
    hits = compiled_functions.cache_info().hits
    trainer.train(data_dir, tmp_path / "second", tiny_config(**SECOND), seed=4)
    # Same shapes, another schedule length: the compiled functions are reused, not rebuilt.
    assert compiled_functions.cache_info().hits == hits + 1
    in_process = (tmp_path / "second" / "model" / "model.safetensors").read_bytes()

    script = textwrap.dedent(f"""
        import json, sys
        from dpaudit.trainers.jax_bert.config import JaxBertConfig
        from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer
        config = JaxBertConfig(**json.loads(sys.argv[1]))
        JaxBertTrainer().train({str(data_dir)!r}, {str(tmp_path / "alone")!r}, config, seed=4)
    """)
    env = dict(os.environ)  # the same XLA_FLAGS (device count) as this process
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(dataclasses.asdict(tiny_config(**SECOND)))],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    alone = (tmp_path / "alone" / "model" / "model.safetensors").read_bytes()
    assert alone == in_process
