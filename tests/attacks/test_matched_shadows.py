"""Shadow and reference models that match the target, on a dataset whose labels are unevenly spread.

One tiny torch classifier (edp-sgd, sgd mode) is trained on an inject directory whose ``public.jsonl`` lacks
four of the intents that ``train.jsonl`` holds (the target maps them with ``--unknown-label``): the case that
stopped shadow, LiRA and RMIA with "labels must be N class indices in [0, K)". One attack run with every
shadow-trained attack (2 shadows each, cached in a module directory) is shared by the tests: the shadows train
as many optimizer steps as the target, use its label set, record their held-out accuracy beside its own, and
RMIA's population rows trained no reference model. A failing attack leaves the others' results written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import dpaudit
from dpaudit.cli import cli
from dpaudit.files.run_dirs import sha256_file

pytest.importorskip("torch")

#: 300 utterances: 40 train rows (+ 4 canaries), 60 held out, 200 public.
INJECT = [
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "300",
    "--heldout-size",
    "60",
    "--public-size",
    "200",
    "--frequencies",
    "1",
    "--per-frequency",
    "4",
    "--seed",
    "0",
]
TRAIN = [
    "--trainer",
    "edp-sgd",
    "--mode",
    "sgd",
    "--task",
    "classify",
    "--preset",
    "tiny",
    "--vocab-size",
    "300",
    "--max-length",
    "16",
    "--epochs",
    "3",
    "--batch-size",
    "16",
    "--eval-examples",
    "60",
    "--noise-seed",
    "1",
    "--seed",
    "0",
]
SHADOW_ATTACKS = ["loss", "shadow", "lira", "rmia"]
SEEDED = {"noise_seed": 0}  # reproducible shadows (their batch order), as the target's --noise-seed


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    """(data, target, dropped labels): public.jsonl without 4 of train.jsonl's intents, and the target trained on it."""
    root = tmp_path_factory.mktemp("uneven")
    data = root / "data"
    _cli("inject", *INJECT, "--out", str(data))
    public = _rows(data / "public.jsonl")
    train_labels = {r["label"] for r in _rows(data / "train.jsonl")}
    dropped = sorted(train_labels)[:4]
    (data / "public.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in public if r["label"] not in dropped), encoding="utf-8"
    )
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    manifest["outputs"]["public.jsonl"] = sha256_file(data / "public.jsonl")
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    keep = sorted({r["label"] for r in public} - set(dropped))
    target = root / "target"
    _cli("train", *TRAIN, "--unknown-label", keep[0], "--data", str(data), "--out", str(target))
    return data, target, dropped


@pytest.fixture(scope="module")
def matched(uneven, tmp_path_factory):
    """The attack run with every shadow-trained attack and the ref attack (2 shadows each), and its cache."""
    data, target, _ = uneven
    root = tmp_path_factory.mktemp("matched")
    cache = root / "cache"
    results = dpaudit.attack(
        target,
        data,
        [*SHADOW_ATTACKS, "ref"],
        out=root / "attack",
        shadow_models=2,
        shadow_cache=str(cache),
        shadow_overrides=SEEDED,
        progress=False,
    )
    return results, root / "attack", cache


def _manifest(path: str | Path) -> dict:
    return json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))


def test_uneven_labels_no_longer_crash_and_shadows_use_the_targets_label_set(uneven, matched):
    data, target, dropped = uneven
    results, _, _ = matched
    assert {*SHADOW_ATTACKS, "ref"} <= {a.attack for a in results.attacks} and not results.errors
    target_labels = json.loads((target / "model" / "config.json").read_text())["id2label"]
    assert not set(dropped) & set(target_labels.values())  # the public label set: the dropped intents are not classes
    for name in ("shadow", "lira", "rmia", "ref"):
        info = results[name].shadow_models
        assert info is not None and info.models, name
        for model in info.models:
            config = json.loads((Path(model.path) / "model" / "config.json").read_text())
            assert config["id2label"] == target_labels, (name, model.path)


def test_shadows_run_as_many_optimizer_steps_as_the_target(uneven, matched):
    _, target, _ = uneven
    results, _, _ = matched
    steps = _manifest(target)["steps"]
    batch = _manifest(target)["config"]["batch_size"]
    for name in ("shadow", "lira", "rmia", "ref"):
        info = results[name].shadow_models
        assert info.target_steps == steps and info.target_batch_size == batch
        for model in info.models:  # read from each shadow's own train run directory
            ran = _manifest(model.path)
            assert ran["steps"] == steps and ran["config"]["batch_size"] == batch, (name, model)
    # the public-part shadows (shadow, rmia) and the reference model train on exactly the target's rows
    n = json.loads((target / "privacy.json").read_text())["dataset_size"]
    for name in ("shadow", "ref"):
        assert {m.train_rows for m in results[name].shadow_models.models} == {n}
        assert not any("rows, the target on" in w for w in results[name].warnings)


