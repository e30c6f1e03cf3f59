"""The training-free attacks against the target's base (base-ratio, error-zone, min-k++-base) and token leakage.

The scores are checked by hand on synthetic per-token arrays; one real path per model kind (causal LM, masked LM,
classifier) trains a public start on ``public.jsonl`` and a non-private target from it (``--init-from``, in process:
half a second each) and attacks the target with the defaults, which then include the base attacks and the blind
baseline, reading the base from ``privacy.json``'s ``init_from``.
"""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from dpaudit.attacks.base_mia import calibrated_min_k_scores, error_zone_scores, likelihood_ratio, min_k_statistic
from dpaudit.attacks.results import (
    BaseRatioResult,
    LeakingMember,
    LeakingToken,
    SecretTokenShift,
    TokenLeaks,
    result_from_json,
)
from dpaudit.common.errors import UserInputError

# -- the scores, by hand -------------------------------------------------------------------------------------------


def test_likelihood_ratio_is_the_sum_of_the_token_ratios():
    target = [np.array([-1.0, -2.0, -0.5]), np.array([]), np.array([-3.0])]
    base = [np.array([-2.0, -2.5, -0.5]), np.array([]), np.array([-1.0])]
    out = likelihood_ratio(target, base)
    assert out[0] == pytest.approx(1.5) and np.isnan(out[1]) and out[2] == pytest.approx(-2.0)


def test_error_zone_counts_only_the_positions_the_target_gets_wrong():
    # shifts 2, -1, 4, -3; the third position is a top-1 hit (left out): P = 2, N = 1 + 3 = 4
    target = [np.array([-1.0, -3.0, -0.1, -5.0])]
    base = [np.array([-3.0, -2.0, -4.1, -2.0])]
    hits = [np.array([False, False, True, False])]
    c = 1.0
    assert error_zone_scores(target, base, hits, c=c)[0] == pytest.approx((2 + c) / (2 + 4 + 2 * c))
    # the order of P / N (the paper's ratio) is kept: more upward shift at the errors, a higher score
    up = error_zone_scores([np.array([-1.0, -1.0])], [np.array([-2.0, -1.5])], [np.array([False, False])])
    down = error_zone_scores([np.array([-1.0, -1.0])], [np.array([-1.5, -2.0 + 1.8])], [np.array([False, False])])
    assert up[0] > down[0]
    # no error position, or no shift at them: no evidence either way
    none = error_zone_scores([np.array([-0.1])], [np.array([-3.0])], [np.array([True])])
    still = error_zone_scores([np.array([-2.0])], [np.array([-2.0])], [np.array([False])])
    assert none[0] == 0.5 and still[0] == 0.5
    # texts whose few shifts all point up no longer tie (P / N is infinite for each): the larger shift ranks higher
    small, large = error_zone_scores(
        [np.array([-1.0]), np.array([-1.0])], [np.array([-1.5]), np.array([-4.0])], [np.array([False])] * 2
    )
    assert 0.5 < small < large < 1


def test_min_k_plus_plus_against_the_base_averages_the_lowest_calibrated_differences():
    rng = np.random.default_rng(0)
    n = 10

    def table():
        return SimpleNamespace(
            log_probs=[rng.normal(-3, 1, n)], mean=[rng.normal(-3, 0.5, n)], std=[np.abs(rng.normal(1, 0.2, n))]
        )

    target, base = table(), table()
    diff = min_k_statistic(target.log_probs[0], target.mean[0], target.std[0]) - min_k_statistic(
        base.log_probs[0], base.mean[0], base.std[0]
    )
    expected = np.sort(diff)[:3].mean()  # int(10 * 0.3) = 3 lowest
    assert calibrated_min_k_scores(target, base, 0.3)[0] == pytest.approx(expected)
    assert min_k_statistic(np.array([-1.0]), np.array([-2.0]), np.array([0.0]))[0] == 0.0  # a point mass counts 0


def test_token_leaks_are_typed_and_survive_results_json():
    leaks = TokenLeaks(
        top_members=(
            LeakingMember(task="examples", id="train:3", score=4.5, tokens=(LeakingToken(token="7", llr=2.5),)),
        ),
        secrets=(
            SecretTokenShift(
                task="canaries", frequency=1, canaries=4, secret_tokens=16, mean_secret_llr=1.0, mean_other_llr=0.2
            ),
        ),
    )
    from dpaudit.attacks.token_leaks import leak_lines

    assert leak_lines(leaks) == [
        "examples train:3 (score 4.50): 7 +2.50",
        "canaries inserted 1x (4 canaries): secret tokens +1.00 nats on average, other tokens +0.20",
    ]
    result = BaseRatioResult(parameters={"score": "x"}, token_leaks=leaks)
    back = result_from_json(json.loads(json.dumps(result.to_json())))
    assert isinstance(back, BaseRatioResult) and back.token_leaks == leaks
    old = result.to_json()
    del old["token_leaks"]  # a result written without them reads back as None
    assert result_from_json(old).token_leaks is None


