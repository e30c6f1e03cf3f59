"""The Python API (dpaudit.inject, dpaudit.attack, dpaudit.report) on a user's own split and a model built in memory
with transformers, and a torch model audited by the command line with jax, flax and optax unimportable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dpaudit
from dpaudit.common.errors import UserInputError

LABELS = ("alarm", "music", "weather")
ROWS = [
    (f"{verb} number {i} please", LABELS[i % 3]) for i, verb in zip(range(150), ["wake me", "play", "forecast"] * 50)
]


def _csv(path: Path, rows) -> Path:
    path.write_text("text,category\n" + "".join(f"{t},{label}\n" for t, label in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def api_run(tmp_path_factory):
    """A user's split injected through the API, a tiny transformers classifier in memory (random weights: the tests
    check the plumbing, not a leak) and its tokenizer learned from the public rows."""
    from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

    from dpaudit.training.tokenizer import train_wordpiece

    root = tmp_path_factory.mktemp("api")
    train, heldout, public = (
        _csv(root / "train.csv", ROWS[:60]),
        _csv(root / "test.csv", ROWS[55:110]),
        _csv(root / "public.csv", ROWS[110:]),
    )
    data = dpaudit.inject(
        root / "data", train=train, heldout=heldout, public=public, label_column="category", per_frequency=2, seed=1
    )
    tok = train_wordpiece([t for t, _ in ROWS[110:]], vocab_size=128, min_frequency=1)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        num_labels=3,
        id2label=dict(enumerate(LABELS)),
        label2id={name: i for i, name in enumerate(LABELS)},
    )
    return root, data, BertForSequenceClassification(config), tokenizer


def test_inject_returns_the_summary_and_the_canaries(api_run):
    root, data, _, _ = api_run
    assert data.path == root / "data" and data.summary["counts"]["overlap_removed"]["heldout_in_train"] == 5
    assert (data.summary["counts"]["members"], data.summary["counts"]["heldout"]) == (60, 50)
    assert "Your split: members = the --train rows" in str(data)
    rows = data.rows()
    assert len(rows) == data.summary["counts"]["canaries"] > 0 and {r["label"] for r in rows} <= set(LABELS)
    with pytest.raises(TypeError, match="unknown option"):
        dpaudit.inject(root / "x", corpus="builtin:assistant", label_columns="category")
    with pytest.raises(UserInputError, match="--train needs --heldout"):
        dpaudit.inject(root / "y", train=root / "train.csv")
    assert not (root / "x").exists() and not (root / "y").exists()


def test_attack_an_in_memory_model_then_report_and_tables(api_run):
    root, data, model, tokenizer = api_run
    kept = root / "saved"
    results = dpaudit.attack(
        model, data.path, ["loss"], tokenizer=tokenizer, save_to=kept, out=root / "attack", progress=False
    )
    assert (kept / "config.json").is_file() and (kept / "model.safetensors").is_file()
    loss = results["loss"]
    assert {t.task for t in loss.tasks} >= {"examples"}
    rows = [r for r in results.rows() if r["attack"] == "loss"]
    assert [r["task"] for r in rows] == [t.task for t in loss.tasks]
    assert rows[0]["auc"] == loss.tasks[0].auc and rows[0]["model"] == str(kept) and "audit" not in rows[0]
    page = dpaudit.report(root / "attack", root / "page.html")
    assert page.path.stat().st_size > 1000 and callable(dpaudit.report) and dpaudit.report.write_report
    assert [r["run"] for r in page.rows()] == [str(root / "attack")] * len(results.rows())
    with pytest.raises(UserInputError, match="needs its tokenizer"):
        dpaudit.attack(model, data.path, ["loss"], progress=False)
    try:
        import pandas  # noqa: F401
    except ImportError:  # not a dependency of dpaudit: the message says how to get it
        with pytest.raises(
            ImportError, match=r"to_pandas\(\) needs pandas, which dpaudit does not install: pip install pandas"
        ):
            results.to_pandas()
    else:
        frame = results.to_pandas()
        assert list(frame["attack"]) == [r["attack"] for r in results.rows()] and len(page.to_pandas()) == len(frame)


_NO_JAX = textwrap.dedent("""
    import importlib.abc, sys

    BLOCKED = ("jax", "jaxlib", "flax", "optax", "jax_privacy", "opacus")  # the jax and bench extras, the test extra

    class Blocked(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, Blocked())
    from dpaudit.cli import cli

    for args in (["attack", "--help"], ["attack", "--model", sys.argv[1], "--data", sys.argv[2], "--attacks", "loss",
                                        "--out", sys.argv[3]]):
        try:
            cli.main(args, prog_name="dpaudit")
        except SystemExit as exit:
            assert exit.code in (0, None), (args, exit.code)
    assert not any(m.split(".")[0] in BLOCKED for m in sys.modules), "jax was imported"
    print("torch" in sys.modules)
""")


def test_a_torch_model_is_audited_without_jax(api_run, tmp_path):
    """`pip install dpaudit[torch]` is enough to audit a torch model: the command line imports neither jax nor another
    extra's package (a finder makes them unimportable, as in an environment without them)."""
    root, data, model, tokenizer = api_run
    saved = root / "saved"
    if not saved.exists():  # the test above saved it; alone, this test saves it itself
        model.save_pretrained(saved)
        tokenizer.save_pretrained(saved)
    out = tmp_path / "attack"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _NO_JAX, str(saved), str(data.path), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"  # torch did the scoring
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [a["attack"] for a in results["attacks"]][0] == "loss" and (out / "index.html").is_file()