def test_each_shadows_heldout_accuracy_is_recorded_beside_the_targets(uneven, matched):
    _, target, _ = uneven
    results, out, _ = matched
    want = _manifest(target)["summary"]["eval_accuracy"]
    info = results["lira"].shadow_models
    assert info.utility == "held-out accuracy" and info.target_heldout_accuracy == pytest.approx(want)
    accuracies = [m.heldout_accuracy for m in info.models]
    assert all(a is not None for a in accuracies)
    assert accuracies == [_manifest(m.path)["summary"]["eval_accuracy"] for m in info.models]
    assert info.mean_heldout_accuracy == pytest.approx(np.mean(accuracies))
    assert info.mismatch == (abs(info.mean_heldout_accuracy - want) > info.margin)
    saved = json.loads((out / "results.json").read_text())
    lira = next(a for a in saved["attacks"] if a["attack"] == "lira")
    assert lira["shadow_models"]["schema"] == "dpaudit.shadows/1" and len(lira["shadow_models"]["models"]) == 2


def _with_accuracy(target: Path, copy: Path, accuracy: float) -> Path:
    """A copy of the target run whose manifest summary records ``accuracy`` as its held-out accuracy."""
    shutil.copytree(target, copy)
    manifest = _manifest(copy)
    manifest["summary"]["eval_accuracy"] = accuracy
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return copy


def test_the_mismatch_warning_fires_for_a_target_unlike_its_shadows(uneven, matched, tmp_path):
    """The same shadows (from the cache) beside a copy of the target whose recorded held-out accuracy is 0.95."""
    data, target, _ = uneven
    results, _, cache = matched
    mean = results["shadow"].shadow_models.mean_heldout_accuracy
    copy = _with_accuracy(target, tmp_path / "target", 0.95)
    again = dpaudit.attack(
        copy, data, ["shadow"], shadow_models=2, shadow_cache=str(cache), shadow_overrides=SEEDED, progress=False
    )
    info = again["shadow"].shadow_models
    assert all(m.cached for m in info.models) and info.mean_heldout_accuracy == pytest.approx(mean)
    assert info.mismatch
    warned = [w for w in again["shadow"].warnings if "differs from the target's" in w]
    assert f"from the target's 95.0% by {(0.95 - mean) * 100:.1f} points (more than 10)" in warned[0]


def test_the_mismatch_warning_needs_a_gap_beyond_the_margin():
    """models_info on a deliberately undertrained shadow (5%) and a matched one: a mean 8 points from the target's is
    within the 10-point margin (no warning), 12 points beyond it (a warning)."""
    from dpaudit.attacks.shadow_models import ACCURACY_MARGIN, ShadowSpec, TargetRecipe, TrainedShadow, models_info

    assert ACCURACY_MARGIN == 0.10
    models = [
        TrainedShadow(
            ShadowSpec(i, np.ones(3, bool), i), Path(f"m{i}"), False, train_rows=3, utility=("held-out accuracy", acc)
        )
        for i, acc in enumerate((0.05, 0.65))
    ]
    for target, fires in ((0.43, False), (0.47, True), (0.23, True), (0.27, False)):
        recipe = TargetRecipe(trainer="t", config={}, seed=0, utility=("held-out accuracy", target))
        info, warnings = models_info(recipe, models, role="shadow", data="d", notes=["a note"])
        assert info.mismatch is fires and info.mean_heldout_accuracy == pytest.approx(0.35), target
        assert any("differs from the target's" in w for w in warnings) is fires and "a note" in warnings
        assert [m.heldout_accuracy for m in info.models] == [0.05, 0.65]


def test_rmia_population_rows_trained_no_reference_model(uneven, matched):
    from dpaudit.attacks.shadow_models import public_pool, split_public
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import resolve_model

    data, target, _ = uneven
    results, _, _ = matched
    rmia = results["rmia"]
    pool = public_pool(load_inject_run(data), resolve_model(target).label_set())
    n = json.loads((target / "privacy.json").read_text())["dataset_size"]
    reference, population = split_public(len(pool.texts), n, 0)
    z = {pool.texts[i] for i in population}
    assert population.size and not set(reference) & set(population)
    assert f"({len(population)} rows), disjoint" in rmia.parameters["population"]
    for model in rmia.shadow_models.models:
        trained = set(load_inject_run(Path(model.path).parent / "data").train_texts)
        assert trained and not trained & z, model.path


