"""The Python API: ``dpaudit.inject``, ``dpaudit.attack`` and ``dpaudit.report`` for notebooks and scripts.

Each function is its command with keyword arguments named as the options (``--label-column`` is
``label_column``), the same checks and the same one-line errors (:class:`~dpaudit.common.errors.UserInputError`),
and writes the same run directories. What they return can become a table: ``to_pandas()`` (pandas
is optional, not a dependency of dpaudit; ``rows()`` gives the same table as plain dicts).

``dpaudit.attack`` also takes a Hugging Face model object with its tokenizer: it is saved with
``save_pretrained`` (safetensors) into a temporary directory, or ``save_to``, and that directory is
attacked, so an in-memory model goes through exactly the checks and the loader a directory does.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.attacks.registry import DEFAULT_ATTACKS
from dpaudit.attacks.results import AttackResults
from dpaudit.common.errors import UserInputError

__all__ = ["AuditResults", "InjectResult", "Report", "attack", "inject", "report"]

PANDAS_MISSING = (
    "to_pandas() needs pandas, which dpaudit does not install: pip install pandas (or use .rows(), the "
    "same table as a list of dicts)."
)


def _data_frame(rows: list[dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    return pd.DataFrame(rows)


def _flat(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a.b`` columns; lists and scalars kept as they are."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# -- inject ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InjectResult:
    """An inject run directory just written: where, its summary (as in ``manifest.json``) and the printed lines.

    ``rows()``/``to_pandas()``: one row per canary of ``canaries.jsonl`` (id, secret, text, frequency, member,
    label), which is what the attacks score; empty with ``no_canaries``.
    """

    path: Path
    summary: dict[str, Any]
    lines: tuple[str, ...]

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def rows(self) -> list[dict[str, Any]]:
        from dpaudit.inject_dir.reader import load_inject_run

        return [c.to_record() for c in load_inject_run(self.path).canaries]

    def to_pandas(self) -> Any:
        return _data_frame(self.rows())


def inject(
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    force: bool = False,
    frequencies: str | Sequence[int] | None = None,
    **options: Any,
) -> InjectResult:
    """``dpaudit inject``: write an inject run directory into ``out``.

    Examples:
        ``dpaudit.inject("runs/mine", train="train.csv", heldout="test.csv", label_column="category")``: your own split
        (members = the train rows, non-members = the held-out rows, exact duplicates removed and counted);
        ``dpaudit.inject("runs/data", corpus="builtin:assistant", corpus_size=4000, seed=0)``.

    Args:
        out: the run directory.
        frequencies: ``"1,2,5"`` or ``[1, 2, 5]``; None chooses them from the number of training rows.
        options: the other options of ``dpaudit inject`` by their Python names: ``corpus``, ``train``, ``heldout``,
            ``public``, ``corpus_format``, ``text_column``, ``label_column``, ``corpus_size``, ``seed``,
            ``secret_format`` (``--format``), ``design``, ``template``, ``word_list``, ``phrase_corpus``,
            ``per_frequency``, ``holdout``, ``coin_flip``, ``no_canaries``, ``heldout_fraction``,
            ``public_fraction``, ``heldout_size``, ``public_size``, ``encoding_errors``, ``resplit``, ``resplit_seed``,
            ``exclude``.

    Raises:
        UserInputError: bad input, naming the option; nothing is written.
        TypeError: an unknown option.
    """
    from dpaudit.canaries.options import InjectOptions, inject_config, summary_lines
    from dpaudit.canaries.pipeline import inject as run_inject

    names = {f.name for f in dataclasses.fields(InjectOptions)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(
            f"dpaudit.inject() got unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}."
        )
    if frequencies is not None and not isinstance(frequencies, str):
        frequencies = ",".join(str(f) for f in frequencies)
    for name in ("corpus", "train", "heldout", "public", "phrase_corpus", "word_list"):
        if isinstance(options.get(name), os.PathLike):
            options[name] = os.fspath(options[name])
    config = inject_config(InjectOptions(frequencies=frequencies, **options))
    summary = run_inject(config, out, overwrite=overwrite, force=force, command=None)
    return InjectResult(path=Path(out), summary=summary, lines=tuple(summary_lines(summary, str(out))))


# -- attack ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuditResults(AttackResults):
    """:class:`~dpaudit.attacks.results.AttackResults` (what ``dpaudit attack`` found) that can become a table.

    ``rows()``/``to_pandas()``: one row per membership task of each membership-inference attack (AUC, TPR at
    the FPRs, the empirical epsilon lower bound and the claim) and per repetition count of exposure and
    reconstruction, each with the ``attack``, the ``model`` and the ``claimed_epsilon``; nested fields become
    ``a.b`` columns. The full records stay on the object (``results["loss"]``, ``results.canaries``).
    """

    @classmethod
    def of(cls, results: AttackResults) -> AuditResults:
        return cls(**{f.name: getattr(results, f.name) for f in dataclasses.fields(results)})

    def rows(self) -> list[dict[str, Any]]:
        common = {"model": self.model.path, "claimed_epsilon": self.claimed.epsilon}
        out: list[dict[str, Any]] = []
        for result in self.attacks:
            record = result.to_json()
            name = record.get("attack")
            if "tasks" in record:  # membership inference: a row per task, without the curves and the full audit
                for task in record["tasks"]:
                    kept = {k: v for k, v in task.items() if k not in ("audit", "roc", "info")}
                    out.append({"attack": name, **common, **_flat(kept)})
            elif "rows" in record:  # exposure, reconstruction: a row per repetition count (0: the controls)
                for row in record["rows"]:
                    out.append({"attack": name, **common, **_flat(row)})
            else:
                out.append({"attack": name, **common, **_flat({k: v for k, v in record.items() if k != "attack"})})
        return out

    def to_pandas(self) -> Any:
        return _data_frame(self.rows())


def _is_path(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike))


def save_model(model: Any, tokenizer: Any, directory: str | os.PathLike[str]) -> Path:
    """Save an in-memory Hugging Face model and its tokenizer (``save_pretrained``, safetensors) into ``directory``.

    Raises:
        UserInputError: an object without ``save_pretrained``, or no tokenizer.
    """
    if not callable(getattr(model, "save_pretrained", None)):
        raise UserInputError(
            f"model: expected a model directory or a Hugging Face model (save_pretrained), got {type(model).__name__}."
        )
    if tokenizer is None or not callable(getattr(tokenizer, "save_pretrained", None)):
        raise UserInputError(
            "tokenizer: an in-memory model needs its tokenizer (tokenizer=..., a Hugging Face tokenizer "
            "with save_pretrained): the attacks tokenize the rows and canaries with it."
        )
    directory = Path(directory)
    model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer.save_pretrained(str(directory))
    return directory


def attack(
    model: Any,
    data: str | os.PathLike[str],
    attacks: Iterable[str] | str = DEFAULT_ATTACKS,
    *,
    tokenizer: Any = None,
    save_to: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    **options: Any,
) -> AuditResults:
    """``dpaudit attack``: attack ``model`` with the rows and canaries of the inject directory ``data``.

    Examples:
        ``dpaudit.attack("runs/np", "runs/data", ["exposure"])``;
        ``dpaudit.attack(model, "runs/mine", ["loss"], tokenizer=tokenizer).to_pandas()`` for a model in memory.

    Args:
        model: a train run directory, a Hugging Face model directory, or a Hugging Face model object (a masked LM
            or a sequence classifier) with ``tokenizer``.
        tokenizer: for a model object: its tokenizer.
        save_to: for a model object: the directory it is saved to and kept in (it must not exist or be empty); by
            default a temporary directory, removed after the attack.
        out: the attack directory to write (``results.json``, scores, ``index.html``); None writes nothing.
        options: as :func:`dpaudit.attacks.run.attack`: ``device``, ``progress``, ``overwrite``, and the attacks'
            options by field name (``batch_size``, ``seed``, ``shadow_models``, ``min_k``, ...: the fields of
            :class:`~dpaudit.attacks.options.RunOptions` and of the Configs of the attacks run, which ``dpaudit attack
            --attacks NAME --help`` lists); an option of an attack that does not run is refused.

    Raises:
        UserInputError: bad input, before anything is loaded or written.
    """
    from dpaudit.stages.attack import attack as run_attack

    if _is_path(model):
        if tokenizer is not None or save_to is not None:
            raise UserInputError(
                "tokenizer and save_to apply to an in-memory model; a model directory holds its tokenizer."
            )
        return AuditResults.of(run_attack(model, data, attacks, out=out, **options))
    if save_to is not None:
        target = Path(save_to)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise UserInputError(f"save_to {target}: exists and is not an empty folder; choose a new one.")
        return AuditResults.of(run_attack(save_model(model, tokenizer, target), data, attacks, out=out, **options))
    with tempfile.TemporaryDirectory(prefix="dpaudit-model-") as tmp:
        return AuditResults.of(run_attack(save_model(model, tokenizer, tmp), data, attacks, out=out, **options))


# -- report ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """A report page just written, and the directories it shows.

    ``rows()``/``to_pandas()``: the rows of :meth:`AuditResults.rows` of every attack directory on the page,
    each with its ``run`` (the directory as given); white-box trainer audits are on the page only.
    """

    path: Path
    runs: tuple[str, ...]

    def rows(self) -> list[dict[str, Any]]:
        from dpaudit.attacks.run import RESULTS, read_attack_dir

        out: list[dict[str, Any]] = []
        for run in self.runs:
            if (Path(run) / RESULTS).is_file():
                out.extend({"run": run, **row} for row in AuditResults.of(read_attack_dir(run)).rows())
        return out

    def to_pandas(self) -> Any:
        return _data_frame(self.rows())


def report(
    runs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], **options: Any
) -> Report:
    """``dpaudit report``: render the page of one attack or audit-trainer directory, or the comparison of several.

    Example: ``dpaudit.report(["runs/np-attack", "runs/dp8-attack"], "reports/np-vs-dp8.html").to_pandas()``.

    Raises:
        UserInputError: a directory that is not an attack or audit-trainer directory, or one whose files changed.
    """
    from dpaudit.report import write_report

    # one directory, or several
    dirs: list[str | os.PathLike[str]] = [runs] if isinstance(runs, (str, os.PathLike)) else list(runs)
    if not dirs:
        raise UserInputError("dpaudit.report: no run directory given; pass an attack directory or a list of them.")
    path = write_report([Path(d) for d in dirs], Path(out), **options)
    return Report(path=Path(path), runs=tuple(os.fspath(d) for d in dirs))
