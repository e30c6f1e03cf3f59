"""jax-bert's mechanism randomness is secret (docs/privacy.md, "The randomness the guarantee relies on is secret").

The Poisson sampling and the DP noise come from ``NoiseSource`` (OS entropy unless ``noise_seed``),
never from the public ``--seed``. An adversary who reads everything a run directory holds outside
``checkpoints/`` (the manifest with its seed, privacy.json, metrics.jsonl, the model config) tries to
regenerate the realized batch sizes and noise norms, both the way the old code derived them from
``--seed`` and with every integer those files contain as a noise seed, and must fail; the same
regeneration code succeeds when handed the true noise seed (so a failure is not a bug in the attack).
"""

from __future__ import annotations

import json
import re

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from dpaudit.files.run_dirs import read_jsonl
from dpaudit.trainers.jax_bert import dp_step, sampling
from dpaudit.trainers.jax_bert.model import BertConfig, init_params
from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer, noise_key_of
from dpaudit.training.noise_source import REDACTED, NoiseSource

SECRET = 123_456_789_012  # an explicit --noise-seed; must never appear in a released file
SEED = 0  # the public --seed: the same for every run here


@pytest.fixture(scope="module")
def runs(data_dir, tmp_path_factory, tiny_config):
    """Two OS-entropy runs and two runs at the same explicit noise seed (the first keeps its checkpoints)."""
    root = tmp_path_factory.mktemp("secret-noise")
    configs = {
        "entropy_a": tiny_config(noise_seed=None),
        "entropy_b": tiny_config(noise_seed=None),
        "explicit_a": tiny_config(noise_seed=SECRET, keep_checkpoints=True),
        "explicit_b": tiny_config(noise_seed=SECRET),
    }
    return {
        name: (JaxBertTrainer().train(data_dir, root / name, config, seed=SEED), root / name)
        for name, config in configs.items()
    }


def _rows(out):
    return list(read_jsonl(out / "metrics.jsonl"))


def _weights(out):
    return load_file(str(out / "model" / "model.safetensors"))


def test_same_seed_without_noise_seed_gives_different_noise_batches_and_weights(runs):
    (_, a), (_, b) = runs["entropy_a"], runs["entropy_b"]
    rows_a, rows_b = _rows(a), _rows(b)
    assert [r["noise_norm"] for r in rows_a] != [r["noise_norm"] for r in rows_b]
    assert all(x != y for x, y in zip((r["noise_norm"] for r in rows_a), (r["noise_norm"] for r in rows_b)))
    # 6 Binomial(96, 1/6) batch sizes agree by chance with probability < 1e-5.
    assert [r["batch_size"] for r in rows_a] != [r["batch_size"] for r in rows_b]
    wa, wb = _weights(a), _weights(b)
    assert any(not np.array_equal(wa[k], wb[k]) for k in wa)


def test_same_noise_seed_is_bit_identical(runs):
    (ra, a), (rb, b) = runs["explicit_a"], runs["explicit_b"]
    untimed = lambda rows: [{k: v for k, v in r.items() if k != "examples_per_s"} for r in rows]
    assert untimed(_rows(a)) == untimed(_rows(b))
    wa, wb = _weights(a), _weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        np.testing.assert_array_equal(wa[name], wb[name], err_msg=name)
    assert ra.epsilon == rb.epsilon


def _released_text(out) -> str:
    """Every file of the run directory outside checkpoints/, as one text (the adversary's view)."""
    parts = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and "checkpoints" not in path.relative_to(out).parts:
            parts.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(parts)


def test_checkpoints_are_deleted_unless_kept_and_the_noise_seed_is_never_released(runs):
    for name in ("entropy_a", "entropy_b", "explicit_b"):
        out = runs[name][1]
        assert not (out / "checkpoints").exists(), name
        privacy = json.loads((out / "privacy.json").read_text())
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["summary"]["checkpoints_kept"] is False and "checkpoints/" in privacy["private_files"]
    kept = runs["explicit_a"][1]
    state = json.loads(sorted((kept / "checkpoints").glob("step_*/state.json"))[-1].read_text())
    assert NoiseSource.from_state(state["noise_source"]) == NoiseSource(seed=SECRET, explicit=True)
    for name in ("explicit_a", "explicit_b"):
        out = runs[name][1]
        text = _released_text(out)
        assert str(SECRET) not in text and format(SECRET, "x") not in text.lower(), name
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["config"]["noise_seed"] == REDACTED and manifest["seed"] == SEED
        privacy = json.loads((out / "privacy.json").read_text())
        assert privacy["noise_seed_explicit"] is True
        assert "holds only while that seed is secret" in privacy["guarantee"]
    manifest = json.loads((runs["entropy_a"][1] / "manifest.json").read_text())
    assert manifest["config"]["noise_seed"] is None
    privacy = json.loads((runs["entropy_a"][1] / "privacy.json").read_text())
    assert privacy["noise_seed_explicit"] is False and "OS entropy" in privacy["guarantee"]


