"""The white-box audit page (``dpaudit audit-trainer``'s index.html and ``dpaudit report AUDIT_DIR``).

One audit directory per module, written through the Python API on the numpy trainer of
:mod:`tests.whitebox.linear_audit` (two runs of 2,000 canaries: seconds, no torch); the page's
figures are checked against its own ``whitebox.json``.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.figures import format_down, format_up
from dpaudit.files.run_dirs import sha256_file

RUNS, CANARIES = 2, 2000
SECTIONS = ["verdict", "bounds", "scores", "mechanism", "limits", "provenance"]


@pytest.fixture(scope="module")
def audit_dir(tmp_path_factory) -> Path:
    """A finished audit-trainer directory (read-only for the tests)."""
    from dpaudit.report.whitebox import write_page
    from dpaudit.whitebox.audit import audit_trainer, write_audit
    from tests.whitebox.linear_audit import LinearAuditPlugin

    analysis, evidence = audit_trainer(
        lambda out: LinearAuditPlugin(target_epsilon=2, steps=20, batch=512, noise_seed=1),
        canaries=CANARIES,
        runs=RUNS,
        seed=0,
    )
    out = tmp_path_factory.mktemp("whitebox") / "audit"
    return write_audit(
        out,
        analysis,
        evidence,
        trainer="linear-audit",
        config={"steps": 20, "noise_seed": 1},
        settings={"target_epsilon": 2, "canaries": CANARIES, "runs": RUNS, "seed": 0},
        page=write_page,
    )


def _body(directory: Path) -> dict:
    return json.loads((directory / "whitebox.json").read_text(encoding="utf-8"))


def _report(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.output


def _verdict_block(html: str) -> str:
    return html[html.index('<section id="verdict">') : html.index("</section>")]


def test_page_leads_with_the_verdict_and_its_numbers(audit_dir: Path, parse_html) -> None:
    html = (audit_dir / "index.html").read_text(encoding="utf-8")
    body = _body(audit_dir)
    claim, primary = body["claim"]["epsilon"], body["primary"]
    positions = [html.index(f'<section id="{s}">') for s in SECTIONS]
    assert positions == sorted(positions)
    verdict = re.sub(r"\s+", " ", "".join(parse_html(_verdict_block(html)).text))
    word = "REFUTED" if body["refuted"] else "consistent"
    assert word in verdict and not body["refuted"]  # a correct trainer at epsilon 2
    assert f"epsilon = {format_up(claim)} at delta = {format_up(body['claim']['delta'], 2)}" in verdict
    assert f"epsilon ≥ {format_down(primary['epsilon'])} ({primary['kind']}, all iterates;" in verdict
    assert f"the bound is {format_down(primary['epsilon'] / claim, 2)} of the claim" in verdict
    # the kind: the pooled test planned from the claim (the order statistics need no assumption), or the one-run proof
    pooled_words = (
        "pooled: over 2 runs × 2000 canaries as one game"
        if body["pooled_method"] == "order_stats"
        else "pooled: over 2 runs × 2000 canaries, valid when the trainer treats the canaries as independent trials"
    )
    assert (pooled_words if primary["kind"] == "pooled" else "proof: for this one training run") in verdict
    assert "CLAIM REFUTED" not in html and 'class="alarm"' not in html


def test_every_bound_is_a_row_rounded_down(audit_dir: Path, parse_html) -> None:
    html = (audit_dir / "index.html").read_text(encoding="utf-8")
    body = _body(audit_dir)
    table = html[html.index('<table class="bounds">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>") :], flags=re.DOTALL)
    bounds = [b for view in body["pooled"].values() for b in view.values()]
    bounds += [b for view in body["one_run"].values() for run in view for b in run.values()]
    assert len(rows) == len(bounds) == 2 * 3 + RUNS * 2 * 4  # pooled (3 methods: R > 1) and one-run (4) per view
    cells = [" ".join(parse_html(r).text) for r in rows]
    for b in bounds:
        assert any(format_down(b["epsilon"]) in c and b["proves"] in c for c in cells), b
    assert sum("(verdict)" in c for c in cells) == 1 and sum("(verdict's twin)" in c for c in cells) == 1
    assert sum("run 1" in c for c in cells) == sum("run 2" in c for c in cells) == 8
    planned = [b for b in bounds if b.get("selection") == "planned"]  # the one-run proof's guess counts (whitebox.plan)
    assert planned and sum("planned from the claim before any score was seen" in c for c in cells) == len(planned)
    text = " ".join(parse_html(html).text)
    for needle in (
        "the pooled bound assumes independent canaries",
        "One-run bounds are limited by the number of canaries",
        "Steinke et al.'s one-run bound above",
    ):
        assert needle.lower() in text.lower(), needle


def test_histograms_auc_mechanism_and_self_containment(audit_dir: Path, parse_html) -> None:
    html = (audit_dir / "index.html").read_text(encoding="utf-8")
    body = _body(audit_dir)
    svgs = re.findall(r"<svg .*?</svg>", html, flags=re.DOTALL)
    assert len(svgs) == 1 and 'class="plot"' in svgs[0]
    for view in ("all iterates", "last iterate"):  # one panel per view, members and non-members overlaid
        assert f"{view} (AUC {body['auc'][view.replace(' ', '_')]:.3f})" in svgs[0]
    assert "members (n = " in svgs[0] and "non-members (n = " in svgs[0]
    text = " ".join(parse_html(html).text)
    segment = body["claim"]["segments"][0]
    assert f"{segment['sampling_probability']:.4g}" in text and f"{segment['noise_multiplier']:.4g}" in text
    assert "per-example clipping" in text and f"{CANARIES} per run" in text
    # self-contained: no script, nothing fetched, no date
    assert "<script" not in html
    csp = [a for t, a in parse_html(html).tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0]["content"] == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    assert '"noise_seed": 1' not in html  # the trainer's secret noise seed never reaches the page


def test_deterministic_and_dpaudit_report_gives_the_same_page(audit_dir: Path, tmp_path: Path) -> None:
    from dpaudit.report import render_report

    manifest = json.loads((audit_dir / "manifest.json").read_text())
    assert manifest["outputs"]["index.html"] == sha256_file(audit_dir / "index.html")
    first = render_report([str(audit_dir)])
    assert render_report([str(audit_dir)]) == first
    out = tmp_path / "page.html"
    code, output = _report(str(audit_dir), "--out", str(out))
    assert code == 0, output
    assert out.read_bytes() == (audit_dir / "index.html").read_bytes() == first.encode("utf-8")


def test_damaged_audit_is_refused(audit_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(audit_dir, tmp_path / "copy"))
    path = copy / "whitebox.json"
    path.write_text(path.read_text().replace('"refuted": false', '"refuted": true'))
    out = tmp_path / "page.html"
    code, output = _report(str(copy), "--out", str(out))
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "whitebox.json was changed" in lines[0], output
    assert not out.exists()
    # re-hashed after an edit that breaks a type: named, one line, nothing written
    body = _body(copy)
    body["claim"]["steps"] = "eight"
    path.write_text(json.dumps(body))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["outputs"]["whitebox.json"] = sha256_file(path)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, output = _report(str(copy), "--out", str(out))
    assert code == 2 and output.count("\n") == 1 and "field claim.steps must be an integer" in output, output
    assert not out.exists()


def test_refuted_claim_is_loud(audit_dir: Path, tmp_path: Path, parse_html) -> None:
    """A primary bound above the claim (as a broken trainer gives) reads REFUTED, with the alarm, first."""
    from dpaudit.report.whitebox import write_page

    copy = Path(shutil.copytree(audit_dir, tmp_path / "refuted"))
    (copy / "manifest.json").unlink()
    body = _body(copy)
    body["primary"]["epsilon"] = body["claim"]["epsilon"] * 1.5
    body["refuted"] = True
    (copy / "whitebox.json").write_text(json.dumps(body))
    html = write_page(copy).read_text(encoding="utf-8")
    verdict = "".join(parse_html(_verdict_block(html)).text)
    assert "CLAIM REFUTED" in verdict and "The claim is REFUTED" in verdict
    assert f"EXCEEDS THE CLAIMED EPSILON {format_up(body['claim']['epsilon'])}" in verdict
    assert html.index('class="alarm"') < html.index('<section id="bounds">')


def test_mixed_with_an_attack_directory_leads_with_the_white_box_bound(
    audit_dir: Path, make_attack, tmp_path: Path, parse_html
) -> None:
    attack = make_attack(tmp_path, "eps2", evil=False)
    out = tmp_path / "mixed.html"
    code, output = _report(str(audit_dir), str(attack), "--out", str(out))
    assert code == 0, output
    html = out.read_text(encoding="utf-8")
    verdict = _verdict_block(html)
    cards = verdict.split('<div class="verdict')[1:]
    assert len(cards) == 2 and cards[0].startswith(' whitebox-verdict">')  # the white-box verdict first
    body = _body(audit_dir)
    assert f"epsilon ≥ {format_down(body['primary']['epsilon'])}" in " ".join(parse_html(cards[0]).text)
    ids = [a.get("id") for t, a in parse_html(html).tags if t == "section"]
    assert ids == ["verdict", "whitebox", "memorization", "mia", "training", "canaries", "provenance"]
    assert "1 run and 1 white-box trainer audit compared" in html
    assert html.count('<table class="bounds">') == 1 and "<script" not in html
    ids = re.findall(r'id="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    # an inject directory among them is named as neither kind
    bad = tmp_path / "inject"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps({"schema": "dpaudit.inject/1", "outputs": {}}))
    code, output = _report(str(audit_dir), str(bad), "--out", str(out))
    assert code == 2 and "not an attack directory" in output and "audit-trainer directory" in output


def test_page_in_headless_chromium(audit_dir: Path, tmp_path: Path, parse_html) -> None:
    """The page loads in a real browser with its sections, runs nothing, and draws its histograms."""
    from tests.report.test_report_browser import _chromium, _run

    browser = _chromium()
    result = _run(browser, tmp_path / "profile", "--dump-dom", (audit_dir / "index.html").as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = parse_html(result.stdout)
    assert [a.get("id") for t, a in dom.tags if t == "section"] == SECTIONS
    assert not [t for t, _ in dom.tags if t in ("script", "img", "iframe", "object", "embed")]
    svgs = [a for t, a in dom.tags if t == "svg"]
    assert len(svgs) == 1 and float(svgs[0]["viewbox"].split()[2]) > 0
    assert "White-box trainer audit" in " ".join(dom.text)


def test_a_refuted_curve_within_the_claim_reads_mechanism_refuted(audit_dir: Path, tmp_path: Path, parse_html) -> None:
    """The claimed curve rejected while the bound valid for any mechanism is within the claim: the page says the trained
    model is not the stated mechanism, prints the any-mechanism figure, and never says the claim is refuted."""
    from dpaudit.report.whitebox import write_page

    copy = Path(shutil.copytree(audit_dir, tmp_path / "mechanism"))
    (copy / "manifest.json").unlink()
    body = _body(copy)
    claim = body["claim"]["epsilon"]
    body["primary"]["epsilon"], body["primary"]["scale"] = claim * 1.2, 0.9
    body["refuted"], body["mechanism_refuted"] = False, True
    body["any_mechanism"] = {
        "method": "steinke",
        "proves": "(epsilon, delta)-DP, any mechanism",
        "epsilon": claim * 0.4,
        "confidence": body["bound_confidence"],
        "guesses": 100,
        "correct": 90,
    }
    (copy / "whitebox.json").write_text(json.dumps(body))
    html = write_page(copy).read_text(encoding="utf-8")
    verdict = "".join(parse_html(_verdict_block(html)).text)
    assert "MECHANISM REFUTED" in verdict and "not the mechanism" in verdict
    assert "CLAIM REFUTED" not in verdict and "The claim is REFUTED" not in verdict
    assert format_down(claim * 0.4) in verdict and format_down(claim * 1.2) not in verdict


def test_a_gaussian_pair_verdict_is_named_a_fit_not_a_proof(audit_dir: Path) -> None:
    """When the planned one-run test is the Gaussian pair (valid for Gaussian-pair projections only), the verdict
    calls it a fit, never "proof ... assumes nothing", and its row shows the planned projection with mu rounded down."""
    import dataclasses

    from dpaudit.report.whitebox import _row, _verdict
    from dpaudit.report.whitebox_load import load_whitebox

    run = load_whitebox(audit_dir)
    gauss = run.one_run["all_iterates"][0]["gauss_pair"]
    fit = dataclasses.replace(
        run, one_run_method="gauss_pair", primary_kind="one-run", primary=gauss, mechanism_refuted=False
    )
    v = _verdict(fit)
    assert not v.proof and "Gaussian-pair fit" in v.kind_words and "assumes nothing" not in v.kind_words
    assert "the one-run Gaussian-pair fit" in v.sentence and "one-run proof" not in v.sentence
    assert _verdict(run).proof == (run.primary_kind == "one-run")  # the other tests stay proofs
    row = _row(fit, "run 1", "one-run", "all_iterates", gauss, verdict=True)
    assert "projection, mu >= " in row.evidence and "fixed from the claim before the run" in row.evidence


def test_a_rejected_scale_just_above_the_claim_is_printed_rounded_down(audit_dir: Path) -> None:
    """A refined search rejects sigma x 2^(1/256) = 1.0027: the row must not read "rejects sigma x 1" (the claim's own
    scale, a refutation it did not make), nor any scale above the one rejected."""
    import dataclasses

    from dpaudit.report.whitebox import _row
    from dpaudit.report.whitebox_load import load_whitebox

    run = load_whitebox(audit_dir)
    bound = dataclasses.replace(run.one_run["all_iterates"][0]["claim_family"], scale=2.0 ** (1 / 256))
    assert "rejects sigma × 1.002" in _row(run, "run 1", "one-run", "all_iterates", bound, verdict=False).evidence
    bound = dataclasses.replace(bound, scale=0.99999)
    assert "rejects sigma × 0.9999" in _row(run, "run 1", "one-run", "all_iterates", bound, verdict=False).evidence


def test_every_row_shows_its_ceiling_and_the_canaries_a_perfect_attack_needs(audit_dir: Path, parse_html) -> None:
    """whitebox.json gives every bound (pooled and one-run, both views) a ceiling and a canaries-needed field, and each
    row of the page shows both; a row whose ceiling is at or below the claim says it could not have refuted it."""
    body = _body(audit_dir)
    claim = body["claim"]["epsilon"]
    bounds = [b for view in body["pooled"].values() for b in view.values()]
    bounds += [b for view in body["one_run"].values() for run in view for b in run.values()]
    for b in bounds:
        assert isinstance(b["ceiling"], float) and b["ceiling"] >= b["epsilon"] - 1e-9, b
        assert "canaries_needed" in b and (b["canaries_needed"] is None or b["canaries_needed"] >= 2), b
    html = (audit_dir / "index.html").read_text(encoding="utf-8")
    table = html[html.index('<table class="bounds">') :]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>") : table.index("</table>")], flags=re.DOTALL)
    cells = [" ".join(parse_html(r).text) for r in rows]
    assert len(cells) == len(bounds)
    assert all("(a perfect attack" in c and ("rejects the claim" in c or "to reject the claim" in c) for c in cells)
    low = sum(b["ceiling"] <= claim for b in bounds)
    assert sum("could not have refuted" in c for c in cells) == low
    methods = {b["method"] for b in bounds}
    assert {"steinke", "clopper_pearson", "claim_family", "order_stats", "gauss_pair"} <= methods
