"""A model trained elsewhere ("brought": a Hugging Face directory without a dpaudit manifest or privacy.json).

- Its shadow and reference models (``--shadow-trainer NAME --shadow-config FILE.json``) start from a fresh copy of
  its architecture and tokenizer, so they score its tokens (they used to train with the recipe's own WordPiece and
  preset and the attack failed after every shadow had trained: "its tokenizer differs from the target's (435 vs 300
  tokens)"); a recipe whose models cannot match it is refused before anything trains or is written.
- Its held-out utility, which no train run logged, is measured by the attack on heldout.jsonl beside the trivial
  baseline, and shown in the terminal, results.json and the report (it used to be absent).

The brought model is a tiny edp-sgd classifier with a 300-token vocabulary (the recipe's own tokenizer would have
another size), its model/ copied without the run's manifest and privacy.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

pytest.importorskip("torch")

#: The brought model: a tiny non-private classifier of the shared inject directory (24 held-out rows, all evaluated).
TARGET = [
    "train",
    "--trainer",
    "edp-sgd",
    "--task",
    "classify",
    "--mode",
    "sgd",
    "--non-private",
    "--epochs",
    "3",
    "--batch-size",
    "16",
    "--max-length",
    "16",
    "--vocab-size",
    "300",
    "--eval-examples",
    "24",
    "--seed",
    "1",
]
#: The recipe its shadows train with (README's "a model trained elsewhere"): no tokenizer, no architecture in it.
RECIPE = {"mode": "sgd", "epochs": 1, "batch_size": 16, "max_length": 16, "noise_seed": 0}


def _invoke(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output[-3000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def brought(data_dir, tmp_path_factory):
    """(the dpaudit run, its model/ copied bare: the brought model)."""
    root = tmp_path_factory.mktemp("brought")
    result = _invoke(*TARGET, "--data", data_dir, "--out", root / "run")
    assert result.exit_code == 0, result.output[-3000:]
    shutil.copytree(root / "run" / "model", root / "model")
    assert not (root / "model" / "privacy.json").exists() and not (root / "model" / "manifest.json").exists()
    return root / "run", root / "model"


@pytest.fixture(scope="module")
def attacked(brought, data_dir, tmp_path_factory):
    """``dpaudit attack`` of the brought model with LiRA (2 shadows) and ref (1 reference model): (result, out, cache)."""
    root = tmp_path_factory.mktemp("attack")
    (root / "recipe.json").write_text(json.dumps(RECIPE), encoding="utf-8")
    out, cache = root / "attack", root / "cache"
    result = _invoke(
        "attack",
        "--model",
        brought[1],
        "--data",
        data_dir,
        "--out",
        out,
        "--attacks",
        "lira,ref",
        "--shadow-models",
        "2",
        "--shadow-trainer",
        "edp-sgd",
        "--shadow-config",
        root / "recipe.json",
        "--shadow-cache",
        cache,
    )
    return result, out, cache


def _vocab(model_dir: Path) -> dict[str, int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_vocab(with_added_tokens=True)


def test_shadows_and_references_of_a_brought_model_take_its_tokenizer_and_architecture(brought, attacked):
    from dpaudit.files.model_dirs import architecture_difference, read_config

    result, out, cache = attacked
    assert result.exit_code == 0, result.output[-3000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert not results["errors"]
    by_attack = {a["attack"]: a for a in results["attacks"]}
    assert {"lira", "ref"} <= set(by_attack)
    target = brought[1]
    runs = [Path(m["path"]) for name in ("lira", "ref") for m in by_attack[name]["shadow_models"]["models"]]
    assert len(runs) == 3  # 2 LiRA shadows and 1 reference model, each a train run directory in the cache
    models = [run / "model" for run in runs]
    for run, model in zip(runs, models):
        assert _vocab(model) == _vocab(target), model  # the target's tokenizer, token for token
        assert architecture_difference(read_config(model, where=str(model)), read_config(target, where="t")) is None
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        start = Path(manifest["config"]["init_from"])
        assert start.name == "start" and start.parent == run.parent  # its own fresh start in its cache entry...
        assert not start.exists()  # ...removed once the model was trained (rebuilt identically if ever needed)
    # the fresh starts are new weights (none of the target's): each differs from the target and from the others
    from safetensors.numpy import load_file

    embeddings = [
        load_file(str(p / "model.safetensors"))["bert.embeddings.word_embeddings.weight"] for p in (target, *models)
    ]
    assert all(not (a == b).all() for i, a in enumerate(embeddings) for b in embeddings[i + 1 :])


@pytest.mark.parametrize(
    "recipe, extra, needles",
    [
        (
            {"task": "mlm", "mode": "sgd"},
            [],
            ["task 'mlm', but --model", "is a classifier (BertForSequenceClassification)", 'set "task": "classify"'],
        ),
        (
            {"non_private": True},
            ["--shadow-trainer", "jax-bert"],
            ["--shadow-trainer jax-bert trains masked LMs only", "--shadow-trainer edp-sgd"],
        ),
        (
            {"mode": "sgd", "max_length": 256},
            [],
            ["max_length 256 exceeds --model", "(128 positions)", 'set "max_length" to at most 128'],
        ),
        (
            {"mode": "sgd", "init_from": "CAUSAL"},
            [],
            ["is not --model", "architecture and tokenizer (model_type 'gpt2' vs 'bert')", "leave init_from out"],
        ),
    ],
    ids=["another-task", "trainer-of-another-kind", "max-length-beyond-positions", "start-of-another-architecture"],
)
def test_a_recipe_that_cannot_match_is_refused_before_any_shadow_trains(
    recipe, extra, needles, brought, data_dir, tiny_causal_dir, tmp_path
):
    recipe = {k: (str(tiny_causal_dir) if v == "CAUSAL" else v) for k, v in recipe.items()}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe), encoding="utf-8")
    out, cache = tmp_path / "attack", tmp_path / "cache"
    result = _invoke(
        "attack",
        "--model",
        brought[1],
        "--data",
        data_dir,
        "--out",
        out,
        "--attacks",
        "lira",
        "--shadow-models",
        "2",
        "--shadow-trainer",
        "edp-sgd",
        *extra,
        "--shadow-config",
        tmp_path / "recipe.json",
        "--shadow-cache",
        cache,
    )
    _one_line_error(result, *needles)
    assert not out.exists() and not cache.exists()


def test_a_brought_model_s_heldout_utility_is_measured_and_shown(brought, attacked):
    """The attack's figure on heldout.jsonl is the train run's own logged one (same 24 rows, same baseline rule)."""
    from dpaudit.report.load import run_utility

    result, out, _ = attacked
    assert result.exit_code == 0, result.output[-3000:]
    logged = run_utility(None, json.loads((brought[0] / "manifest.json").read_text(encoding="utf-8")))
    measured = json.loads((out / "results.json").read_text(encoding="utf-8"))["model"]["utility"]
    assert measured["name"] == logged.name == "held-out accuracy"
    assert measured["value"] == pytest.approx(logged.value) and measured["baseline"] == pytest.approx(logged.baseline)
    assert (measured["rows"], measured["heldout_rows"], measured["predictions"]) == (24, 24, 24)
    where = "measured by dpaudit attack on 24 of 24 heldout.jsonl rows"
    line = next(x for x in result.output.splitlines() if x.startswith("held-out accuracy "))
    assert f"(trivial baseline {logged.baseline:.1%}: always the majority class)" in line and where in line
    page = (out / "index.html").read_text(encoding="utf-8")
    assert where in page and "Held-out utility" in page


def test_a_brought_language_model_s_utility_counts_its_tokens(tiny_causal_dir, data_dir, tmp_path):
    """A causal LM: next-token accuracy over every held-out row's tokens after the first, beside the most frequent
    next token."""
    out = tmp_path / "attack"
    result = _invoke("attack", "--model", tiny_causal_dir, "--data", data_dir, "--out", out, "--attacks", "loss")
    assert result.exit_code == 0, result.output[-3000:]
    utility = json.loads((out / "results.json").read_text(encoding="utf-8"))["model"]["utility"]
    assert (
        utility["name"] == "held-out next-token accuracy" and utility["rule"] == "always the most frequent next token"
    )
    assert utility["rows"] == utility["heldout_rows"] == 24 and utility["predictions"] > 24
    assert 0.0 <= utility["value"] <= 1.0 and 0.0 < utility["baseline"] < 1.0
    assert "measured by dpaudit attack on 24 of 24 heldout.jsonl rows" in result.output


def test_a_dpaudit_run_keeps_its_own_logged_utility(brought, data_dir, tmp_path):
    """The run directory of the same model: its train run logged the figure; the attack measures nothing."""
    out = tmp_path / "attack"
    result = _invoke("attack", "--model", brought[0], "--data", data_dir, "--out", out, "--attacks", "loss")
    assert result.exit_code == 0, result.output[-3000:]
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["model"].get("utility") is None
    assert "measured by dpaudit attack" not in (out / "index.html").read_text(encoding="utf-8")
