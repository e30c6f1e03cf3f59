"""Open the report in a real headless Chromium: it loads, has its sections, runs no script, and draws.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it where apt is available). Where it
is missing and apt is not available, the test is skipped with the reason; where apt is available
it must be installed, so the test fails instead of silently skipping.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
SECTIONS = ["verdict", "memorization", "mia", "training", "canaries", "provenance"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if shutil.which("apt-get"):
        pytest.fail(
            "chromium is missing but apt-get is available: install it with "
            "`apt-get update && apt-get install -y chromium` (.ci/run does this)."
        )
    reason = "headless browser test skipped: chromium is not installed and apt-get is not available to install it"
    print(reason)
    pytest.skip(reason)


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": str(profile)},
    )


def _dump_dom(browser: str, tmp_path: Path, page: Path) -> str:
    result = _run(browser, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _length(value: str | None) -> float:
    match = re.fullmatch(r"\s*([0-9.]+)\s*(pt|px)?\s*", value or "")
    return float(match.group(1)) if match else 0.0


def test_detector_sees_a_script_that_runs(tmp_path: Path, parse_html) -> None:
    """Positive control: without the CSP the same payload runs and the DOM check below catches it."""
    browser = _chromium()
    page = tmp_path / "control.html"
    page.write_text(
        "<!DOCTYPE html><html><body><p>x</p>"
        "<script>document.documentElement.setAttribute('data-pwned','1')</script></body></html>"
    )
    dom = parse_html(_dump_dom(browser, tmp_path, page))
    assert any(tag == "html" and attrs.get("data-pwned") == "1" for tag, attrs in dom.tags)


def test_report_in_headless_chromium(attack_dir: Path, tmp_path: Path, parse_html) -> None:
    browser = _chromium()
    page = attack_dir / "index.html"
    shot = tmp_path / "report.png"
    # one browser run: the DOM after load on stdout, and the screenshot
    result = _run(
        browser, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,3000", "--dump-dom", page.as_uri()
    )
    assert result.returncode == 0, result.stderr[-2000:]
    if not shot.is_file():  # an older headless mode does one action per run
        _run(browser, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,3000", page.as_uri())
    assert shot.is_file(), result.stderr[-2000:]
    print(f"report screenshot: {shot}")
    dom = parse_html(result.stdout)
    ids = [attrs.get("id") for tag, attrs in dom.tags if tag == "section"]
    assert ids == SECTIONS  # loaded, with its sections in order
    text = " ".join(dom.text)
    assert "Privacy audit" in text and "<script>alert(1)</script>" in text and '"><img src=x onerror=alert(1)>' in text
    # no script ran: nothing an injected script would add, no element an injection would create
    html_attrs = next(attrs for tag, attrs in dom.tags if tag == "html")
    assert "data-pwned" not in html_attrs
    assert not [tag for tag, _ in dom.tags if tag in ("script", "img", "iframe", "object", "embed")]
    assert not [name for _, attrs in dom.tags for name in attrs if name.startswith("on")]
    # every SVG has a nonzero size
    svgs = [attrs for tag, attrs in dom.tags if tag == "svg"]
    assert len(svgs) == 4
    for attrs in svgs:
        assert _length(attrs.get("width")) > 0 and _length(attrs.get("height")) > 0, attrs
        view = [float(v) for v in (attrs.get("viewbox") or "").split()]
        assert len(view) == 4 and view[2] > 0 and view[3] > 0, attrs

    # the screenshot is not blank: many colours, a real share of non-background pixels
    from PIL import Image

    image = np.asarray(Image.open(shot).convert("RGB"))
    assert image.shape[:2] == (3000, 1280)
    packed = (image[..., 0].astype(np.int32) << 16) | (image[..., 1].astype(np.int32) << 8) | image[..., 2]
    colours = len(np.unique(packed))
    background = np.all(image == image[5, 5], axis=-1).mean()
    assert colours > 50 and background < 0.97, (colours, background)
    # the plot colours are on screen (the first series' blue of the exposure figure)
    assert np.all(np.abs(image.astype(int) - [0x00, 0x72, 0xB2]) <= 8, axis=-1).sum() > 100


def _cells(dom_html: str) -> list[list[str]]:
    """The rows of the comparison table as the browser's DOM holds them, each a list of its cells' text."""
    import html as html_lib

    table = dom_html[dom_html.index('<table id="models-table">') :]
    table = table[: table.index("</table>")]
    rows = re.findall(r'<tr class="model-row">(.*?)</tr>', table, flags=re.DOTALL)
    return [
        [
            " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", c)).split())
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.DOTALL)
        ]
        for row in rows
    ]


def test_comparison_table_rows_in_headless_chromium(models_page, tmp_path: Path, parse_html) -> None:
    """The comparison page's models table in a real browser: one row per model (the model attacked twice is one row),
    its label, claim, utility beside the baseline, and n/a where the non-members cannot measure a TPR."""
    browser = _chromium()
    page, dirs = models_page
    dom = _dump_dom(browser, tmp_path, page)
    ids = [attrs.get("id") for tag, attrs in parse_html(dom).tags if tag == "section"]
    assert ids == ["answers", "models", *SECTIONS]  # the answers at a glance, then the table
    rows = _cells(dom)
    assert [(r[0].split()[0], r[1]) for r in rows] == [
        ("eps2-model", "2.00"),
        ("non-private", "inf"),
        ("eps8-model", "8.00"),
    ]
    assert all(len(r) == 9 for r in rows)  # the public start is a column
    assert str(dirs["eps2-membership"]) in rows[0][0] and re.fullmatch(r"n/a \[\d\]", rows[0][8])  # a footnote
    assert rows[1][2].startswith("45.0% (5.0%)")


#: The screen a newcomer sees first (a common laptop's), on which a comparison page must answer its four questions.
FIRST_SCREEN = (1366, 768)
_MEASURE = """<script>
for (const el of document.querySelectorAll('.badge, dl.answers dt, dl.answers dd')) {
  const r = el.getBoundingClientRect();
  el.setAttribute('data-rect', [r.left, r.top, r.right, r.bottom].map(Math.round).join(','));
}
document.documentElement.setAttribute('data-viewport', innerWidth + 'x' + innerHeight);
</script>"""


def first_screen(browser: str, tmp_path: Path, page: Path) -> tuple[str, list[tuple[str, str, str, tuple[int, ...]]]]:
    """Lay ``page`` out in the real browser at :data:`FIRST_SCREEN` and return (viewport, elements): each badge and
    each answer of the "at a glance" block as (class or tag, its ``data-model`` or "", its text, its box left, top,
    right, bottom in CSS pixels).

    The page itself runs no script (its CSP forbids it); a copy of it without that one meta tag gets a script at the
    end of its body that writes each element's box into the DOM, which the browser then dumps. Everything else
    (styles, fonts, inline SVGs) is the page's own."""
    import html as html_lib

    text = page.read_text(encoding="utf-8")
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text)
    copy = tmp_path / "first-screen.html"
    copy.write_text(text.replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
    width, height = FIRST_SCREEN
    result = _run(browser, tmp_path / "profile-screen", f"--window-size={width},{height}", "--dump-dom", copy.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    viewport = re.search(r'data-viewport="([^"]+)"', dom)
    assert viewport is not None, "the measuring script did not run"
    found = []
    for tag, attrs, inner in re.findall(r"<(span|dt|dd)([^>]*data-rect=\"[^\"]+\"[^>]*)>(.*?)</\1>", dom, re.DOTALL):
        rect = tuple(int(v) for v in re.search(r'data-rect="([^"]+)"', attrs).group(1).split(","))
        model = re.search(r'data-model="([^"]*)"', attrs)
        kind = "badge" if tag == "span" else tag
        words = " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", inner)).split())
        found.append((kind, html_lib.unescape(model.group(1)) if model else "", words, rect))
    return viewport.group(1), found


