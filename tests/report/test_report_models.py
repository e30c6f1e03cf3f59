"""The report's comparison table (a row per model, two attack directories of one model as one row, labels),
only what can be measured (n/a TPR cells, exact intervals, why epsilon >= 0 says nothing, one line per repeated note),
the exposure ceiling of --reveal, the plots' styles and ticks, and what dpaudit attack prints under its table."""

from __future__ import annotations

import dataclasses
import re
from html import unescape

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.attacks.reconstruction import symbol_edit_distances
from dpaudit.audit import audit_scores
from dpaudit.claim import Claim
from dpaudit.cli import cli
from dpaudit.report import plots
from dpaudit.report.measurable import members_needed, tpr_rate, zero_bound_reason
from dpaudit.report.sections import grouped_warnings
from dpaudit.verdict.headline import AuditSource, headline


def _text(html: str) -> str:
    html = re.sub(r"<style>.*?</style>|<svg .*?</svg>", " ", html, flags=re.DOTALL)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _rows(html: str) -> list[list[str]]:
    table = html[html.index('<table id="models-table">') :]
    table = table[: table.index("</table>")]
    return [
        [_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.DOTALL)]
        for row in re.findall(r'<tr class="model-row">(.*?)</tr>', table, flags=re.DOTALL)
    ]


def test_comparison_table_has_one_row_per_model_and_merges_one_models_two_directories(models_page):
    page, dirs = models_page
    html = page.read_text(encoding="utf-8")
    rows = _rows(html)
    assert [r[0].split()[0] for r in rows] == [
        "eps2-model",
        "non-private",
        "eps8-model",
    ]  # label: --label, else the model's
    eps2, nonprivate, eps8 = rows
    assert (
        str(dirs["eps2-canary"]) in eps2[0] and str(dirs["eps2-membership"]) in eps2[0]
    )  # one model, both directories
    assert eps2[1] == "2.00" and nonprivate[1] == "inf" and eps8[1] == "8.00"  # claimed epsilon, rounded up
    assert nonprivate[2].startswith("45.0% (5.0%)") and eps2[2] == "–"  # utility beside its trivial baseline
    assert eps2[3] == nonprivate[3] == "–"  # no public start (a fresh initialization)
    assert re.match(r"\d+\.\d\d bits of 13\.3 \(16×, p = ", eps2[4]) and "controls" in eps2[4]
    assert re.fullmatch(r"\d+/8 at 16× \d+/32 of all inserted", eps2[5])
    assert eps2[6].startswith("ε ≥ ") and "(proof)" in eps2[6] and eps8[6].startswith("–")  # eps8 ran no MIA
    assert re.match(r"0\.\d\d \[0\.\d\d, [01]\.\d\d\]", eps2[7])
    # the canaries task: 40 a side; the reason is a footnote under the table, printed once
    note = re.fullmatch(r"n/a \[(\d)\]", eps2[8])
    assert note is not None
    notes = re.findall(r"<li>(.*?)</li>", html[html.index('<ol class="footnotes">') :].split("</ol>")[0])
    assert notes[int(note.group(1)) - 1] == "n/a: needs &gt;= 100 non-members, have 40"
    # one verdict per model, the merged model's membership and canary results in the same card
    assert html.count('<div class="verdict">') == 3 and "3 models compared" in html


def test_only_what_can_be_measured_and_each_repeated_note_once(models_page):
    page, _ = models_page
    html = page.read_text(encoding="utf-8")
    text = _text(html)
    assert "n/a (needs >= 1000 non-members, have 40)" in text  # TPR at 0.1% FPR, in the table and the verdict
    assert "it is TPR at zero false positives" not in text  # the stored per-audit warning is not repeated
    mia = _text(html[html.index('<section id="mia">') : html.index('<section id="training">')])
    assert "[0.000, 0.000]" not in mia and "exact 95% CI" in mia  # TPR intervals are exact: never a point
    assert "TPR at FPR 0.001 needs" not in text and "* fewer non-members" not in text  # no note per audit


