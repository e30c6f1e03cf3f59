"""Membership attacks on a causal LM: the zlib, Min-K% and Min-K%++ scores on known numbers, the CLI end
to end beside loss and the blind baseline, the reference and RMIA attacks with user-given models, and the one-line
refusals (a pickle-only directory, an attack that does not run on a causal LM)."""

from __future__ import annotations

import json
import shutil
import zlib

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from tests.bad_inputs.test_train_runs import assert_one_line_error


def test_score_functions_on_known_numbers():
    from dpaudit.attacks.causal_mia import min_k_plus_plus_scores, min_k_scores, zlib_scores

    lp = [np.array([-1.0, -4.0, -2.0, -0.5, -3.0]), np.array([]), np.array([-2.0])]
    # Shi et al.'s count: int(5 * 0.4) = 2 lowest (-4, -3); at least one token on short texts; NaN with none.
    got = min_k_scores(lp, 0.4)
    assert got[0] == -3.5 and np.isnan(got[1]) and got[2] == -2.0
    assert min_k_scores(lp[:1], 1.0)[0] == pytest.approx(-2.1)
    text = "abcabcabcabc"
    assert zlib_scores(lp[:1], [text])[0] == pytest.approx(-2.1 / len(zlib.compress(text.encode())))
    mu, sigma = np.array([-2.0, -2.0, -1.0, -1.0, -1.0]), np.array([1.0, 2.0, 0.5, 0.0, 4.0])
    # z = (1, -1, -2, 0 (sigma 0), -0.5): the 2 lowest are -2 and -1.
    assert min_k_plus_plus_scores(lp[:1], [mu], [sigma], 0.4)[0] == pytest.approx(-1.5)


def test_fitted_offline_a_recovers_the_line():
    from dpaudit.attacks.rmia import fitted_offline_a

    p_out = np.array([0.01, 0.2, 0.5, 0.05])
    member = np.array([[True, False, True, False], [False, True, False, True], [False, False, False, False]])
    p_in = 0.3 * p_out + 0.7
    p_refs = np.where(member, p_in, p_out)
    assert fitted_offline_a(p_refs, member) == pytest.approx(0.3)
    assert fitted_offline_a(p_refs[:1], member[:1]) is None  # one reference: no row is both IN and OUT
    assert fitted_offline_a(np.where(member, 1.0, 1.5 * p_out), member) == 0.0  # clipped to [0, 1]


def test_attack_cli_runs_loss_zlib_min_k_and_min_k_pp_with_the_blind_baseline(tiny_causal_dir, data_dir, tmp_path):
    from dpaudit.attacks.causal_mia import min_k_scores, zlib_scores
    from dpaudit.inject_dir.reader import HELDOUT, TRAIN, load_inject_run
    from dpaudit.scoring import load

    out = tmp_path / "attack"
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--attacks",
            "loss,zlib,min-k,min-k++",
            "--min-k",
            "0.5",
        ],
    )
    assert result.exit_code == 0, result.output
    obj = json.loads((out / "results.json").read_text())
    assert obj["model"]["kind"] == "causal-lm"
    assert [a["attack"] for a in obj["attacks"]] == ["loss", "zlib", "min-k", "min-k++", "blind"]
    by_name = {a["attack"]: a for a in obj["attacks"]}
    assert by_name["min-k"]["parameters"]["k"] == 0.5 and by_name["min-k++"]["parameters"]["k"] == 0.5
    assert "Carlini" in by_name["zlib"]["reference"] and "Zhang" in by_name["min-k++"]["reference"]
    for name in ("loss", "zlib", "min-k", "min-k++"):
        # data_dir's canaries were inserted 1, 2 and 3 times: one audit per frequency (canaries-f1 is per example)
        assert [t["task"] for t in by_name[name]["tasks"]] == ["examples", "canaries-f1", "canaries-f2", "canaries-f3"]
    # The written scores are the scorer's: recompute two examples' zlib and Min-K% scores by hand (to 1e-6: padding
    # in another batch moves float32 sums by ~1e-8).
    rows = {(r["task"], r["id"]): r for r in map(json.loads, (out / "scores/mia_zlib.jsonl").read_text().splitlines())}
    min_k = {
        (r["task"], r["id"]): r for r in map(json.loads, (out / "scores/mia_min-k.jsonl").read_text().splitlines())
    }
    run = load_inject_run(data_dir)
    train, held = run.split(TRAIN), run.split(HELDOUT)
    member = next(k for k in rows if k[0] == "examples" and k[1].startswith("train:"))
    nonmember = next(k for k in rows if k[0] == "examples" and k[1].startswith("heldout:"))
    texts = [train.texts[int(member[1].split(":")[1])], held.texts[int(nonmember[1].split(":")[1])]]
    lp = load(tiny_causal_dir, device="cpu", progress=False).token_log_probs(texts, max_length=128)
    np.testing.assert_allclose([rows[member]["score"], rows[nonmember]["score"]], zlib_scores(lp, texts), atol=1e-6)
    np.testing.assert_allclose([min_k[member]["score"], min_k[nonmember]["score"]], min_k_scores(lp, 0.5), atol=1e-6)
    assert rows[member]["member"] and not rows[nonmember]["member"]