def assert_answers_on_first_screen(browser: str, tmp_path: Path, page: Path, models: list[str]) -> dict[str, str]:
    """The four questions with their answers and a verdict badge per model in ``models``, all inside the first
    1366 x 768 of ``page`` in the real browser; returns model -> badge word."""
    viewport, found = first_screen(browser, tmp_path, page)
    width, height = FIRST_SCREEN
    assert viewport.startswith(f"{width}x"), viewport

    def inside(rect: tuple[int, ...]) -> bool:
        left, top, right, bottom = rect
        return 0 <= left and right <= width and 0 <= top and bottom <= height

    questions = [text for kind, _, text, _ in found if kind == "dt"]
    assert questions == ["Does it leak?", "Does DP fix it?", "At what cost?", "Is the claim consistent?"]
    for kind, _, text, rect in found:
        if kind in ("dt", "dd"):
            assert inside(rect), (text, rect)
    answers = [text for kind, _, text, _ in found if kind == "dd"]
    assert len(answers) == 4 and all(len(a) > 10 for a in answers), answers
    badges = {model: (text, rect) for kind, model, text, rect in found if kind == "badge"}
    assert sorted(badges) == sorted(models), badges
    for model, (text, rect) in badges.items():
        assert inside(rect), (model, text, rect)
        assert text in (
            "consistent",
            "contradicted",
            "could not be tested",
            "mechanism refuted",
            "investigate",
            "non-private",
            "not tested",
            "claim unknown",
            "no proven ε",
        ), text
    return {model: text for model, (text, _) in badges.items()}


def test_comparison_page_answers_on_the_first_screen(models_page, tmp_path: Path) -> None:
    """The first 1366 x 768 of a comparison page in a real browser: the four answers and a badge per model (the
    eps2 model's proof is within its claim; the non-private model has none to test)."""
    page, _ = models_page
    badges = assert_answers_on_first_screen(_chromium(), tmp_path, page, ["eps2-model", "non-private", "eps8-model"])
    assert badges["non-private"] == "non-private"