def test_labels_name_directories_that_were_given(models_page, tmp_path):
    _, dirs = models_page
    bad = CliRunner().invoke(
        cli, ["report", str(dirs["eps8"]), "--label", f"x={tmp_path}", "--out", str(tmp_path / "p.html")]
    )
    assert bad.exit_code == 2 and "is not one of the RUN_DIRs" in bad.output and not (tmp_path / "p.html").exists()
    bad = CliRunner().invoke(
        cli, ["report", str(dirs["eps8"]), "--label", str(dirs["eps8"]), "--out", str(tmp_path / "p.html")]
    )
    assert bad.exit_code == 2 and "expected NAME=DIR" in bad.output


def test_tpr_intervals_are_exact_and_unmeasurable_rates_are_na():
    rng = np.random.default_rng(0)
    audit = audit_scores(rng.normal(0.3, 1, 200), rng.normal(0, 1, 200), delta=1e-5, seed=0, num_bootstrap=50)
    low, one = audit.tpr_at_fpr
    assert tpr_rate(low, 200).text() == "n/a (needs >= 1000 non-members, have 200)"
    rate = tpr_rate(one, 200)
    k = round(one.tpr * 200)
    from scipy.stats import beta

    assert rate.low == pytest.approx(beta.ppf(0.025, k, 201 - k) if k else 0.0)  # Clopper-Pearson on k of 200 members
    assert rate.high == pytest.approx(beta.ppf(0.975, k + 1, 200 - k))
    zero = dataclasses.replace(one, tpr=0.0)
    assert tpr_rate(zero, 200).high == pytest.approx(1 - 0.025 ** (1 / 200))  # [0, 0.018], never [0, 0]


def test_a_zero_bound_says_how_many_canaries_a_perfect_attack_would_need():
    need = members_needed("proof", confidence=0.95, delta=1e-5)
    assert need is not None and need > 1
    from dpaudit.audit import epsilon_lower_bound_one_run

    for n in range(1, need + 3):  # the smallest n, and positive from there on
        positive = epsilon_lower_bound_one_run(np.ones(n), np.zeros(n), delta=1e-5, confidence=0.95).epsilon > 0
        assert positive == (n >= need)
    small = audit_scores(np.ones(2), np.zeros(2), delta=1e-5, seed=0, num_bootstrap=20, coin_flip=True)
    head = headline(
        [AuditSource(attack="loss", task="coin-flip canaries", audit=small, group_size=1)],
        Claim(known=True, private=True, epsilon=8.0, delta=1e-5),
    )
    assert head.best.epsilon == 0
    why = zero_bound_reason(head.best)
    assert why == (
        f"uninformative: even a perfect attack needs >= {2 * need} coin-flip canaries ({need} members, {need} "
        "non-members) for a positive one-run bound at 95%; this audit has 2 and 2"
    )
    big = audit_scores(np.zeros(400), np.zeros(400), delta=1e-5, seed=0, num_bootstrap=20, coin_flip=True)
    head = headline([AuditSource(attack="loss", task="c", audit=big, group_size=1)], Claim(known=True, private=False))
    assert head.best.epsilon == 0 and zero_bound_reason(head.best) is None  # large enough: 0 is a finding


def test_repeated_warnings_become_one_line_naming_their_sources():
    lines = grouped_warnings([("a", "same"), ("b", "same"), ("a", "other"), ("a", "same")])
    assert lines == ("a, b: same", "a: other")


def test_edit_distance_is_over_symbols_and_reaches_one():
    edit, normalized = symbol_edit_distances(
        [(list("5678"), list("1234")), (list("1234"), list("1234")), (["the", "red", "fox"], ["the", "big", "fox"])]
    )
    assert edit.tolist() == [4, 0, 1] and normalized.tolist() == [1.0, 0.0, pytest.approx(1 / 3)]


def test_each_reveal_gets_its_own_labelled_ceiling_and_styles_do_not_repeat():
    series = [plots.Series(label="a", x=[1, 10], y=[1, 2]), plots.Series(label="b", x=[1, 10], y=[1, 3])]
    svg = plots.by_frequency(
        "x", series, ylabel="bits", ceilings=[(4 * np.log2(10), ""), (7 * np.log2(10), "reveal 3: b")]
    )
    assert "ceiling log2|R| = 13.3" in svg and "ceiling log2|R| = 23.3 (reveal 3: b)" in svg  # 3 significant digits
    assert len({plots.curve_style(i) for i in range(32)}) == 32
    ticks = plots.thin_ticks([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50, 100], min_gap=0.45)
    assert ticks == [1, 2, 3, 5, 7, 10, 20, 50, 100]  # ends kept, no two closer than 0.45 octave
    assert min(np.diff(np.log2(ticks))) >= 0.45


