"""Per-canary keys: every digit/word canary gets its own name, so no two share their unmasked context."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.canaries.generate import Canary
from dpaudit.canaries.keys import KEY_SLOT, draw_keys, fill_keys, shipped_names
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError


def _canary(i: int, prefix: str, secret: str = "1 2 3") -> Canary:
    return Canary(id=f"c{i}", prefix=prefix, secret=secret, suffix="", format="digits:3", frequency=1, member=True)


def test_shipped_name_lists_are_distinct_single_words():
    firsts, lasts = shipped_names()
    for names in (firsts, lasts):
        assert len(names) > 200 and len(set(names)) == len(names)
        assert all(n.isalpha() and n[0].isupper() for n in names)


def test_fill_keys_is_collision_free_seeded_and_avoids_secret_words():
    canaries = [_canary(i, f"{KEY_SLOT}'s code is ", secret=s) for i, s in enumerate(["grant", "rose", "1 2"] * 100)]
    a = fill_keys(canaries, np.random.default_rng(7))
    assert a == fill_keys(canaries, np.random.default_rng(7))
    assert a != fill_keys(canaries, np.random.default_rng(8))
    prefixes = [c.prefix for c in a]
    assert len(set(prefixes)) == len(prefixes) and not any(KEY_SLOT in p for p in prefixes)
    words = {w.lower() for p in prefixes for w in p.replace("'s code is ", "").split()}
    assert "grant" not in words and "rose" not in words
    assert [c.secret for c in a] == [c.secret for c in canaries]


def test_canaries_without_the_slot_are_unchanged():
    canaries = [_canary(i, "my pin is ") for i in range(3)]
    assert fill_keys(canaries, np.random.default_rng(0)) == canaries


def test_too_many_canaries_for_the_names_is_an_error():
    firsts, lasts = shipped_names()
    with pytest.raises(UserInputError, match="distinct names"):
        draw_keys(len(firsts) * len(lasts) + 1, np.random.default_rng(0))


def test_inject_default_gives_every_digit_canary_its_own_context(tmp_path):
    from dpaudit.canaries.manifest import load_inject_run

    out = tmp_path / "data"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "100",
            "--frequencies",
            "1,2",
            "--per-frequency",
            "5",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    run = load_inject_run(out)
    contexts = [(c.prefix, c.suffix) for c in run.canaries]
    assert len(set(contexts)) == len(contexts) == 15
    assert all(c.prefix.endswith("'s account number is ") for c in run.canaries)
    assert run.manifest["template"]["template"] == "{name}'s account number is {secret}"