def test_canary_attacks_on_a_run_without_canaries_are_refused_in_one_line(api_run, canary_model, tmp_path):
    """inject --no-canaries, then the default canary attacks: a one-line refusal naming the membership attacks,
    before anything is written (it crashed with an IndexError deep in exposure)."""
    root, _, _, _ = api_run
    bare = dpaudit.inject(
        root / "bare",
        train=root / "train.csv",
        heldout=root / "test.csv",
        label_column="none",
        no_canaries=True,
        seed=1,
    )
    out = tmp_path / "attack"
    with pytest.raises(UserInputError, match=r"has no canaries .*--attacks exposure,reconstruction.*--attacks loss"):
        dpaudit.attack(canary_model, bare.path, ["exposure", "reconstruction"], out=out)
    assert not out.exists()


def test_a_transformers_trained_model_gets_every_attack_with_a_stated_claim(api_run, tmp_path):
    """A model trained with plain transformers + torch (here, in the test) is audited with every
    membership attack; its shadow, reference, LiRA and RMIA models are trained by a named dpaudit trainer and recipe
    (--shadow-trainer/--shadow-config), and its claim is stated (--claimed-epsilon/--claimed-delta)."""
    import torch

    root, data, model, tokenizer = api_run
    torch.manual_seed(0)
    rows = [json.loads(line) for line in (data.path / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    label_id = model.config.label2id
    batch = tokenizer([r["text"] for r in rows], padding=True, truncation=True, max_length=16, return_tensors="pt")
    batch.pop("token_type_ids", None)
    target = torch.tensor([label_id[r["label"]] for r in rows])
    trained = type(model)(model.config)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-2)
    trained.train()
    first = None
    for _ in range(50):  # full-batch steps: it fits its 60-odd training rows
        loss = trained(**batch, labels=target).loss
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    trained.eval()
    assert loss.item() < first / 2  # it learned
    saved = tmp_path / "hf-model"
    trained.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    recipe = {
        "task": "classify",
        "labels": list(LABELS),
        "preset": "tiny",
        "vocab_size": 128,
        "max_length": 16,
        "epochs": 2,
        "batch_size": 16,
        "mode": "sgd",
        "learning_rate": 3e-3,
    }
    (tmp_path / "recipe.json").write_text(json.dumps(recipe), encoding="utf-8")
    attacks = ["loss", "shadow", "ref", "lira", "rmia"]
    results = dpaudit.attack(
        saved,
        data.path,
        attacks,
        shadow_models=2,
        shadow_trainer="edp-sgd",
        shadow_config=str(tmp_path / "recipe.json"),
        shadow_cache=str(tmp_path / "cache"),
        claimed_epsilon=8.0,
        claimed_delta=1e-5,
        out=tmp_path / "attack",
        progress=False,
    )
    assert not results.errors
    assert {r.attack for r in results.attacks} == {*attacks, "blind"}  # the blind baseline rides along
    assert results.claimed.epsilon == 8.0 and results.claimed.delta == 1e-5
    for name in ("shadow", "ref", "lira", "rmia"):
        assert results[name].shadow_models.origin.startswith("--shadow-trainer edp-sgd"), name
    for result in results.attacks:
        assert all(0.0 <= t.auc <= 1.0 for t in result.tasks), result.attack
    assert (tmp_path / "attack" / "index.html").is_file()


def test_an_opacus_accountants_history_states_the_claim_accounted_here(api_run, tmp_path):
    """--claimed-from-opacus: an Opacus accountant's state_dict() (its history) is the claim of a model trained with
    Opacus; the epsilon is accounted here by PLD, checked against plain dp_accounting composed in the test."""
    import dp_accounting

    root, data, model, tokenizer = api_run
    history = [[1.1, 0.01, 300], [0.9, 0.02, 100]]  # (noise_multiplier, sample_rate, steps), as Opacus stores it
    state = tmp_path / "accountant.json"
    state.write_text(json.dumps({"history": history, "mechanism": "rdp"}), encoding="utf-8")
    results = dpaudit.attack(
        model,
        data.path,
        ["loss"],
        tokenizer=tokenizer,
        claimed_from_opacus=str(state),
        claimed_delta=1e-5,
        progress=False,
        blind_baseline=False,
    )
    pld = dp_accounting.pld.PLDAccountant()
    for sigma, q, steps in history:
        pld.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    expected = pld.get_epsilon(1e-5)
    assert results.claimed.private and results.claimed.delta == 1e-5
    assert results.claimed.epsilon == pytest.approx(expected, rel=0.02)
    assert "Opacus accountant's history" in results.claimed.guarantee
    from dpaudit.common.figures import format_up

    assert results.claimed.guarantee.startswith(  # epsilon and delta rounded up
        f"({format_up(results.claimed.epsilon)}, {format_up(1e-5, 2)})-DP"
    )
    (tmp_path / "bad.json").write_text('{"history": [[1.0, 0.1]]}', encoding="utf-8")
    with pytest.raises(UserInputError, match=r"--claimed-from-opacus .*bad.json: history entry 0"):
        dpaudit.attack(
            model,
            data.path,
            ["loss"],
            tokenizer=tokenizer,
            claimed_from_opacus=str(tmp_path / "bad.json"),
            claimed_delta=1e-5,
            progress=False,
        )
    with pytest.raises(UserInputError, match="needs --claimed-delta"):
        dpaudit.attack(model, data.path, ["loss"], tokenizer=tokenizer, claimed_from_opacus=str(state), progress=False)
