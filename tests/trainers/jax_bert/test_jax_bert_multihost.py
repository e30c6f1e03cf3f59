"""jax-bert multi-host: two processes joined by ``jax.distributed`` (CPU, gloo collectives) train the
same run as one process with two local devices, and only process 0 writes the run directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer

REPO_ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 240

# Each process runs this with the tiny settings of tests/conftest.py (copied literally: the child
# processes do not import the test package).
_SCRIPT = """
import json, sys
from pathlib import Path

import jax

from dpaudit.trainers.jax_bert.config import JaxBertConfig
from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer

TINY_JAX_BERT = dict(preset="tiny", steps=6, batch_size=16, physical_batch=8, max_length=16, vocab_size=128,
                     noise_multiplier=1.0, checkpoint_every=3, log_every=2, eval_every=3, eval_examples=16,
                     noise_seed=11)

result = JaxBertTrainer().train(Path(sys.argv[1]), Path(sys.argv[2]), JaxBertConfig(**TINY_JAX_BERT), seed=5)
print("RESULT " + json.dumps({"process_index": jax.process_index(), "process_count": jax.process_count(),
                              "device_count": jax.device_count(), "steps": result.steps,
                              "devices": result.summary["devices"], "final_loss": result.final_loss}), flush=True)
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(script: Path, data_dir: Path, out: Path, *, port: int, process_id: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.update(
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
        JAX_NUM_PROCESSES="2",
        JAX_PROCESS_ID=str(process_id),
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    env.pop("JAX_LOCAL_DEVICE_IDS", None)
    handle = open(log, "w", encoding="utf-8")  # noqa: SIM115 (closed with the process below)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(data_dir), str(out)],
        cwd=REPO_ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )
    proc.log_handle = handle  # type: ignore[attr-defined]
    return proc


@pytest.fixture(scope="module")
def reference(data_dir, tmp_path_factory, tiny_config):
    """The in-process run both tests compare with (the tiny settings, seed 5, two local devices), trained once: its
    folder (read-only) and its result."""
    out = tmp_path_factory.mktemp("multihost") / "reference"
    return out, JaxBertTrainer().train(data_dir, out, tiny_config(), seed=5)


@pytest.mark.slow  # two processes that each import jax and compile the run: ~50 s of CPU on the 2-core machine
def test_two_process_run_matches_two_device_run_and_only_process_0_writes(data_dir, tmp_path, reference):
    assert jax.device_count() == 2  # tests/conftest.py: the in-process reference uses two local devices
    script = tmp_path / "train_one_process.py"
    script.write_text(_SCRIPT, encoding="utf-8")
    shared_out = tmp_path / "multi"  # the SAME --out for both processes: process 1 must not write it
    port = _free_port()
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    procs = [_launch(script, data_dir, shared_out, port=port, process_id=i, log=logs[i]) for i in range(2)]
    try:
        deadline = time.monotonic() + TIMEOUT_S
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.log_handle.close()
    # The in-process reference ran before (the fixture): overlapping three compiling processes on two cores
    # is slower than running them in turn.
    reference_dir, reference = reference
    outputs = [log.read_text(encoding="utf-8") for log in logs]
    for i, (proc, text) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"process {i} exited {proc.returncode}:\n{text[-4000:]}"
    results = [
        json.loads(next(line for line in text.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])
        for text in outputs
    ]
    for i, result in enumerate(results):
        assert result["process_index"] == i and result["process_count"] == 2 and result["device_count"] == 2
        assert result["steps"] == reference.steps == 6 and result["devices"] == 2
    assert reference.summary["devices"] == 2
    # Both processes computed the same run (the rows process 1 kept in memory agree with process 0's).
    assert results[0]["final_loss"] == results[1]["final_loss"]

    # One run directory, written once, complete, and nothing else next to it.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["multi"]
    assert sorted(p.name for p in shared_out.iterdir()) == sorted(p.name for p in reference_dir.iterdir())
    manifest = json.loads((shared_out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["steps"] == 6 and manifest["summary"]["devices"] == 2
    assert not (shared_out / "checkpoints").exists()  # deleted at the end (secret noise state), by process 0
    rows = [json.loads(line) for line in (shared_out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 7))  # each row written once (not once per process)
    assert "eval_loss" in rows[-1]

    multi = load_file(str(shared_out / "model" / "model.safetensors"))
    single = load_file(str(reference_dir / "model" / "model.safetensors"))
    assert multi.keys() == single.keys()
    for name in single:
        np.testing.assert_allclose(multi[name], single[name], rtol=1e-5, atol=1e-6, err_msg=name)
    ref_rows = [json.loads(line) for line in (reference_dir / "metrics.jsonl").read_text().splitlines()]
    np.testing.assert_allclose(rows[-1]["eval_loss"], ref_rows[-1]["eval_loss"], rtol=1e-5)


def test_a_non_zero_process_writes_nothing(data_dir, tmp_path, tiny_config, monkeypatch, reference):
    """The write guard on its own, in-process: as process 1 the trainer computes the run and writes no file."""
    _, reference = reference
    monkeypatch.setattr(jax, "process_index", lambda *args, **kwargs: 1)
    out = tmp_path / "as_process_1"
    result = JaxBertTrainer().train(data_dir, out, tiny_config(), seed=5)
    assert not out.exists()
    assert result.steps == reference.steps == 6 and result.final_loss == reference.final_loss
    untimed = lambda summary: {k: v for k, v in summary.items() if k != "telemetry"}  # wall-clock throughput
    assert result.epsilon == reference.epsilon and untimed(result.summary) == untimed(reference.summary)


_BROADCAST_SCRIPT = """
import secrets

import jax

from dpaudit.trainers.jax_bert import parallel

parallel.maybe_initialize_distributed()
mine = secrets.randbits(128)  # what each process's NoiseSource draws from OS entropy
print(f"SEED {jax.process_index()} {mine} {parallel.broadcast_from_primary(mine)}", flush=True)
"""


def test_the_os_entropy_noise_seed_is_process_0s_on_every_process(tmp_path):
    """Without --noise-seed each process draws its own seed; the run must use process 0's everywhere."""
    script = tmp_path / "broadcast.py"
    script.write_text(_BROADCAST_SCRIPT, encoding="utf-8")
    port = _free_port()
    logs = [tmp_path / f"process{i}.log" for i in range(2)]
    procs = [_launch(script, tmp_path, tmp_path, port=port, process_id=i, log=logs[i]) for i in range(2)]
    try:
        for proc in procs:
            proc.wait(timeout=TIMEOUT_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.log_handle.close()
    lines = [next(line for line in log.read_text().splitlines() if line.startswith("SEED ")).split() for log in logs]
    (_, _, own0, shared0), (_, _, own1, shared1) = lines
    assert own0 != own1  # independent draws (128 bits: never equal by chance)
    assert shared0 == shared1 == own0  # every process uses process 0's
