"""Held-out utility beside its trivial baseline in the report (verdict, the utility table, the held-out
panel of the training plot) and in the demo's verdict lines; a run logged before baselines shows its figure alone."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from dpaudit.attacks.run import read_attack_dir
from dpaudit.demo.verdict import classifier_line, mlm_line, read_utility, utility_text, verdict_lines
from dpaudit.report import render_report
from dpaudit.report.load import Utility, load_run
from dpaudit.report.sections import percents

MLM = {"eval_loss": 2.1, "mlm_accuracy": 0.488, "heldout_mlm_accuracy_baseline": 0.06}
CLASSIFIER_BELOW = {"eval_loss": 3.0, "eval_accuracy": 0.0459, "heldout_accuracy_baseline": 0.0476}
OLD_MLM = {"eval_loss": 2.1, "mlm_accuracy": 0.488}  # written before the trainers logged baselines


def page_text(parse_html, page: str) -> str:
    """The page's visible text, words separated by single spaces (inline spans joined, as a reader sees them)."""
    assert not [t for t, _ in parse_html(page).tags if t in ("script", "img")]
    page = re.sub(r"<style>.*?</style>|<svg .*?</svg>", " ", page, flags=re.DOTALL)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", re.sub(r"</?span[^>]*>", "", page))).split())


def training_svg(html: str) -> str:
    return re.findall(r"<svg .*?</svg>", html, flags=re.DOTALL)[-1]


def test_baseline_beside_the_heldout_figure_everywhere_the_page_shows_it(parse_html, make_attack, tmp_path: Path):
    run = make_attack(tmp_path, "mlm", evaluation=MLM)
    assert load_run(run).utility == Utility(
        name="held-out MLM accuracy", value=0.488, baseline=0.06, rule="always the most frequent token", step=200
    )
    html = (run / "index.html").read_text(encoding="utf-8")
    text = page_text(parse_html, html)
    verdict = text[text.index("Held-out utility") : text.index("Strongest membership attack")]
    assert (
        verdict
        == "Held-out utility held-out MLM accuracy 48.8% (trivial baseline 6.0%: always the most frequent token) "
    )
    table = html[html.index("<h3>Held-out utility</h3>") :]
    assert re.search(
        r"<td class=\"num\">200</td><td class=\"num\">48.8%</td><td class=\"num\">6.0%</td>"
        r"<td class=\"num\">\+42.8 points</td><td>always the most frequent token</td>",
        table,
    )
    svg = training_svg(html)
    assert "held-out accuracy" in svg and "stroke-dasharray" in svg  # the held-out panel, the baseline dotted
    assert "no better than the trivial baseline" not in text
    assert render_report([str(run)]) == html  # deterministic, and the page dpaudit attack wrote


def test_a_model_below_its_baseline_is_called_out(parse_html, make_attack, tmp_path: Path):
    run = make_attack(tmp_path, "clf", evaluation=CLASSIFIER_BELOW)
    text = page_text(parse_html, (run / "index.html").read_text(encoding="utf-8"))
    assert (
        "held-out accuracy 4.6% (trivial baseline 4.8%: always the majority class): no better than the trivial baseline"
    ) in text
    assert (
        "Its held-out accuracy (4.6%) is no better than the trivial baseline (4.8%: always the majority class): the "
        "model learned nothing usable"
    ) in text


def test_older_runs_show_the_figure_alone_and_runs_without_one_show_nothing(parse_html, make_attack, tmp_path: Path):
    old = make_attack(tmp_path, "old", evaluation=OLD_MLM)
    assert load_run(old).utility == Utility(
        name="held-out MLM accuracy", value=0.488, baseline=None, rule="always the most frequent token", step=200
    )
    html = (old / "index.html").read_text(encoding="utf-8")
    text = page_text(parse_html, html)
    assert "Held-out utility held-out MLM accuracy 48.8% Strongest membership attack" in text
    assert "trivial baseline 4" not in text and "not logged" in text and "stroke-dasharray" not in training_svg(html)
    bare = make_attack(tmp_path, "bare")  # no evaluation rows at all (the fixture's usual telemetry)
    html = (bare / "index.html").read_text(encoding="utf-8")
    assert load_run(bare).utility is None
    assert "Held-out utility" not in html and "held-out accuracy" not in html


def test_manifest_summary_when_metrics_are_not_recorded(parse_html, make_attack, tmp_path: Path):
    run = make_attack(
        tmp_path,
        "summary",
        metrics=False,
        train_summary={
            "mlm_accuracy": 0.3,
            **{"heldout_mlm_accuracy_baseline": 0.05, "baselines": {"heldout_mlm_accuracy_baseline": "rule"}},
        },
    )
    assert load_run(run).utility == Utility(
        name="held-out MLM accuracy", value=0.3, baseline=0.05, rule="always the most frequent token", step=None
    )
    text = page_text(parse_html, (run / "index.html").read_text(encoding="utf-8"))
    assert "held-out MLM accuracy 30.0% (trivial baseline 5.0%: always the most frequent token)" in text
    assert "final 30.0% 5.0% +25.0 points" in text


