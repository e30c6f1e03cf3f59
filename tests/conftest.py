"""Shared fixtures. Tests use tiny data made here; nothing is downloaded and shared/ is not needed."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

# Two CPU devices for the data-parallel tests; must be set before jax is first imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One XLA compilation cache for the whole session, subprocesses included: a test that builds a step
# function already compiled by another test, or a launched process that compiles what this one did,
# loads the executable instead of compiling it again (the programs and their results are the same).
# A fresh directory per session, removed at its end: nothing carries over from one run to the next.
# (No size limit: with one, jax's eviction expects an access-time file beside every entry and warns
# when a process wrote one without it. A read that fails is compiled afresh, with a warning.)
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # a developer's own cache wins
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="dpaudit-tests-xla-")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
# Every program is cached, however fast it compiled: a jax-bert run compiles ~50 programs, most under 0.5 s, and
# with only the slow ones cached a tiny run's first use in another worker or process took 7.0 s of CPU instead of
# 4.8 s (measured on the 2-core machine).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import pytest  # noqa: E402


def pytest_configure(config):
    """pytest-xdist hands a file at a time to each worker (``--dist loadfile``), by default the files with the most
    tests first. Then a file of a few slow tests (the demo's end to end: minutes) came last and one worker ran it
    while the other waited; :func:`pytest_collection_modifyitems` orders the files instead."""
    if getattr(config.option, "dist", "no") in ("loadfile", "loadscope") and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The files with the most tests marked ``slow`` first, then the files with the most tests (xdist's own order),
    each file's tests in their own order: the longest work is handed out first, and what is left at the end is
    short, so that the workers finish together. Every worker sorts the same collection the same way."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def weight(name: str) -> tuple[int, int]:
        tests = files[name]
        return (-sum(1 for t in tests if t.get_closest_marker("slow") is not None), -len(tests))

    items[:] = [item for name in sorted(files, key=weight) for item in files[name]]


def _built_once(tmp_path_factory, name: str, build) -> Path:
    """``build(folder)`` once for the whole test run, and ``folder`` (read-only) to every caller.

    Under pytest-xdist each worker runs the session fixtures of its own files, so a tiny run that files on two
    workers needed was trained twice. The folder lives where every worker of the run sees it (their common base
    temporary folder), and a lock makes the first worker build it while another that needs it waits; a build that
    failed half-way is removed and made again by the next caller."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's own base folder, shared by its workers
    root = base / "built-once"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, and by the kernel if the worker dies
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


#: Trainer options shared by the jax-bert test files: the same shapes and optimizer settings
#: everywhere, so each XLA program is compiled once per process. ``noise_seed`` fixes the secret
#: sampling and noise (OS entropy otherwise) so that tests can compare two runs bit for bit.
TINY_JAX_BERT = dict(
    preset="tiny",
    steps=6,
    batch_size=16,
    physical_batch=8,
    max_length=16,
    vocab_size=128,
    noise_multiplier=1.0,
    checkpoint_every=3,
    log_every=2,
    eval_every=3,
    eval_examples=16,
    noise_seed=11,
)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """A small inject directory written by `dpaudit inject` itself (read-only for tests): 96 train
    rows (3 canaries inserted 1, 2 and 3 times), 24 heldout, 96 public (the tokenizer's only input)."""
    from click.testing import CliRunner

    from dpaudit.cli import cli

    def build(folder: Path) -> None:
        result = CliRunner().invoke(
            cli,
            [
                "inject",
                "--corpus",
                "builtin:assistant",
                "--corpus-size",
                "210",
                "--heldout-size",
                "24",
                "--public-size",
                "96",
                "--frequencies",
                "1,2,3",
                "--per-frequency",
                "1",
                "--out",
                str(folder / "data"),
                "--seed",
                "0",
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output

    return _built_once(tmp_path_factory, "inject", build) / "data"


#: The texts of :func:`tiny_causal_dir`'s tokenizer: a few sentences with digits (one token each).
TINY_CAUSAL_TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "my pin code is 4 8 1 5 and my card is 9 2 7 3",
    "please call me back at 555 0199 tomorrow",
    "the meeting moved to room 12 on friday",
]


@pytest.fixture(scope="session")
def tiny_causal_dir(tmp_path_factory):
    """A tiny GPT-2 causal LM directory in dpaudit's layout (docs/scoring.md, convention 1) with random weights
    (read-only; see tests/causal_fixtures.py). Do not edit: other helpers' tests use it."""
    from tests.causal_fixtures import build_tiny_causal

    def build(folder: Path) -> None:
        build_tiny_causal(folder / "model", TINY_CAUSAL_TEXTS, seed=0)

    return _built_once(tmp_path_factory, "causal", build) / "model"


@pytest.fixture(scope="session")
def tiny_config():
    """Factory: the tiny jax-bert Config with overrides."""
    from dpaudit.trainers.jax_bert.config import JaxBertConfig

    return lambda **overrides: JaxBertConfig(**{**TINY_JAX_BERT, **overrides})


#: The one inject + train run shared by every attack test: 4 digits:4 canaries inserted 100 times
#: and 8 never-inserted controls, each with its own {name} key, in a 400-row corpus; a tiny BERT
#: trained non-privately for 250 steps memorizes the 100x canaries (max-length 32 keeps every
#: canary whole: the keyed canaries are 24-30 tokens with this small vocabulary).
CANARY_INJECT = [
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "400",
    "--seed",
    "1",
    "--format",
    "digits:4",
    "--frequencies",
    "100",
    "--per-frequency",
    "4",
    "--holdout",
    "8",
    "--force",
]
CANARY_TRAIN = [
    "--trainer",
    "jax-bert",
    "--seed",
    "0",
    "--preset",
    "tiny",
    "--batch-size",
    "64",
    "--physical-batch",
    "32",
    "--max-length",
    "32",
    "--learning-rate",
    "3e-3",
    "--warmup-steps",
    "10",
    "--weight-decay",
    "0",
    "--mask-prob",
    "0.3",
    "--log-every",
    "50",
    "--eval-every",
    "1000",
    "--checkpoint-every",
    "1000",
    "--noise-seed",
    "0",
]


def _cli(*args: str) -> str:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="session")
def canary_data(tmp_path_factory):
    """The inject directory of :data:`CANARY_INJECT` (read-only)."""

    def build(folder: Path) -> None:
        _cli("inject", *CANARY_INJECT, "--out", str(folder / "data"))

    return _built_once(tmp_path_factory, "canary-data", build) / "data"


@pytest.fixture(scope="session")
def canary_model(canary_data, tmp_path_factory):
    """A train run directory: the tiny non-private model trained on :func:`canary_data` (read-only)."""

    def build(folder: Path) -> None:
        _cli(
            "train",
            *CANARY_TRAIN,
            "--steps",
            "250",
            "--non-private",
            "--data",
            str(canary_data),
            "--out",
            str(folder / "model"),
        )

    return _built_once(tmp_path_factory, "canary-model", build) / "model"


@pytest.fixture(scope="session")
def noisy_canary_model(canary_data, tmp_path_factory):
    """The same model trained with DP-SGD at noise multiplier 50 for 40 steps (noise fixed by --noise-seed).

    Its initialization seed differs from :func:`canary_model`'s: under this much noise the model stays
    close to its random init, and with only 4 inserted and 8 control canaries one init can rank one
    group above the other by chance: init seed 0 does (Mann-Whitney p = 0.002-0.18 over noise seeds
    0-3, alike at noise multipliers 50 and 500, so not a signal that passed through the noise), while
    init seeds 1-5 give p = 0.47, 0.77, 0.72, 0.53, 0.11 at noise multiplier 500.
    """

    def build(folder: Path) -> None:
        _cli(
            "train",
            *CANARY_TRAIN,
            "--seed",
            "1",
            "--steps",
            "40",
            "--noise-multiplier",
            "50",
            "--data",
            str(canary_data),
            "--out",
            str(folder / "noisy"),
        )

    return _built_once(tmp_path_factory, "canary-noisy", build) / "noisy"


#: The membership-inference run shared by the MIA tests: a small corpus (124 training rows, 64 heldout,
#: 64 public) and 8 coin-flip canaries (each inserted once iff its fair coin says so), on which a tiny
#: BERT trained non-privately for 200 steps (~50 epochs) overfits: its loss separates members from
#: heldout rows (AUC ~0.67 with seed 3). ``--physical-batch 64`` (a memory knob) packs the target's Poisson batch of
#: ~32 and its shadow models' batch of 12 (24 rows) alike into one micro-step of 64 slots, so that the shadows can load
#: the programs the target compiled from the suite's XLA cache (with 32 slots the target took two micro-steps per
#: chunk and the shadows one: two shapes). The attacks' AUCs are unchanged to 3 decimals; test_mia + test_demo_cost
#: took 117.6 s of CPU instead of 122.6 s (side by side, load 14-19).
MIA_INJECT = [
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "250",
    "--heldout-size",
    "64",
    "--public-size",
    "64",
    "--frequencies",
    "1",
    "--per-frequency",
    "8",
    "--holdout",
    "0",
    "--coin-flip",
    "--seed",
    "3",
]
MIA_TRAIN = [
    "--trainer",
    "jax-bert",
    "--seed",
    "0",
    "--preset",
    "tiny",
    "--batch-size",
    "32",
    "--physical-batch",
    "64",
    "--max-length",
    "16",
    "--learning-rate",
    "3e-3",
    "--warmup-steps",
    "10",
    "--weight-decay",
    "0",
    "--mask-prob",
    "0.3",
    "--log-every",
    "50",
    "--eval-every",
    "1000",
    "--checkpoint-every",
    "1000",
]


@pytest.fixture(scope="session")
def mia_data(tmp_path_factory):
    """The inject directory of :data:`MIA_INJECT` (read-only)."""

    def build(folder: Path) -> None:
        _cli("inject", *MIA_INJECT, "--out", str(folder / "data"))

    return _built_once(tmp_path_factory, "mia-data", build) / "data"


@pytest.fixture(scope="session")
def mia_model(mia_data, tmp_path_factory):
    """The overfit tiny model: non-private, 200 steps on :func:`mia_data` (read-only). ``--noise-seed``
    fixes its batch order (drawn from the secret stream even without noise): the attack AUCs on 64 + 64
    rows have a standard error of ~0.04, and a model that changed with every run made their known-answer
    thresholds flaky (shadow AUC 0.599 against > 0.6 in one CI run)."""

    def build(folder: Path) -> None:
        _cli(
            "train",
            *MIA_TRAIN,
            "--steps",
            "200",
            "--non-private",
            "--noise-seed",
            "0",
            "--data",
            str(mia_data),
            "--out",
            str(folder / "model"),
        )

    return _built_once(tmp_path_factory, "mia-model", build) / "model"


#: Tiny torch runs on :func:`data_dir`: 96 rows, batch 16 -> 6 steps, one epoch (a few seconds each on one thread).
TORCH_TINY = [
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "--max-length",
    "16",
    "--vocab-size",
    "128",
    "--eval-examples",
    "8",
    "--noise-multiplier",
    "1",
    "--noise-seed",
    "5",
    "--seed",
    "3",
]
TORCH_ARGS = {"edp-sgd": ["--mode", "dp-sgd", *TORCH_TINY], "rgp": ["--rank", "2", *TORCH_TINY]}


@pytest.fixture(scope="session")
def torch_runs(data_dir, tmp_path_factory):
    """trainer -> a finished tiny run of edp-sgd and rgp (:data:`TORCH_ARGS`), trained by the CLI with ``--data``
    absolute (read-only: the bad-input tests copy what they damage)."""

    def build(folder: Path) -> None:
        for trainer, args in TORCH_ARGS.items():
            _cli(
                "train",
                "--trainer",
                trainer,
                "--data",
                str(data_dir.resolve()),
                "--out",
                str(folder / f"finished-{trainer}" / "run"),
                *args,
            )

    folder = _built_once(tmp_path_factory, "torch-runs", build)
    return {trainer: folder / f"finished-{trainer}" / "run" for trainer in TORCH_ARGS}