def test_attack_summary_notes_print_na_stored_warnings_and_the_undertrained_hint(models_page):
    from dpaudit.attacks.run import read_attack_dir
    from dpaudit.report.notes import attack_notes, tpr_cell

    _, dirs = models_page
    results = read_attack_dir(dirs["eps2-membership"])
    assert (
        tpr_cell({"fpr": 0.001, "tpr": 0.4}, 40, 40) == "n/a"
        and tpr_cell({"fpr": 0.01, "tpr": 0.4}, 40, 100) == "0.400"
    )
    mia = results.attacks[-1]  # its canaries task as an attack stores it: a group audit, with the group-bound warning
    rng = np.random.default_rng(1)
    group = audit_scores(
        rng.normal(1, 1, 40), rng.normal(0, 1, 40), delta=1e-5, seed=0, num_bootstrap=20, group_size=16
    )
    tasks = tuple(dataclasses.replace(t, audit=group) if i else t for i, t in enumerate(mia.tasks))
    results = dataclasses.replace(results, attacks=(*results.attacks[:-1], dataclasses.replace(mia, tasks=tasks)))
    lines = attack_notes(results, dirs["eps2-membership"])
    assert "n/a: TPR at 0.001 FPR needs >= 1000 non-members, have 40 (it would be TPR at zero false positives)" in lines
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 1 and "group bound: members were inserted up to 16 times" in notes[0]
    assert not any(line.startswith("hint:") for line in lines)  # private: no hint
    quiet = read_attack_dir(dirs["eps8"])  # canaries with the controls; made non-private, it shows nothing
    quiet = dataclasses.replace(quiet, claimed=dataclasses.replace(quiet.claimed, private=False, epsilon=None))
    hint = [line for line in attack_notes(quiet, dirs["eps8"]) if line.startswith("hint:")]
    assert hint and "may be undertrained" in hint[0]


def test_the_claimed_epsilon_prints_identically_in_train_attack_and_report(noisy_canary_model, canary_data, tmp_path):
    import json

    from dpaudit.common.figures import format_up
    from tests.conftest import CANARY_TRAIN  # the session fixture's own command: rerunning it returns the finished run

    train = CliRunner().invoke(
        cli,
        [
            "train",
            *CANARY_TRAIN,
            "--seed",
            "1",
            "--steps",
            "40",
            "--noise-multiplier",
            "50",
            "--data",
            str(canary_data),
            "--out",
            str(noisy_canary_model),
        ],
        catch_exceptions=False,
    )
    assert train.exit_code == 0, train.output
    out = tmp_path / "attack"
    attack = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(noisy_canary_model),
            "--data",
            str(canary_data),
            "--out",
            str(out),
            "--attacks",
            "reconstruction",
        ],
        catch_exceptions=False,
    )
    assert attack.exit_code == 0, attack.output
    eps = json.loads((out / "results.json").read_text())["claimed_privacy"]["epsilon"]
    shown = format_up(eps)
    assert f"epsilon = {shown} at delta" in train.stdout.splitlines()[0]
    assert f"claimed: epsilon = {shown} at delta" in attack.output
    assert f"epsilon = {shown} at delta" in _text((out / "index.html").read_text(encoding="utf-8"))
    page = _text((out / "index.html").read_text(encoding="utf-8"))
    texts = (train.stdout, attack.stdout, page)
    assert {m for t in texts for m in re.findall(r"(?<!replace-one )epsilon = ([0-9.]+) at delta", t)} == {shown}
    replace_one = [set(re.findall(r"replace-one epsilon = ([0-9.]+)", t)) for t in texts]
    assert len(replace_one[0]) == 1 and replace_one[0] == replace_one[1] == replace_one[2]  # N public: the other figure
