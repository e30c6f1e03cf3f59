"""The audit report: one self-contained HTML page per attack directory, or one comparing several.

``dpaudit attack`` writes ``index.html`` next to ``results.json``; ``dpaudit report``
renders a page of one or several attack directories. Modules, one job each: :mod:`.load` (read and
verify an attack directory and the upstream files its manifest names), :mod:`.membership` (find the
membership audits in typed results), :mod:`.plots` (deterministic inline SVG), :mod:`.sections`
(typed view objects of the six sections), :mod:`.render` (Jinja2 with autoescaping).
"""

from __future__ import annotations

from dpaudit.report.render import DEFAULT_DIR, render_report, render_runs, write_report

__all__ = ["DEFAULT_DIR", "render_report", "render_runs", "write_report"]
