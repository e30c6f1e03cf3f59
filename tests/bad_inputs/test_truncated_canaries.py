"""Canaries whose secret training cut off (``max_length``; hardening, round two, moved from
tests/test_bad_inputs_round2.py): the attack's warning counts them and says what their numbers mean.
"""

from __future__ import annotations


def test_truncation_warning_counts_cut_secrets_and_says_what_their_numbers_mean():
    from dpaudit.attacks.run import truncation_warning
    from dpaudit.inject_dir.reader import Canary

    def tokenizer(texts):  # one token per word, plus [CLS] and [SEP], as the trainers encode rows
        return {"input_ids": [[0] * (len(t.split()) + 2) for t in texts]}

    def canary(i, prefix, secret, suffix, frequency):
        return Canary(
            id=f"c{i}",
            prefix=prefix,
            secret=secret,
            suffix=suffix,
            frequency=frequency,
            member=frequency > 0,
            format="digits:4",
        )

    canaries = [
        canary(0, "a b ", "1 2 3 4", " and a long suffix after it", 5),  # only the suffix is cut: fine
        canary(1, "a b c d ", "1 2 3 4", "", 10),  # secret ends at token 10 > 8
        canary(2, "a ", "1 2 3 4", "", 0),
    ]
    manifest = {"config": {"max_length": 8}}
    warning = truncation_warning(tokenizer, canaries, manifest)
    assert warning.startswith("1 of 3 canaries (inserted 10 times, e.g. c1) end their secret beyond the max_length 8")
    assert "read like never-inserted controls" in warning and "not evidence of privacy" in warning
    assert "--max-length 10" in warning
    assert truncation_warning(tokenizer, canaries[:1], manifest) is None
