"""The HTML report: sections in order, escaping, self-containment, determinism, size, the attack's index.html."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import sha256_file
from dpaudit.report import render_report
from dpaudit.report.load import load_run
from dpaudit.report.membership import membership_audits, strongest
from dpaudit.report.sections import CANARY_ROWS

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
SECTIONS = ["verdict", "memorization", "mia", "training", "canaries", "provenance"]


def test_sections_in_order_and_content(parse_html, attack_dir: Path) -> None:
    html = (attack_dir / "index.html").read_text(encoding="utf-8")
    positions = [html.index(f'<section id="{s}">') for s in SECTIONS]
    assert positions == sorted(positions)
    text = " ".join(parse_html(html).text)
    run = load_run(attack_dir)
    best = strongest(membership_audits(run.results))
    assert best is not None and best.task.startswith("canaries")  # the 1.5-sigma task beats the 0.4-sigma one
    assert f"AUC {best.audit.auc.value:.3f}" in text
    assert "epsilon = 2.00 at delta = 1.0e-5" in text and "poisson" in text and "example (add/remove)" in text
    # the headline: corrected for the 3 audits, led by the proof (coin-flip canaries inserted once)
    assert "Empirical lower bound (95%, corrected for 3 audits)" in text
    assert "fixture-loss/coin-flip canaries; proof (one run, coin-flip canaries; Steinke et al. 2023)" in text
    # the canaries inserted up to 16 times are a group bound, compared with 16 x epsilon
    assert "Group bounds (not the per-example claim)" in text and "group of up to 16 rows" in text
    assert "the claim gives a group of 16 rows no guarantee (group delta ≥ 1)" in text  # 16 e^30 1e-5 > 1
    assert "Group privacy." in text and "Not covered by epsilon." in text
    assert "trained on public.jsonl only" in text  # the tokenizer, from the train manifest
    assert html.count("<svg ") == 4  # exposure, edit distance, ROC, training
    assert "EXCEEDS" not in html  # the lower bound is far below epsilon 2
    assert "bits on average (chance, not 0" in text and "0 bits is chance" not in text  # a random rank: ~1.44 bits
    # the per-canary table shows its first rows, most-repeated first; every canary is a row of the CSV it links
    assert len(re.findall(r'<td class="mono">c\d{4}</td>', html)) == CANARY_ROWS < len(run.results.canaries) == 40
    assert f"The first {CANARY_ROWS} of 40 canaries" in text and '<a href="scores/canaries.csv">' in html
    csv_rows = list(csv.DictReader((attack_dir / "scores" / "canaries.csv").open(encoding="utf-8")))
    assert [r["id"] for r in csv_rows] == [c.id for c in run.results.canaries]
    # every input's hash is listed
    for digest in run.manifest["inputs"].values():
        assert digest in html


def test_strings_from_data_are_escaped(parse_html, attack_dir: Path) -> None:
    html = (attack_dir / "index.html").read_text(encoding="utf-8")
    assert SCRIPT not in html and "<img" not in html
    tags = parse_html(html)
    assert not [t for t, _ in tags.tags if t in ("script", "img", "iframe", "object", "embed", "link")]
    assert not [a for _, attrs in tags.tags for a in attrs if a.startswith("on")]
    text = " ".join(tags.text)
    assert SCRIPT in text and IMG in text  # shown as text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_self_contained_no_network(parse_html, attack_dir: Path) -> None:
    html = (attack_dir / "index.html").read_text(encoding="utf-8")
    csp = [a for t, a in parse_html(html).tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"] == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert not re.findall(r"url\((?!#)", html), "only same-document url(#id) references (SVG clip paths)"
    assert "@import" not in html and "<script" not in html and 'xlink:href="http' not in html
    # no dates: nothing that looks like a timestamp of rendering
    assert not re.search(r"20\d\d-\d\d-\d\d[T ]\d\d:\d\d", html)
    assert "@media print" in html and "prefers-color-scheme: dark" in html


def test_attack_writes_index_listed_in_manifest(attack_dir: Path) -> None:
    manifest = json.loads((attack_dir / "manifest.json").read_text())
    assert manifest["outputs"]["index.html"] == sha256_file(attack_dir / "index.html")
    assert set(manifest["outputs"]) == {"results.json", "scores/canaries.jsonl", "scores/canaries.csv", "index.html"}


def test_rendering_is_deterministic_and_equals_index(attack_dir: Path, tmp_path: Path) -> None:
    first = render_report([str(attack_dir)])
    assert render_report([str(attack_dir)]) == first
    # `dpaudit report DIR` gives the very page `dpaudit attack` wrote
    out = tmp_path / "page.html"
    result = CliRunner().invoke(cli, ["report", str(attack_dir), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == (attack_dir / "index.html").read_bytes() == first.encode("utf-8")


def test_comparison_page_overlays_runs(parse_html, make_attack, tmp_path: Path, monkeypatch) -> None:
    runs = [
        make_attack(tmp_path, "eps1", epsilon=1.0, strength=0.3, seed=1),
        make_attack(tmp_path, "buggy", epsilon=0.05, strength=1.5, seed=2),
        make_attack(tmp_path, "nonprivate", epsilon=None, strength=2.0, seed=3, mia=False, metrics=False),
    ]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["report", *map(str, runs)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    pages = list((tmp_path / "reports").glob("*.html"))
    assert len(pages) == 1 and pages[0].name.startswith("eps1-vs-buggy-vs-nonprivate-")
    html = pages[0].read_text(encoding="utf-8")
    text = " ".join(parse_html(html).text)
    # one verdict per run, the buggy run flagged loudly, the non-private one without a bound
    assert html.count('<div class="verdict">') == 3
    assert html.count('class="alarm"') == 1 and "EXCEEDS THE CLAIMED EPSILON 0.0500" in text
    eps1, buggy, nonprivate = html.split('<div class="verdict">')[1:]
    assert "CLAIM CONTRADICTED" in buggy and "CLAIM CONTRADICTED" not in eps1 + nonprivate
    assert "none: non-private training (epsilon = infinity)" in text
    assert "No training telemetry for" in text
    # overlaid figures: one exposure and one edit-distance plot whose legends name every run
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.DOTALL)
    # exposure, edit, a ROC per run with MIA, a training figure per family (eps1 and buggy: other data, other steps)
    assert len(svgs) == 1 + 1 + 2 + 2
    for name in ("eps1", "buggy", "nonprivate"):
        assert name in svgs[0]
    # clip-path ids are unique across the page (each figure has its own salt)
    ids = re.findall(r'id="([^"]+)"', html)
    assert len(ids) == len(set(ids))


def test_no_membership_attack(parse_html, make_attack, tmp_path: Path) -> None:
    run = make_attack(tmp_path, "canaries-only", mia=False)
    text = " ".join(parse_html((run / "index.html").read_text(encoding="utf-8")).text)
    assert "No membership-inference attack was run" in text
    assert "none: no membership-inference attack was run" in text


def test_thousand_canaries_under_two_megabytes(make_attack, tmp_path: Path) -> None:
    run = make_attack(tmp_path, "big", n_canaries=1000, frequencies=(1, 2, 4, 8, 16, 32, 64))
    size = (run / "index.html").stat().st_size
    print(f"index.html for 1,000 canaries: {size / 1e6:.3f} MB")
    # the page shows the table's first rows; every one of the 1,000 is in the scores/ it links
    assert size < 400_000
    html = (run / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<td class="mono">c\d{4}</td>', html)) == CANARY_ROWS
    assert "The first 10 of 1000 canaries" in html and '<a href="scores/canaries.csv">' in html
    assert len((run / "scores" / "canaries.csv").read_text(encoding="utf-8").splitlines()) == 1 + 1000


def test_roc_thinning_keeps_the_low_fpr_operating_points() -> None:
    from dpaudit.audit import roc_curve
    from dpaudit.report.plots import ROC_POINTS, thin_roc

    rng = np.random.default_rng(0)
    roc = roc_curve(rng.normal(1, 1, 20_000), rng.normal(0, 1, 20_000))
    x, y = thin_roc(roc.fpr, roc.tpr, 1e-5)
    assert len(x) <= ROC_POINTS < len(roc.fpr)
    for fpr in (1e-3, 1e-2, 1e-1):  # the drawn step curve at the reported FPRs is the exact ROC's TPR
        drawn = y[np.searchsorted(x, fpr + 1e-12, side="right") - 1]
        assert drawn == roc.tpr_at(fpr)
    # elsewhere it never lies above the ROC (a step curve through ROC vertices only)
    for fpr in np.geomspace(1e-4, 1, 50):
        assert y[np.searchsorted(x, fpr + 1e-12, side="right") - 1] <= max(roc.tpr_at(fpr), 1e-5)


def test_membership_audits_found_in_nested_results(attack_dir: Path) -> None:
    audits = membership_audits(load_run(attack_dir).results)
    assert [a.task for a in audits] == ["examples", f"canaries {IMG}", "coin-flip canaries"]
    assert {a.attack for a in audits} == {"fixture-loss"}
    assert audits[0].audit.n_members == 2000 and audits[1].tpr(0.01) is not None


def test_nested_audit_results_round_trip_through_results_json(attack_dir: Path) -> None:
    """A result class holding AuditResult fields needs no custom to_json: the generic writer uses theirs."""
    from dpaudit.attacks.results import result_from_json

    result = next(a for a in load_run(attack_dir).results.attacks if a.attack == "fixture-loss")
    obj = json.loads(json.dumps(result.to_json()))
    assert obj["tasks"][0]["audit"]["schema"] == "dpaudit.audit/1"
    assert result_from_json(obj).to_json() == obj


def test_heuristic_bound_above_the_claim_asks_to_investigate_and_labels_never_overstate(
    parse_html, make_attack, tmp_path: Path
) -> None:
    """Examples and repeated canaries only (no coin-flip canaries): a Clopper-Pearson bound far above a tiny claim
    is a heuristic, so no "claim is wrong" alarm; claims print rounded up; the noise seed of an old manifest that
    recorded it verbatim never reaches the page; --scale-from private is shown as a release epsilon does not cover."""
    run = make_attack(
        tmp_path,
        "heuristic",
        epsilon=0.050345,
        strength=1.5,
        coin_flip=False,
        noise_seed=48213,
        scale_from_private=True,
        evil=False,
    )
    html = (run / "index.html").read_text(encoding="utf-8")
    text = " ".join(parse_html(html).text)
    assert 'class="alarm"' not in html and "CLAIM CONTRADICTED" not in text and "EXCEEDS" not in text
    assert "heuristic bound above the claim: investigate" in text
    assert "heuristic (Clopper-Pearson on the examples of one model: not independent trials)" in text
    assert "Nothing found contradicts" not in text
    assert "epsilon = 0.0504 at delta = 1.0e-5" in text and "0.0503" not in text  # 0.050345 rounded up, never down
    assert "48213" not in html and "48214" not in html  # --noise-seed X and --noise-seed=X, command and config
    assert "--noise-seed &#39;&lt;given: secret&gt;&#39;" in html and "--noise-seed=&lt;given: secret&gt;" in html
    assert "Not covered by epsilon" in text and "(--scale-from private)" in text


def test_shuffle_run_shows_no_proven_epsilon(parse_html, make_attack, tmp_path: Path) -> None:
    """privacy.json of a shuffle run has epsilon null: the as-if-Poisson figure is never shown as the claim, even from
    results that carried it as one, and nothing says the claim stands."""
    run = make_attack(tmp_path, "shuffle", epsilon=0.1487, strength=0.3, shuffle=True, evil=False)
    html = (run / "index.html").read_text(encoding="utf-8")
    text = " ".join(parse_html(html).text)
    assert "no proven epsilon (as-if-Poisson: 0.149)" in text
    assert "Nothing found contradicts" not in text and "claimed epsilon 0.149" not in text
    assert 'class="alarm"' not in html and "CLAIM CONTRADICTED" not in text


def test_chance_exposure_is_the_mean_over_a_random_rank() -> None:
    """A secret at a uniformly random rank scores log2|R| - log2 rank on average about log2(e) = 1.44 bits, not 0: the
    page says what chance is (computed, not assumed)."""
    import math

    import numpy as np

    from dpaudit.report.sections import chance_exposure

    for size in (10, 1000, 10**4):
        ranks = np.arange(1, size + 1)
        exact = float(np.mean(math.log2(size) - np.log2(ranks)))
        assert abs(chance_exposure(math.log2(size)) - exact) < 1e-9, size
    assert abs(chance_exposure(math.log2(10**4)) - 1.44) < 0.005 and chance_exposure(None) == math.log2(math.e)


def test_claimed_epsilon_keeps_integer_zeros() -> None:
    """A claim printed short drops decimal zeros only: 100 stays 100 (not 1), 8.00 is 8, rounded up."""
    from dpaudit.report.answers import _claimed

    assert _claimed(100.0) == "100"
    assert _claimed(10.0) == "10"
    assert _claimed(8.0) == "8"
    assert _claimed(1.2341) == "1.24"
