"""Fixtures the torch trainers' tests share (edp-sgd, rgp); nothing here imports torch until asked,
so the jax-bert tests beside them never load it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def one_torch_thread():
    """Tiny models run fastest on one thread, and on a shared 2-core machine two spinning OpenMP
    threads made a tiny step 100x slower (2.5 s instead of 0.02 s). Requested by an autouse fixture
    of each torch trainer's conftest."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def token_batches():
    """task -> a 6-example batch of a 100-token vocabulary (ragged lengths, 3 labels, MLM masks; clm: every
    real token after the first predicted)."""
    import torch

    from dpaudit.trainers.torch_common.data import additive_mask, mask_tokens

    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 7, 9, 12, 5, 10])
    ids = torch.randint(5, 100, (6, 12), generator=gen)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 2
    clf_batch = {"input_ids": ids, "labels": torch.tensor([0, 1, 2, 1, 0, 2]), "mask4": additive_mask(mask)}
    mlm_batch = mask_tokens(
        ids, mask, generator=gen, mask_id=4, vocab_size=100, special_ids=[0, 1, 2, 3, 4], mask_prob=0.3, n_predictions=5
    )
    mlm_batch["mask4"] = additive_mask(mask)
    clm_batch = {"input_ids": ids, "next_weights": mask.float(), "mask4": additive_mask(mask)}
    return {"classify": clf_batch, "mlm": mlm_batch, "clm": clm_batch}


_WORKER = """
import sys
from click.testing import CliRunner
from dpaudit.cli import cli
r = CliRunner().invoke(cli, ["train", "--data", sys.argv[1], "--out", sys.argv[2], *sys.argv[3:]],
                       catch_exceptions=False)
assert r.exit_code == 0, r.output
print("JAX:", sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib", "flax", "optax")))
"""


@pytest.fixture(scope="session")
def gloo_pair():
    """Runner: ``dpaudit train ARGS`` (``--trainer`` among them) in two fresh gloo processes writing
    ``out``; checks both exited 0 and that neither imported jax (a torch trainer never does)."""

    def run(data_dir, out, args, rendezvous):
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "WORLD_SIZE": "2",
            "DPAUDIT_DIST_INIT_METHOD": f"file://{rendezvous}",
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(data_dir), str(out), *args],
                env={**env, "RANK": str(rank)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for rank in range(2)
        ]
        outputs = [p.communicate(timeout=300) for p in procs]
        for p, (stdout, stderr) in zip(procs, outputs):
            assert p.returncode == 0, stderr[-3000:]
            assert "JAX: []" in stdout

    return run


@pytest.fixture(scope="session")
def assert_same_model():
    """Checker: two run directories' model/model.safetensors hold the same tensors to ``atol``/``rtol``."""
    import torch
    from safetensors.torch import load_file

    def check(a_dir, b_dir, *, atol, rtol):
        a = load_file(str(a_dir / "model" / "model.safetensors"))
        b = load_file(str(b_dir / "model" / "model.safetensors"))
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(b[key], a[key], atol=atol, rtol=rtol, msg=key)

    return check


class Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing catches it on the way out."""


@pytest.fixture
def killed_after_checkpoint(monkeypatch):
    """Runner: ``train()`` "killed" right after checkpoint ``step`` was written (any step when None),
    as SIGKILL would leave it: the checkpoint complete on disk, nothing after it."""
    from dpaudit.trainers.torch_common import checkpoint as ckpt

    def run(train, step=None):
        real_save = ckpt.save_checkpoint

        def save_then_die(directory, *, step: int, **kwargs):
            path = real_save(directory, step=step, **kwargs)
            if at is None or step == at:
                raise Killed()
            return path

        at = step
        with monkeypatch.context() as patch:
            patch.setattr(ckpt, "save_checkpoint", save_then_die)
            with pytest.raises(Killed):
                train()

    return run
