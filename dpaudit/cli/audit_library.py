"""``dpaudit audit-trainer`` for a trainer whose DP library owns the step (``--trainer opacus``).

The canaries go through the library's own per-example gradient path (:mod:`dpaudit.whitebox.gradient_path`), the
claim under test is the library's own (its accountant's), and dpaudit's recomputation of what ran is printed beside
it, with a mismatch flagged. ``--setup FILE.py:build`` audits the user's own model, optimizer and loader: the file is
imported and its function called and checked before any directory is written (a failure is one line naming the file
and the fix, exit 2, nothing left behind). The runs train in a temporary folder; the audit directory is written at
the end, staged, like the cooperative audit's (``whitebox.json``, ``scores/whitebox.jsonl``, ``index.html``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

__all__ = ["audit_library"]


def _claims_text(settings: dict[str, Any]) -> list[str]:
    from dpaudit.common.figures import format_up

    library, ours = settings["library_claim"], settings["dpaudit_claim"]
    lines = [
        f"{settings['library']} {settings['library_version']}: its {str(library['accountant']).upper()} accountant "
        f"claims epsilon {format_up(float(library['epsilon']))}; dpaudit ({str(ours['accountant']).upper()}) recomputes "
        f"{format_up(float(ours['epsilon']))} from what ran ({ours['steps']} updates).",
        f"canaries: {sum(settings['canary_paths'].values())} through the real gradient path "
        f"({settings['canary_path']}: the library's own per-example gradients and clipping).",
    ]
    if not settings["claims_agree"]:
        lines.append(
            "MISMATCH: the library's accountant does not account what ran: " + "; ".join(settings["mismatches"])
        )
    return lines


def audit_library(
    trainer: Any,
    trainer_name: str,
    out: Path,
    *,
    setup: str | None,
    target_epsilon: float,
    canaries: int,
    sampling_rate: float,
    steps: int,
    runs: int,
    confidence: float,
    settings: tuple[str, ...],
    seed: int | None,
    noise_seed: int | None,
    overwrite: bool,
    helpers: Any,
) -> None:
    """The whole gradient-path audit of ``trainer`` (a :class:`dpaudit.training.gradient_path.GradientPathHost`).

    ``helpers``: the ``audit-trainer`` command's module (its dataset, plan, ``--out`` checks and verdict lines, shared
    with the cooperative audit; passed in, not imported, so that the two modules form no import cycle)."""
    _inject, _train_rows, _verdict_text = helpers._inject, helpers._train_rows, helpers._verdict_text
    audit_config, check_out = helpers.audit_config, helpers.check_out
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import REDACTED, redact_config, run_dir_lock
    from dpaudit.report.whitebox import write_page
    from dpaudit.whitebox.analysis import summary
    from dpaudit.whitebox.audit import write_audit
    from dpaudit.whitebox.gradient_path import audit_gradient_path, path_settings

    if noise_seed is not None and runs > 1:
        raise UserInputError(
            f"--noise-seed with --runs {runs}: every run would draw the same noise and sampling; drop --noise-seed."
        )
    if setup is not None:
        check = getattr(trainer, "check_setup", None)
        if check is None:
            raise UserInputError(f"--setup {setup}: --trainer {trainer_name} does not train setup files.")
        check(setup)  # imported, called and checked now: a bad file is refused before anything is written
    audit_settings = redact_config(
        {
            "target_epsilon": target_epsilon,
            "canaries": canaries,
            "sampling_rate": sampling_rate,
            "steps": steps,
            "runs": runs,
            "confidence": confidence,
            "seed": seed,
            "set": list(settings),
            "setup": setup,
            "noise_seed": None if noise_seed is None else REDACTED,
        }
    )
    identity = {"trainer": trainer_name, **audit_settings}
    check_out(out, identity, overwrite=overwrite)
    with (
        run_dir_lock(out, stage=f"audit-trainer --trainer {trainer_name}"),
        tempfile.TemporaryDirectory(prefix="dpaudit-audit-library-") as scratch,
    ):
        work = Path(scratch)
        chosen = (*settings, f"setup={setup}") if setup is not None else settings
        if setup is None:
            data_dir: Path | None = work / "data"
            assert data_dir is not None
            _inject(data_dir)
            rows = _train_rows(data_dir) + canaries
        else:
            data_dir, rows = None, max(2, canaries)
        config = audit_config(
            trainer,
            target_epsilon=target_epsilon,
            rows=rows,
            noise_seed=noise_seed,
            settings=chosen,
            sampling_rate=sampling_rate,
            steps=steps,
        )
        bar = click.progressbar(length=runs, label=f"audit-trainer {trainer_name}: runs", file=sys.stderr)
        with bar:
            analysis, done = audit_gradient_path(
                trainer,
                data_dir,
                config,
                canaries=canaries,
                runs=runs,
                confidence=confidence,
                seed=seed,
                workdir=work / "runs",
                progress=lambda d, _t: bar.update(d - bar.pos),
            )
        path = path_settings(done)
        public = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
        write_audit(
            out,
            analysis,
            [run.evidence for run in done],
            trainer=trainer_name,
            config=public,
            settings={**audit_settings, **path},
            overwrite=overwrite,
            page=write_page,
        )
    body = summary(analysis)
    for line in _claims_text(path):
        click.echo(line)
    text = _verdict_text(body, trainer_name, out)
    if not math.isfinite(float(body["primary"]["epsilon"])):
        text += "\n(the bound is infinite: the canaries were separated perfectly.)"
    click.echo(text)