def test_a_failing_attack_keeps_the_others_results(uneven, matched, tmp_path, monkeypatch):
    """ref fails while it runs (a simulated crash): loss is written, the failure recorded, exit status 1."""
    from dpaudit.attacks.ref import RefAttack

    data, target, _ = uneven

    def crash(self, context):
        raise RuntimeError("simulated crash in the reference model")

    monkeypatch.setattr(RefAttack, "run", crash)
    out = tmp_path / "attack"
    run = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(target),
            "--data",
            str(data),
            "--out",
            str(out),
            "--attacks",
            "loss,ref",
            "--reference-model",
            str(target),
        ],
    )
    assert run.exit_code == 1, run.output
    assert "error: ref failed: RuntimeError: simulated crash" in run.output
    saved = json.loads((out / "results.json").read_text())
    ran = [a["attack"] for a in saved["attacks"]]
    assert "loss" in ran and "ref" not in ran
    assert saved["errors"] == [
        {"attack": "ref", "error": "RuntimeError: simulated crash in the reference model", "type": "RuntimeError"}
    ]
    assert any(w.startswith("ref failed and has no result") for w in saved["warnings"])
    alone = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(target),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "alone"),
            "--attacks",
            "ref",
            "--reference-model",
            str(target),
        ],
    )
    assert alone.exit_code != 0 and not (tmp_path / "alone").exists()  # no attack left: nothing is written


def test_shadow_dirs_are_checked_before_anything_is_written(uneven, tmp_path):
    data, target, _ = uneven
    bad = tmp_path / "bad-shadow"
    bad.mkdir()
    (bad / "members.json").write_text("[]", encoding="utf-8")
    for members, needle in (("[]", "--shadow-dirs"), ("{", "not a readable JSON list")):
        (bad / "members.json").write_text(members, encoding="utf-8")
        if needle == "not a readable JSON list":
            shutil.copytree(target / "model", bad, dirs_exist_ok=True)
        run = CliRunner().invoke(
            cli,
            [
                "attack",
                "--model",
                str(target),
                "--data",
                str(data),
                "--out",
                str(tmp_path / "o"),
                "--attacks",
                "loss,lira",
                "--shadow-dirs",
                str(bad),
                "--shadow-dirs",
                str(bad),
            ],
        )
        assert run.exit_code == 2 and needle in run.output and len(run.output.strip().splitlines()) == 1, run.output
        assert not (tmp_path / "o").exists()


def test_claimed_epsilon_states_the_claim_of_a_model_trained_elsewhere(uneven, tmp_path):
    data, target, _ = uneven
    bare = tmp_path / "hf"
    shutil.copytree(target / "model", bare)
    results = dpaudit.attack(bare, data, ["loss"], progress=False, claimed_epsilon=2.0, claimed_delta=1e-5)
    assert (
        results.claimed.epsilon == 2.0
        and results.claimed.delta == 1e-5
        and "--claimed-epsilon" in results.claimed.guarantee
    )
    assert results["loss"]["examples"].claimed_epsilon == 2.0
    run = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(target),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "o"),
            "--attacks",
            "loss",
            "--claimed-epsilon",
            "2",
            "--claimed-delta",
            "1e-5",
        ],
    )
    assert run.exit_code == 2 and "has a privacy.json that states its claim" in run.output
    assert not (tmp_path / "o").exists()


def test_shadow_trainer_trains_shadows_of_a_model_trained_elsewhere(uneven, matched, tmp_path):
    """A bare Hugging Face directory: --shadow-trainer/--shadow-config name the recipe; each shadow starts from a fresh
    copy of the bare model's own architecture and tokenizer (so they are not the dpaudit target's cached shadows, which
    built their tokenizer from public.jsonl), and is cached for the next run of the same recipe."""
    data, target, _ = uneven
    _, _, cache = matched
    bare = tmp_path / "hf"
    shutil.copytree(target / "model", bare)
    config = {k: v for k, v in _manifest(target)["config"].items() if k != "trainer"}
    config["noise_seed"] = 0  # as SEEDED
    (tmp_path / "recipe.json").write_text(json.dumps(config), encoding="utf-8")
    results = dpaudit.attack(
        bare,
        data,
        ["shadow"],
        shadow_models=2,
        shadow_cache=str(cache),
        progress=False,
        shadow_trainer="edp-sgd",
        shadow_config=str(tmp_path / "recipe.json"),
    )
    info = results["shadow"].shadow_models
    assert info.origin.startswith("--shadow-trainer edp-sgd") and not any(m.cached for m in info.models)
    assert all(Path(_manifest(m.path)["config"]["init_from"]).name == "start" for m in info.models)
    again = dpaudit.attack(
        bare,
        data,
        ["shadow"],
        shadow_models=2,
        shadow_cache=str(cache),
        progress=False,
        shadow_trainer="edp-sgd",
        shadow_config=str(tmp_path / "recipe.json"),
    )
    assert [m.path for m in again["shadow"].shadow_models.models] == [m.path for m in info.models]
    assert all(m.cached for m in again["shadow"].shadow_models.models)
    assert info.target_heldout_accuracy is None  # a bare model records none
    run = CliRunner().invoke(
        cli, ["attack", "--model", str(bare), "--data", str(data), "--out", str(tmp_path / "o"), "--attacks", "shadow"]
    )
    assert run.exit_code == 2 and "--shadow-trainer NAME --shadow-config FILE.json" in run.output


