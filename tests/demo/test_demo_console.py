"""The demo's compact terminal (no training): a stage's output goes to its log, bars and each new warning to the
terminal, a repeated warning by name only, and each caveat of the closing lines once."""

from __future__ import annotations

import io

from dpaudit.demo.console import Caveats, StageStderr, warning_name

SEED = (
    "warning: --noise-seed is below 2^64 (at most 64 bits of entropy): it can be found by searching small seeds, "
    "which regenerates the noise and the sampling and voids the guarantee."
)


def test_a_warning_in_full_once_then_by_name_and_bars_pass_through() -> None:
    caveats, terminal = Caveats(), io.StringIO()
    first_log, second_log = io.StringIO(), io.StringIO()
    first = StageStderr(first_log, terminal, caveats)
    first.write(SEED + "\n")
    first.write("\rjax-bert:  1%| | 1/63")
    first.write("\rjax-bert: 100%|#| 63/63\r          \r")
    first.write("note: loss/canaries-f10: group bound: members were inserted up to 10 times\n")
    first.close_line()
    second = StageStderr(second_log, terminal, caveats)
    second.write(SEED + "\n")
    shown = terminal.getvalue()
    assert shown.count("--noise-seed is below 2^64") == 1 and "jax-bert: 100%" in shown
    assert "note:" not in shown  # notes: the log only
    assert first.repeated == [] and second.repeated == [warning_name(SEED)]
    assert warning_name(SEED) == "--noise-seed is below 2^64 (at most 64 bits of entropy)"
    # the logs hold everything each stage printed
    assert SEED in first_log.getvalue() and "note: loss/canaries-f10" in first_log.getvalue()
    assert SEED in second_log.getvalue()


def test_an_attack_stage_s_warnings_stay_in_its_log() -> None:
    terminal, log = io.StringIO(), io.StringIO()
    err = StageStderr(log, terminal, Caveats(), warnings=False)
    shift = "warning: canaries-f1: loss 0.520 [0.080, 0.880] does not beat the blind baseline"
    err.write(shift + "\n")
    assert terminal.getvalue() == "" and shift in log.getvalue()


def test_caveats_say_each_text_once() -> None:
    caveats = Caveats()
    assert caveats.say("group privacy", "a canary inserted f times ...") == "a canary inserted f times ..."
    assert caveats.say("group privacy", "a canary inserted f times ...") is None and caveats.seen("group privacy")
