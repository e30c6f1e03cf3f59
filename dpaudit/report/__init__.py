"""The audit report: one self-contained HTML page per attack or audit-trainer directory, or one comparing several.

``dpaudit attack`` writes ``index.html`` next to ``results.json`` and ``dpaudit audit-trainer`` next to
``whitebox.json``; ``dpaudit report`` renders a page of one or several such directories. Modules, one
job each: :mod:`.load` (read and verify an attack directory and the upstream files its manifest
names), :mod:`.whitebox_load` (read and verify an audit-trainer directory), :mod:`.membership` (find
the membership audits in typed results), :mod:`.models` (attack directories of one model merged, each model's
label), :mod:`.comparison` (the table a comparison page opens with, a row per model), :mod:`.measurable` (n/a
rates, exact intervals, why a bound of 0 says nothing), :mod:`.notes` (what ``dpaudit attack`` prints under its
table), :mod:`.plots` (deterministic inline SVG), :mod:`.sections` (typed view objects of the attack page's sections), :mod:`.whitebox` (the white-box page's views and
``write_page``), :mod:`.templating` (Jinja2 with autoescaping, the figure filters, the style sheet),
:mod:`.render` (which page a set of directories gets).
"""

from __future__ import annotations

from dpaudit.report.render import DEFAULT_DIR, render_report, render_runs, write_report

__all__ = ["DEFAULT_DIR", "render_report", "render_runs", "write_report"]
