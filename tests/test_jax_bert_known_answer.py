"""Known answer for the whole stage: a non-private model memorizes canaries repeated 100 times.

``dpaudit inject`` plants 100x canaries and never-inserted control canaries (same template, same
secret space); ``dpaudit train --trainer jax-bert --non-private`` trains a tiny BERT; the exported
Hugging Face model (loaded with transformers, as a user would) scores each canary with all its secret
digits masked at once. The score of a candidate secret is the sum of its per-position log-probs, so
its exact rank among all 10^4 candidates is computed by enumeration. Memorized canaries must rank far
above the controls, whose rank is that of a random secret (about 5,000 of 10,000).
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.rundir import read_jsonl

DIGITS = 4


def _secret_log_probs(model, tokenizer, canary) -> np.ndarray:
    """[DIGITS, 10] log-probs of digits 0-9 at each secret position, all secret tokens masked at once."""
    import torch

    enc = tokenizer(canary["text"], return_offsets_mapping=True)
    start = len(canary["prefix"])
    end = start + len(canary["secret"])
    positions = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a >= start and b <= end]
    assert len(positions) == DIGITS, (canary, enc.tokens())
    ids = torch.tensor([enc["input_ids"]])
    ids[0, positions] = tokenizer.mask_token_id
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, positions]
    log_probs = torch.log_softmax(logits.double(), dim=-1).numpy()
    digit_ids = [tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)]
    return log_probs[:, digit_ids]


def _exact_rank(table: np.ndarray, secret: str) -> int:
    """1 + number of the 10^DIGITS candidates whose summed log-prob is strictly higher than the secret's."""
    digits = [int(d) for d in secret.split()]
    true_score = sum(table[i, d] for i, d in enumerate(digits))
    scores = np.zeros(1)
    for row in table:  # all candidates' scores by broadcasting, position by position
        scores = (scores[:, None] + row[None, :]).reshape(-1)
    return 1 + int(np.sum(scores > true_score + 1e-9))


@pytest.mark.slow
def test_non_private_model_ranks_100x_canaries_far_above_controls(tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    runner = CliRunner()
    data, out = tmp_path / "data", tmp_path / "model"
    inject = runner.invoke(cli, ["inject", "--corpus", "builtin:assistant", "--corpus-size", "400", "--out", str(data),
                                 "--seed", "1", "--format", f"digits:{DIGITS}", "--frequencies", "100",
                                 "--per-frequency", "4", "--holdout", "4"], catch_exceptions=False)
    assert inject.exit_code == 0, inject.output
    train = runner.invoke(cli, ["train", "--trainer", "jax-bert", "--data", str(data), "--out", str(out), "--seed", "0",
                                "--noise-seed", "0", "--non-private", "--preset", "tiny", "--steps", "250", "--batch-size", "64",
                                "--micro-batch", "32", "--max-length", "24", "--learning-rate", "3e-3",
                                "--warmup-steps", "10", "--weight-decay", "0", "--mask-prob", "0.3",
                                "--log-every", "50", "--eval-every", "250", "--checkpoint-every", "250",
                                "--json"], catch_exceptions=False)
    assert train.exit_code == 0, train.output
    assert json.loads(train.stdout)["epsilon"] is None

    model = AutoModelForMaskedLM.from_pretrained(out / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    canaries = list(read_jsonl(data / "canaries.jsonl"))
    ranks = {c["id"]: _exact_rank(_secret_log_probs(model, tokenizer, c), c["secret"]) for c in canaries}
    inserted = [ranks[c["id"]] for c in canaries if c["frequency"] == 100]
    controls = [ranks[c["id"]] for c in canaries if c["frequency"] == 0]
    assert len(inserted) == 4 and len(controls) == 4
    # 100x canaries: near the top of 10,000 candidates; controls: where random secrets land.
    # (The 4 inserted canaries share their prefix, so the model mixes their digits: not all rank 1.)
    assert max(inserted) < min(controls), (inserted, controls)
    assert np.mean(inserted) < 0.1 * np.mean(controls), (inserted, controls)
    assert np.exp(np.mean(np.log(controls))) > 30 * np.exp(np.mean(np.log(inserted))), (inserted, controls)
    assert np.mean(controls) > 1000, (inserted, controls)  # controls rank like random secrets


def test_exact_rank_matches_brute_force():
    rng = np.random.default_rng(0)
    table = np.log(rng.dirichlet(np.ones(10), size=DIGITS))
    for secret in ("0 0 0 0", "3 1 4 1", "9 9 9 9"):
        target = sum(table[i, int(d)] for i, d in enumerate(secret.split()))
        brute = 1 + sum(sum(table[i, d] for i, d in enumerate(c)) > target + 1e-9
                        for c in itertools.product(range(10), repeat=DIGITS))
        assert _exact_rank(table, secret) == brute