# -- the real path: a public start, a target fine-tuned from it, the defaults ------------------------------------------


@pytest.fixture(scope="module")
def fine_tuned(data_dir, tmp_path_factory):
    """task -> (public start, target trained non-privately from it): edp-sgd, tiny, in process."""
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    root = tmp_path_factory.mktemp("base-mia")
    # an explicit noise seed: an edp-sgd run draws from its secret noise source (OS entropy) even without noise,
    # so without it every run differs (the causal LM's base-ratio AUC on 24 + 24 ranged 0.65-0.74 after 6 epochs)
    common = dict(
        preset="tiny", mode="sgd", batch_size=16, max_length=16, vocab_size=128, eval_examples=8, noise_seed=1
    )
    runs = {}
    for task in ("clm", "mlm", "classify"):
        start, target = root / f"{task}-start", root / f"{task}-target"
        EdpSgdTrainer().train(data_dir, start, EdpSgdConfig(task=task, data_split="public", epochs=1, **common), seed=0)
        # the causal LM's known answer needs memorization: after 15 epochs its base-ratio AUC was 0.78-0.88 over six
        # draws of the batches (error-zone 0.69-0.80)
        epochs = 15 if task == "clm" else 6
        config = EdpSgdConfig(task=task, init_from=str(start), epochs=epochs, learning_rate=3e-3, **common)
        EdpSgdTrainer().train(data_dir, target, config, seed=0)
        runs[task] = (start, target)
    return runs


@pytest.mark.parametrize("task", ["clm", "mlm", "classify"])
def test_a_fine_tuned_target_is_attacked_against_its_public_start(fine_tuned, data_dir, tmp_path, task):
    """The base attacks of each kind with the blind baseline beside them; on a classifier through the defaults (which
    are then these: it has no canary attack). The causal LM's defaults add the canary attacks (seconds more): the
    registry's choice is checked in test_the_defaults_gain_the_base_attacks_only_where_they_can_run."""
    import dpaudit
    from dpaudit.attacks.run import read_attack_dir

    start, target = fine_tuned[task]
    out = tmp_path / "attack" if task == "clm" else None  # the directory written and read back once
    base_attacks = ["base-ratio", "error-zone", "min-k++-base"] if task == "clm" else ["base-ratio"]
    named = {} if task == "classify" else {"attacks": base_attacks}
    blind = task != "mlm"  # the baseline costs a second of CPU; beside the classifier's and the causal LM's here
    results = dpaudit.attack(target, data_dir, out=out, progress=False, mia_examples=24, blind_baseline=blind, **named)
    assert [r.attack for r in results.attacks] == base_attacks + (["blind"] if blind else [])
    ratio = results["base-ratio"]
    assert str(start) in ratio.parameters["base"] and "init_from" in ratio.parameters["base"]
    assert "weights sha256 verified" in ratio.parameters["base"]
    examples = ratio["examples"]
    assert examples.n_members == examples.n_nonmembers == 24
    if task == "classify":  # the loss ratio: a label has no tokens
        assert ratio.token_leaks is None and "scores/tokens.jsonl" not in results.score_files
        return
    leaks = ratio.token_leaks
    if out is not None:
        back = read_attack_dir(out)
        assert back["base-ratio"].token_leaks == leaks and isinstance(leaks, TokenLeaks)
        # known answer: fine-tuning moved the members' likelihood more than the non-members'
        assert examples.auc > 0.7 and results["error-zone"]["examples"].auc > 0.6, examples.auc
    members = [m for m in leaks.top_members if m.task == "examples"]
    assert len(members) == 5 and all(m.id.startswith("train:") and m.tokens for m in members)
    scores = {
        r["id"]: r["score"] for r in results.score_files["scores/mia_base-ratio.jsonl"] if r["task"] == "examples"
    }
    assert [m.id for m in members] == sorted((i for i in scores if i.startswith("train:")), key=lambda i: -scores[i])[
        :5
    ]  # the top-scoring members, in order
    for member in members:  # their most leaking tokens, largest ratio first
        assert [t.llr for t in member.tokens] == sorted((t.llr for t in member.tokens), reverse=True)
    rows = results.score_files["scores/tokens.jsonl"]
    if out is not None:  # as written
        assert [json.loads(line) for line in (out / "scores" / "tokens.jsonl").read_text().splitlines()] == rows
    assert {r["task"] for r in rows} >= {"examples", "canaries"}
    example = next(r for r in rows if r["id"] == members[0].id and r["task"] == "examples")
    assert len(example["tokens"]) == len(example["llr"]) and max(example["llr"]) == pytest.approx(
        members[0].tokens[0].llr, abs=1e-5
    )
    canary = next(r for r in rows if r["task"] == "canaries")
    assert len(canary["secret"]) == len(canary["tokens"]) and any(canary["secret"])  # the secret's tokens marked
    assert {s.frequency for s in leaks.secrets} == {0, 1, 2, 3} and all(s.secret_tokens > 0 for s in leaks.secrets)