def test_user_shadow_dirs_give_membership_from_their_members_file(uneven, matched):
    """--shadow-dirs: the cached LiRA shadows given back as user models, each with a members.json of sha256 entries
    written from its own train.jsonl; LiRA then trains nothing and reads the same membership."""
    from dpaudit.attacks.shadow_models import MEMBERS_FILE, text_hash
    from dpaudit.inject_dir.reader import load_inject_run

    data, target, _ = uneven
    results, _, _ = matched
    dirs = []
    for model in results["lira"].shadow_models.models:
        home = Path(model.path).parent
        texts = load_inject_run(home / "data").train_texts
        (Path(model.path) / MEMBERS_FILE).write_text(json.dumps([text_hash(t) for t in texts]), encoding="utf-8")
        dirs.append(model.path)
    try:
        again = dpaudit.attack(target, data, ["lira"], shadow_dirs=tuple(dirs), progress=False)
    finally:
        for d in dirs:
            (Path(d) / MEMBERS_FILE).unlink()
    info = again["lira"].shadow_models
    assert info.origin == "--shadow-dirs" and [m.train_rows for m in info.models] == [
        m.train_rows for m in results["lira"].shadow_models.models
    ]
    assert again["lira"]["examples"].auc == pytest.approx(results["lira"]["examples"].auc)


def test_the_shadow_cache_holds_references_not_private_rows(uneven, matched):
    """Each shadow's data folder references the target's train/held-out rows (file, line, sha256) and never copies
    them; every folder the cache created is private to this user (mode 0700); the references read back the rows."""
    import stat

    from dpaudit.inject_dir.reader import load_inject_run

    data, _, _ = uneven
    _, _, cache = matched
    run = load_inject_run(data)
    private = set(run.train_texts) | set(run.heldout_texts) | {c.text for c in run.canaries}
    public = set(run.public_texts)
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert entries and stat.S_IMODE(cache.stat().st_mode) == 0o700
    for entry in entries:
        assert stat.S_IMODE(entry.stat().st_mode) == 0o700, entry
        for name in ("train.jsonl", "heldout.jsonl"):
            rows = _rows(entry / "data" / name)
            assert rows and all(set(r) <= {"ref", "sha256", "label"} for r in rows), (entry, name)
        texts = (entry / "data" / "train.jsonl").read_text(encoding="utf-8")
        assert not any(t in texts for t in private - public if len(t) > 20)
        shadow = load_inject_run(entry / "data")
        assert shadow.train_texts and set(shadow.train_texts) <= private | public


def test_an_attack_writing_out_keeps_its_shadows_beside_it(uneven, tmp_path, monkeypatch):
    """Without --shadow-cache (and no $DPAUDIT_CACHE) the models go to OUT-shadows, never to a home cache."""
    from dpaudit.attacks.run import attack
    from dpaudit.attacks.shadow_models import cache_root, default_cache

    monkeypatch.delenv("DPAUDIT_CACHE", raising=False)
    assert default_cache(tmp_path / "att") == tmp_path / "att-shadows"
    from dpaudit.common.errors import UserInputError

    with pytest.raises(UserInputError, match="--shadow-cache"):
        cache_root(None)
    seen = {}

    def fake(*args, **kwargs):  # the options the attack stage passes on: no training needed to check the default
        seen.update(kwargs)
        raise RuntimeError("stop")

    monkeypatch.setattr("dpaudit.attacks.run._attack", fake)
    for out in (tmp_path / "att", None):
        with pytest.raises(RuntimeError, match="stop"):
            attack("model", "data", ["shadow"], out=out)
        if out is not None:
            assert seen["shadow_cache"] == str(tmp_path / "att-shadows")
        else:
            assert "dpaudit-shadows-" in seen["shadow_cache"] and not Path(seen["shadow_cache"]).exists()
