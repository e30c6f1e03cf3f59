"""The page of a white-box trainer audit (``dpaudit audit-trainer``): placeholder until the full page lands."""

from __future__ import annotations

import html
import json
from pathlib import Path


def write_page(directory: Path) -> Path:
    body = json.loads((Path(directory) / "whitebox.json").read_text(encoding="utf-8"))
    claim, primary = body["claim"], body["primary"]
    text = (f"<!doctype html><html><head><meta charset='utf-8'><title>dpaudit audit-trainer {html.escape(body['trainer'])}"
            f"</title></head><body><h1>White-box audit of {html.escape(body['trainer'])}</h1>"
            f"<p>claimed epsilon {claim['epsilon']:.3f}; lower bound {primary['epsilon']:.3f} ({primary['kind']})</p>"
            "</body></html>\n")
    out = Path(directory) / "index.html"
    out.write_text(text, encoding="utf-8")
    return out