def test_comparison_table_has_a_row_per_run_with_a_heldout_figure(parse_html, make_attack, tmp_path: Path):
    runs = [
        make_attack(tmp_path, "new", evaluation=MLM, seed=1),
        make_attack(tmp_path, "old", evaluation=OLD_MLM, seed=2),
        make_attack(tmp_path, "none", seed=3),
    ]
    html = render_report([str(r) for r in runs], labels={str(r): r.name for r in runs})  # --label NAME=DIR
    table = html[html.index("<h3>Held-out utility</h3>") :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr><td class=\"text\">(\w+)</td>", table)
    assert rows == ["new", "old"]
    text = page_text(parse_html, table)
    assert "new held-out MLM accuracy 200 48.8% 6.0% +42.8 points always the most frequent token" in text
    assert "old held-out MLM accuracy 200 48.8% not logged – –" in text
    assert html.count("(trivial baseline 6.0%: always the most frequent token)") == 1  # the one verdict that has it


def test_percents_show_enough_digits_to_tell_the_figures_apart():
    assert percents(0.0459, 0.0476) == ("4.6%", "4.8%")
    assert percents(0.04761, 0.04763) == ("4.761%", "4.763%")
    assert percents(0.5, 0.5) == ("50.0%", "50.0%")
    assert percents(0.5, None) == ("50.0%", None)


def test_demo_verdict_lines_carry_the_baseline(make_attack, tmp_path: Path):
    mlm, clf, old = (
        make_attack(tmp_path, "mlm", evaluation=MLM),
        make_attack(tmp_path, "clf", evaluation=CLASSIFIER_BELOW),
        make_attack(tmp_path, "old", evaluation=OLD_MLM),
    )
    bare = make_attack(tmp_path, "bare")
    assert read_utility(mlm) == "held-out MLM accuracy 48.8% (trivial baseline 6.0%: always the most frequent token)"
    assert read_utility(clf) == "held-out accuracy 4.6% (trivial baseline 4.8%: always the majority class, no better)"
    assert read_utility(old) == "held-out MLM accuracy 48.8%" and read_utility(bare) is None
    lines = verdict_lines([("dp", mlm), ("old", old), ("bare", bare)], [("clf-dp", clf)], None)
    assert lines[0].startswith(
        "dp (epsilon = 2.00 at delta = 1.0e-5): held-out MLM accuracy 48.8% (trivial baseline "
        "6.0%: always the most frequent token); 16x canaries"
    )
    assert lines[1].startswith("old (epsilon = 2.00 at delta = 1.0e-5): held-out MLM accuracy 48.8%; 16x canaries")
    assert lines[2] == mlm_line("bare", read_attack_dir(bare))  # nothing logged: the line as before
    assert "clf-dp (epsilon = 2.00 at delta = 1.0e-5) held-out accuracy 4.6% (trivial baseline 4.8%" in lines[3]
    assert classifier_line([("x", read_attack_dir(bare))]) == classifier_line([("x", read_attack_dir(bare))], [None])


@pytest.mark.parametrize(
    "row, expected",
    [
        (
            {"heldout_accuracy": 0.9, "eval_accuracy": 0.1, "heldout_accuracy_baseline": 0.5},
            "held-out accuracy 90.0% (trivial baseline 50.0%: always the majority class)",
        ),  # the newest key first
        ({"eval_accuracy": float("nan")}, None),
        ({"loss": 1.0}, None),
    ],
)
def test_utility_text_keys(row, expected):
    assert utility_text(row) == expected


def test_demo_causal_line_reads_exposure_extraction_membership_and_utility(make_attack, tmp_path: Path):
    """dpaudit demo --causal: a causal LM's line, read back from its attack directory."""
    from dpaudit.demo.verdict import causal_line

    clm = make_attack(
        tmp_path,
        "clm",
        evaluation={"eval_loss": 1.9, "next_token_accuracy": 0.515, "heldout_next_token_accuracy_baseline": 0.083},
    )
    results = read_attack_dir(clm)
    line = verdict_lines([], [], None, (), [("clm-dp", clm)])[0]
    assert line == causal_line("clm-dp", results, read_utility(clm))
    assert line.startswith(
        "clm-dp (epsilon = 2.00 at delta = 1.0e-5): held-out next-token accuracy 51.5% (trivial "
        "baseline 8.3%: always the most frequent next token); 16x canaries"
    )
    recon = next(r for r in results.attacks if r.attack == "reconstruction")
    counts = ", ".join(
        f"{'controls' if r.frequency == 0 else f'{r.frequency}x'} {r.exact_matches}/{r.n}"
        for r in sorted(recon.rows, key=lambda r: -r.frequency)
    )
    assert f"secrets extracted greedily from their prefix: {counts}" in line and counts.endswith(f"/{recon.rows[0].n}")
    top = next(r for r in results.attacks if r.attack == "exposure").rows[-1]
    # a DP model's canaries above the controls are what they are (a group the per-example claim covers only by group
    # privacy), never "MEMORIZED" as if the claim failed
    group = "above the controls: each is a group of 16 rows"
    assert top.frequency == 16 and ((group in line) == (top.vs_controls.p_value < 0.05)) and "MEMORIZED" not in line
    low = next(r for r in results.attacks if r.attack == "exposure").rows[1]
    assert low.frequency == 1 and f"; 1x {low.mean:.1f} bits (p = {low.vs_controls.p_value:.2g})" in line