def test_a_target_with_no_known_base_gets_no_base_attack_and_a_named_one_is_refused(fine_tuned, data_dir, tmp_path):
    import dpaudit

    start, _ = fine_tuned["clm"]  # trained from scratch: privacy.json has no init_from
    results = dpaudit.attack(start, data_dir, progress=False)
    assert [r.attack for r in results.attacks] == ["exposure", "extraction"]
    out = tmp_path / "out"
    with pytest.raises(UserInputError) as err:
        dpaudit.attack(start, data_dir, ["error-zone"], out=out, progress=False)
    message = str(err.value)
    assert "\n" not in message and "no init_from" in message and "pass --reference-model DIR" in message
    assert not out.exists()


def test_a_default_run_says_why_a_recorded_start_was_not_used(data_dir, tmp_path):
    """A target whose recorded start is gone: the defaults run without the base attacks, and say why."""
    import dpaudit
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    common = dict(preset="tiny", mode="sgd", batch_size=16, max_length=16, vocab_size=128, eval_examples=8, epochs=1)
    start, target = tmp_path / "start", tmp_path / "target"
    EdpSgdTrainer().train(data_dir, start, EdpSgdConfig(task="clm", data_split="public", **common), seed=0)
    EdpSgdTrainer().train(data_dir, target, EdpSgdConfig(task="clm", init_from=str(start), **common), seed=0)
    start.rename(tmp_path / "moved")
    with pytest.warns(UserWarning, match="did not run"):
        results = dpaudit.attack(target, data_dir, progress=False)
    assert [r.attack for r in results.attacks] == ["exposure", "extraction"]
    (note,) = [w for w in results.warnings if "public start" in w]
    assert note.startswith("the training-free attacks against the target's public start (base-ratio, error-zone, ")
    assert "is not found here" in note and "--reference-model DIR" in note


def test_a_reference_with_another_tokenizer_or_kind_is_refused_before_loading(
    fine_tuned, data_dir, tiny_causal_dir, tmp_path
):
    import dpaudit

    _, target = fine_tuned["clm"]
    with pytest.raises(UserInputError, match=r"^--attacks base-ratio: --reference-model .*tokenizer differs"):
        dpaudit.attack(target, data_dir, ["base-ratio"], progress=False, reference_model=tiny_causal_dir)
    mlm_start, _ = fine_tuned["mlm"]
    with pytest.raises(UserInputError, match=r"is a masked-lm, the target a causal-lm"):
        dpaudit.attack(target, data_dir, ["base-ratio"], progress=False, reference_model=mlm_start)


def test_a_start_changed_since_training_is_not_used(fine_tuned, tmp_path):
    from dpaudit.attacks.base_ref import base_problem, resolve_base
    from dpaudit.scoring import resolve_model

    start, target = fine_tuned["clm"]
    source = resolve_model(target)
    for copy in (tmp_path / "run", tmp_path / "hf"):  # the start's run directory, or its bare model directory
        shutil.copytree(start if copy.name == "run" else start / "model", copy)
        moved = _with_start(source, {**source.privacy.init_from, "path": str(copy)})
        assert base_problem(resolve_base(SimpleNamespace(), moved), source) is None
        weights = copy / "model.safetensors" if copy.name == "hf" else copy / "model" / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))  # same size, other values
        changed = base_problem(resolve_base(SimpleNamespace(), moved), source)
        assert changed is not None and "no base to compare the target with" in changed, changed
        assert ("no longer has the sha256" if copy.name == "hf" else "cannot be used") in changed, changed


def _with_start(source, init_from):
    import dataclasses

    return dataclasses.replace(source, privacy=dataclasses.replace(source.privacy, init_from=init_from))


def test_the_defaults_gain_the_base_attacks_only_where_they_can_run():
    from dpaudit.attacks.registry import DEFAULT_ATTACKS, accepted_options, default_attacks

    def able(cls):
        return True

    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="causal-lm", able=able) == [
        "exposure",
        "extraction",
        "base-ratio",
        "error-zone",
        "min-k++-base",
    ]
    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="masked-lm", able=able) == [
        *DEFAULT_ATTACKS,
        "base-ratio",
    ]
    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="classifier", able=able) == ["base-ratio"]
    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="masked-lm", able=lambda c: False) == list(
        DEFAULT_ATTACKS
    )
    assert {"reference_model", "min_k"} <= accepted_options(DEFAULT_ATTACKS)  # the defaults take their options