def test_kept_checkpoints_are_warned_about(data_dir, tmp_path, tiny_config, capsys):
    JaxBertTrainer().train(data_dir, tmp_path / "run", tiny_config(keep_checkpoints=True), seed=SEED)
    err = capsys.readouterr().err
    assert "--keep-checkpoints" in err and "secret sampling and noise state" in err
    assert (tmp_path / "run" / "checkpoints").is_dir()


# -- the adversary -------------------------------------------------------------------------------


def _batch_sizes(generator: np.random.Generator, n: int, q: float, steps: int) -> list[int]:
    return [int(sampling.poisson_sample(generator, n, q).size) for _ in range(steps)]


def _noise_norms(norm, step_key, noise_std: float, steps: int) -> list[float]:
    """The noise norms the trainer's step would log: noise_std * ||N(0, I)|| drawn as dp_step draws it."""
    return [float(noise_std * norm(step_key(t))) for t in range(steps)]


def _attack(out, noise_seed_guesses):
    """What the adversary regenerates from released files: ((old-way sizes, old-way norms), per-guess ones)."""
    manifest = json.loads((out / "manifest.json").read_text())
    privacy = json.loads((out / "privacy.json").read_text())
    seed, n, steps = manifest["seed"], privacy["dataset_size"], privacy["steps"]
    q = privacy["segments"][0]["sampling_probability"]
    noise_std = privacy["noise_multipliers"][0] * privacy["clip_norm"]
    bert = BertConfig.from_hf_dict(json.loads((out / "model" / "config.json").read_text()))
    params = jax.eval_shape(lambda: init_params(bert, jax.random.PRNGKey(0), seq_len=manifest["config"]["max_length"]))
    params = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), params)
    norm = jax.jit(lambda key: dp_step._global_norm(dp_step._gaussian_like(key, params)))  # compiled once
    train_key = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
    old = (
        _batch_sizes(np.random.default_rng([seed, 1]), n, q, steps),
        _noise_norms(norm, lambda t: jax.random.fold_in(jax.random.fold_in(train_key, t), 1), noise_std, steps),
    )
    guesses = {}
    for guess in noise_seed_guesses:
        source = NoiseSource(seed=guess, explicit=True)
        key = noise_key_of(source)
        guesses[guess] = (
            _batch_sizes(source.numpy_generator(0), n, q, steps),
            _noise_norms(norm, lambda t, key=key: jax.random.fold_in(key, t), noise_std, steps),
        )
    return old, guesses


def _observed(out):
    rows = _rows(out)
    return [r["batch_size"] for r in rows], [r["noise_norm"] for r in rows]


def test_the_attack_works_when_it_knows_the_noise_seed(runs):
    """Positive control: handed the secret, the adversary's code reproduces metrics.jsonl exactly."""
    out = runs["explicit_b"][1]
    sizes, norms = _observed(out)
    _, guesses = _attack(out, [SECRET])
    assert guesses[SECRET][0] == sizes
    np.testing.assert_allclose(guesses[SECRET][1], norms, rtol=1e-6)


def test_released_files_do_not_let_an_adversary_regenerate_the_noise(runs):
    for name in ("entropy_a", "explicit_b"):
        out = runs[name][1]
        sizes, norms = _observed(out)
        integers = {int(x) for x in re.findall(r"\d+", _released_text(out)) if len(x) < 40}
        candidates = sorted(integers)[:60] + [SEED]
        old, guesses = _attack(out, candidates)
        assert old[0] != sizes, name  # the old derivation from --seed
        assert not np.allclose(old[1], norms, rtol=1e-6), name
        for guess, (g_sizes, g_norms) in guesses.items():
            assert not (g_sizes == sizes and np.allclose(g_norms, norms, rtol=1e-6)), (name, guess)