def test_ref_and_rmia_run_on_a_causal_target_with_given_models(tiny_causal_dir, data_dir, tmp_path):
    """No clm trainer needed: --reference-model and --shadow-dirs give the reference models (same tokenizer)."""
    from dpaudit.attacks.run import attack
    from dpaudit.inject_dir.reader import HELDOUT, PUBLIC, TRAIN, load_inject_run
    from dpaudit.scoring import load
    from tests.causal_fixtures import build_tiny_causal
    from tests.conftest import TINY_CAUSAL_TEXTS

    public = load_inject_run(data_dir).split(PUBLIC).texts
    dirs = []
    for seed in (1, 2):
        path = build_tiny_causal(tmp_path / f"ref{seed}", TINY_CAUSAL_TEXTS, seed=seed)
        (path / "members.json").write_text(json.dumps(public[seed - 1 :: 4]))  # half of public.jsonl stays fresh
        dirs.append(str(path))
    results = attack(
        tiny_causal_dir, data_dir, ["ref", "rmia"], shadow_dirs=tuple(dirs), progress=False, blind_baseline=False
    )
    # RMIA's offline a on a causal LM: fitted from the references alone, on the public rows IN one and OUT of the other.
    from dpaudit.attacks.rmia import fitted_offline_a

    rows = public[0::4] + public[1::4]
    member = np.array(
        [
            [True] * len(public[0::4]) + [False] * len(public[1::4]),
            [False] * len(public[0::4]) + [True] * len(public[1::4]),
        ]
    )
    p_refs = np.stack([np.exp(-load(d, device="cpu", progress=False).example_losses(rows)) for d in dirs])
    assert results["rmia"].parameters["offline_a"] == pytest.approx(fitted_offline_a(p_refs, member), abs=1e-6)
    assert "least-squares" in results["rmia"].parameters["offline_a_reason"]
    ref = results["ref"]
    assert ref.parameters["reference_model"].startswith("--shadow-dirs")
    rows = [r for r in results.score_files["scores/mia_ref.jsonl"] if r["task"] == "examples"][:2]
    texts = [
        load_inject_run(data_dir).split(TRAIN if r["member"] else HELDOUT).texts[int(r["id"].split(":")[1])]
        for r in rows
    ]
    target, reference = (
        load(p, device="cpu", progress=False).example_losses(texts) for p in (tiny_causal_dir, dirs[0])
    )
    np.testing.assert_allclose([r["score"] for r in rows], reference - target, atol=1e-6)


def test_pickle_only_causal_directory_is_refused_in_one_line(tiny_causal_dir, data_dir, tmp_path):
    model = tmp_path / "pickled"
    shutil.copytree(tiny_causal_dir, model)
    (model / "model.safetensors").rename(model / "pytorch_model.bin")
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(model),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "out"),
            "--attacks",
            "loss,zlib",
        ],
    )
    assert_one_line_error(result, "pytorch_model.bin", "pickle", "safetensors")
    assert not (tmp_path / "out").exists()


def test_an_attack_that_does_not_run_on_a_causal_lm_is_refused_in_one_line(tiny_causal_dir, data_dir, tmp_path):
    from dpaudit.attacks.registry import attack_class, available_attacks

    unsupported = sorted(name for name in available_attacks() if "causal-lm" not in attack_class(name).model_kinds)
    assert unsupported, "every attack runs on a causal LM: pick another refusal to test"
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "out"),
            "--attacks",
            f"loss,{unsupported[0]}",
        ],
    )
    assert_one_line_error(result, f"--attacks {unsupported[0]} ", "is a causal-lm")
    assert not (tmp_path / "out").exists()
    # ... and the causal attacks refuse a masked LM the same way (they read next-token probabilities).
    from dpaudit.attacks.registry import resolve_attacks
    from dpaudit.common.errors import UserInputError

    with pytest.raises(UserInputError, match="--attacks min-k\\+\\+ needs a causal LM"):
        resolve_attacks(["min-k++"], "masked-lm")


def test_min_k_option_is_a_fraction(tiny_causal_dir, data_dir, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "out"),
            "--attacks",
            "min-k",
            "--min-k",
            "1.5",
        ],
    )
    assert_one_line_error(result, "--min-k")


def test_shadow_and_rmia_train_their_models_like_a_clm_target(data_dir, tmp_path):
    """A `dpaudit train --task clm` target: the shadow models (shared by shadow and rmia), LiRA's and ref's reference
    model are trained through its own trainer and recipe (the model fleet, in process), and scored through the causal
    scorer."""
    from dpaudit.attacks.run import attack

    target = tmp_path / "clm"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--task",
            "clm",
            "--mode",
            "sgd",
            "--preset",
            "tiny",
            "--vocab-size",
            "300",
            "--max-length",
            "16",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--eval-examples",
            "0",
            "--data",
            str(data_dir),
            "--out",
            str(target),
            "--seed",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    results = attack(
        target,
        data_dir,
        ["shadow", "rmia", "lira", "ref"],
        shadow_models=2,
        shadow_cache=str(tmp_path / "cache"),
        progress=False,
        blind_baseline=False,
    )
    for name in ("shadow", "rmia", "lira"):
        info = results[name].shadow_models
        assert info.trainer == "edp-sgd" and len(info.models) == 2, info
        assert all(m.steps == info.target_steps for m in info.models), info  # trained like the target
    assert "next-token" in results["shadow"].parameters["features"]
    assert all(0 <= t.auc <= 1 for name in ("shadow", "rmia", "lira", "ref") for t in results[name].tasks)
