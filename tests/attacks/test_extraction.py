"""Extraction of canaries from a causal LM: a tiny GPT-2 fitted on an inject run's train.jsonl emits its
repeated canaries greedily from their prefix and not the controls; exposure and extraction run end to end through
``dpaudit attack`` on it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

#: 2 digits:3 canaries inserted 8 times and 2 never-inserted controls, among 12 corpus rows (--force: canary rows are
#: more than half of train.jsonl, so that 120 full-batch steps of the tiny model memorize them).
INJECT = [
    "inject",
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "24",
    "--heldout-size",
    "4",
    "--public-size",
    "8",
    "--format",
    "digits:3",
    "--frequencies",
    "8",
    "--per-frequency",
    "2",
    "--holdout",
    "2",
    "--seed",
    "0",
    "--force",
]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """(inject directory, tiny causal model directory fitted non-privately on its train.jsonl)."""
    from tests.causal_fixtures import build_tiny_causal

    root = tmp_path_factory.mktemp("extraction")
    result = CliRunner().invoke(cli, [*INJECT, "--out", str(root / "data")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    train = [json.loads(line)["text"] for line in (root / "data" / "train.jsonl").read_text().splitlines()]
    return root / "data", build_tiny_causal(root / "model", train, steps=120, seed=0, vocab_size=400)


def _context(data, model_dir):
    import transformers

    from dpaudit.attacks.base import AttackContext
    from dpaudit.attacks.registry import AttackOptions
    from dpaudit.inject_dir.reader import load_inject_run

    run = load_inject_run(data)
    scorer = SimpleNamespace(
        model=transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval(),
        tokenizer=transformers.AutoTokenizer.from_pretrained(model_dir),
        device="cpu",
        batch_size=8,
        kind="causal-lm",
        max_length=64,
    )
    return AttackContext(
        scorer=scorer, canaries=list(run.canaries), space=run.space, options=AttackOptions(beam_width=3), data=run
    )


def test_greedy_extraction_recovers_the_repeated_canaries_and_not_the_controls(fitted):
    from dpaudit.attacks.extraction import ExtractionAttack

    context = _context(*fitted)
    outcome = ExtractionAttack().run(context)
    by_id = {c.id: c for c in context.canaries}
    for cid, fields in outcome.canary_fields.items():
        inserted = by_id[cid].frequency > 0
        assert fields["exact"] is inserted, (cid, fields)  # extractable iff inserted
        assert (fields["fill"] == by_id[cid].secret) is inserted
        assert fields["top_k_rank"] == 1 if inserted else fields["normalized_edit_distance"] > 0
    controls, repeated = outcome.result.rows
    assert (controls.frequency, controls.exact_matches, repeated.frequency, repeated.exact_matches) == (0, 0, 8, 2)
    assert repeated.beam_exact_matches == 2 and repeated.top_k_hits == 2
    assert repeated.fisher_vs_controls.p_value == pytest.approx(1 / 6)  # 2/2 vs 0/2: C(2,2)C(2,0)/C(4,2)
    assert repeated.exact_match_ci.low > 0.15 and controls.exact_match_ci.high < 0.85  # Clopper-Pearson, n = 2
    assert outcome.result.parameters.context_tokens_min >= 7  # [CLS] name 's account number is


def test_attack_cli_runs_exposure_and_extraction_on_a_causal_model(fitted, tmp_path):
    data, model_dir = fitted
    out = tmp_path / "attack"
    result = CliRunner().invoke(
        cli, ["attack", "--model", str(model_dir), "--data", str(data), "--out", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    obj = json.loads((out / "results.json").read_text())
    assert obj["model"]["kind"] == "causal-lm" and [a["attack"] for a in obj["attacks"]] == ["exposure", "extraction"]
    rows = [json.loads(line) for line in (out / "scores" / "canaries.jsonl").read_text().splitlines()]
    assert {r["rank_method"] for r in rows} == {"enumerate"}  # |R| = 1000: every candidate scored by the tree
    inserted = [r for r in rows if r["frequency"] > 0]
    assert all(r["rank_low"] == 1 and r["exposure_high"] == pytest.approx(np.log2(1000)) for r in inserted)
    assert all(r["exact"] for r in inserted) and not any(r["exact"] for r in rows if r["frequency"] == 0)
    assert (out / "index.html").is_file()
    refused = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(model_dir),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "r"),
            "--attacks",
            "reconstruction",
        ],
    )
    assert refused.exit_code == 2 and "use --attacks extraction" in refused.output
    assert not (tmp_path / "r").exists()


def test_exposure_above_the_limit_is_sampled_and_says_so(fitted, tmp_path):
    """--exposure-limit below |R| = 1000: Carlini et al.'s estimates from --exposure-samples uniform draws, the method
    and the skew-normal extrapolation recorded per canary, the reason in the result's warnings."""
    data, model_dir = fitted
    out = tmp_path / "sampled"
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(model_dir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--attacks",
            "exposure",
            "--exposure-limit",
            "100",
            "--exposure-samples",
            "200",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "scores" / "canaries.jsonl").read_text().splitlines()]
    assert {r["rank_method"] for r in rows} == {"sampled-interpolation"}
    for r in rows:
        assert r["exposure_skewnorm"] is not None
        if r["frequency"] > 0:  # ranked above all 200 references: |R| / 200 = rank 5, log2(200) bits, the ceiling
            assert (r["rank_low"], r["exposure_high"]) == (5, pytest.approx(np.log2(200)))
            assert r["exposure_skewnorm"] > np.log2(200)  # the extrapolation goes past what 200 samples resolve
    (exposure,) = json.loads((out / "results.json").read_text())["attacks"]
    assert any("--exposure-limit 100" in w for w in exposure["warnings"])


def test_phrases_are_decoded_over_the_vocabulary(fitted):
    """With no finite alphabet (phrases) the continuation runs over the whole vocabulary and is compared as decoded
    text: the last 3 words of training rows come back exactly (edit distance 0, though WordPiece decodes '69827' as
    '6 9 8 2 7'), those of held-out rows do not."""
    from dpaudit.attacks.base import AttackContext
    from dpaudit.attacks.extraction import ExtractionAttack
    from dpaudit.attacks.registry import AttackOptions

    data, model_dir = fitted
    context = _context(data, model_dir)
    rows = {
        name: [json.loads(line)["text"] for line in (data / f"{name}.jsonl").read_text().splitlines()]
        for name in ("train", "heldout")
    }
    texts = [(t, 1) for t in rows["train"] if "account number" not in t][:4] + [(t, 0) for t in rows["heldout"][:4]]
    canaries = [
        SimpleNamespace(
            id=f"p{i}",
            prefix=" ".join(t.split()[:-3]) + " ",
            secret=" ".join(t.split()[-3:]),
            suffix="",
            frequency=f,
            format="phrases",
        )
        for i, (t, f) in enumerate(texts)
    ]
    context = AttackContext(scorer=context.scorer, canaries=canaries, space=None, options=AttackOptions(beam_width=2))
    outcome = ExtractionAttack().run(context)
    for c in canaries:
        fields = outcome.canary_fields[c.id]
        assert fields["exact"] is (c.frequency == 1), (c.secret, fields)
        assert (fields["edit_distance"] == 0) is (c.frequency == 1)
    assert "over the vocabulary" in outcome.result.parameters.fill
