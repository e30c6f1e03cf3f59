"""The composition of a whole attack run: checks, scoring, attacks, the attack directory.

:func:`dpaudit.stages.attack.attack` (``dpaudit.attack(...)`` and ``dpaudit attack``) calls :func:`attack`
here with the report page as an extra output; this module never imports the report, which sits one
floor up.

Every check that can fail on bad input runs before the model is loaded and before anything is written:
the inject directory's hashes, the model directory (weights, tokenizer, no pickle), the attacks' model
kinds, ``--out`` and ``--reveal``. The attack directory (the run-directory contract) is written in a
staged directory and renamed into place only when complete: ``results.json``,
``scores/canaries.jsonl`` and ``scores/canaries.csv``, the pages a caller adds (``index.html``) and ``manifest.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit.attacks.base import AttackContext
from dpaudit.attacks.blind import blind_comparison, blind_separation
from dpaudit.attacks.claim import options_claim
from dpaudit.attacks.mia import coin_flip_mode
from dpaudit.attacks.registry import (
    DEFAULT_ATTACKS,
    AttackOptions,
    accepted_options,
    attack_class,
    available_attacks,
    check_options,
    default_attacks,
    prop,
    resolve_attacks,
)
from dpaudit.attacks.results import (
    SCHEMA,
    AttackResult,
    AttackResults,
    CanaryScore,
    DataInfo,
    ModelInfo,
)
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import (
    atomic_write_json,
    atomic_write_text,
    build_manifest,
    file_hashes,
    prepare_output_dir,
    run_dir_lock,
    staged_directory,
    write_jsonl,
)
from dpaudit.inject_dir.secret_spaces import CONTEXT_FREE_KINDS

RESULTS, CANARY_SCORES = "results.json", "scores/canaries.jsonl"
#: The same per-canary records as CSV (a column per field), for a spreadsheet: the report shows a canary table's first
#: rows only and links here.
CANARY_CSV = "scores/canaries.csv"

#: Renders extra files of the attack directory (the report's ``index.html``) from the staged directory,
#: the results and the manifest as a reader of ``manifest.json`` will see it: name -> text.
PageWriter = Callable[[Path, AttackResults, Mapping[str, Any]], Mapping[str, str]]
#: What :func:`attack` calls before the first attack: (the attacks' context, the attack classes that will run).
BeforeAttacks = Callable[[AttackContext, Sequence[Any]], None]


class AttackWarning(UserWarning):
    """A caveat about what the attack measured (also recorded in ``results.json``)."""


class FinishedAttack(AttackWarning):
    """``out`` already held the results of this very command: they are returned, nothing is recomputed or written."""


def shared_context_warning(canaries: Sequence[Any], space: Any, reveal: int) -> str | None:
    """A warning when two or more canaries present the same unmasked context to the model.

    Once the secret is masked, such canaries are the same input, so a masked LM can only learn the
    mixture of their secrets: exposure then measures that mixture, not memorization of one canary.
    """
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in canaries:
        shown = " ".join(space.split(c.secret)[:reveal]) if space is not None and reveal else ""
        groups[(c.prefix + shown, c.suffix)].append(c.id)
    shared = [ids for ids in groups.values() if len(ids) > 1]
    if not shared:
        return None
    n = sum(len(ids) for ids in shared)
    (prefix, suffix), _ = max(groups.items(), key=lambda kv: len(kv[1]))
    return (
        f"{n} of {len(canaries)} canaries share their unmasked context with another canary (e.g. {prefix!r}...{suffix!r}, "
        f"{max(len(ids) for ids in shared)} canaries): with the secret masked the model sees identical inputs, so exposure "
        "measures the mixture of their secrets, not memorization of one canary. Re-inject with a per-canary key "
        '(the default template "{name}\'s account number is {secret}") or add --reveal K as a second view.'
    )


def truncation_warning(tokenizer: Any, canaries: Sequence[Any], train_manifest: dict[str, Any] | None) -> str | None:
    """A warning, kept in ``results.json``, when training cut off canary secrets, saying what their numbers mean.

    The trainer cuts each row to ``max_length`` tokens (``[CLS]`` and ``[SEP]`` included), so a canary
    whose secret ends beyond it was trained without (all of) its secret: the model could not memorize
    what it never saw. Such canaries score like never-inserted controls whatever the model's privacy,
    so their exposure and reconstruction understate memorization and are no evidence of privacy. A
    suffix cut off after the secret changes nothing the attacks measure and is not counted.
    """
    max_length = ((train_manifest or {}).get("config") or {}).get("max_length")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or not canaries:
        return None
    ends = [len(ids) for ids in tokenizer([c.prefix + c.secret for c in canaries])["input_ids"]]  # with [CLS], [SEP]
    cut = [c for c, n in zip(canaries, ends) if n > max_length]
    if not cut:
        return None
    inserted = sorted({c.frequency for c in cut if c.frequency > 0})
    where = f"inserted {', '.join(map(str, inserted))} times" if inserted else "controls only"
    return (
        f"{len(cut)} of {len(canaries)} canaries ({where}, e.g. {cut[0].id}) end their secret beyond the max_length "
        f"{max_length} the model was trained with (at token {max(ends)}): training cut their secret off, so the model "
        f"never saw it whole. Their exposure and reconstruction read like never-inserted controls whatever the "
        f"model's privacy: they understate memorization and are not evidence of privacy. Retrain with --max-length "
        f"{max(ends)} or more for a meaningful audit of them."
    )


def attack(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    attacks: Iterable[str] | str = DEFAULT_ATTACKS,
    *,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    device: str | None = None,
    progress: bool = True,
    command: list[str] | None = None,
    pages: PageWriter | None = None,
    before_attacks: BeforeAttacks | None = None,
    **options: Any,
) -> AttackResults:
    """Run canary attacks on a model and (with ``out``) write the attack directory.

    Args:
        model: a train run directory or a Hugging Face model directory (masked LM or classifier).
        data: the inject run directory whose canaries the model was (or was not) trained on.
        attacks: registered attack names, or ``"all"``; the defaults gain the canary attack (one-run bounds)
            when the canaries are coin-flip ones and the model a masked LM.
        out: attack directory to write (nothing is written when None).
        overwrite: replace a non-empty ``out``.
        device: ``"cuda"``/``"cpu"``; default: the GPU when present.
        progress: progress bars on stderr.
        command: the command line recorded in the manifest.
        pages: extra files rendered into ``out`` before its manifest (see :func:`write_attack_dir`).
        before_attacks: called once the model is loaded, with the attacks' context and classes, before the first
            attack runs; never for a finished attack a rerun returns (``dpaudit attack`` prints its cost estimate
            there, priced on the model the attacks then use: :func:`dpaudit.attacks.attack_cost.announce`).
        options: the attacks' options by field name (``batch_size``, ``seed``, ``shadow_models``, ``min_k``, ...):
            the fields of :class:`~dpaudit.attacks.options.RunOptions` and of the Config of each attack run
            (:class:`~dpaudit.attacks.registry.AttackOptions`), as ``dpaudit attack --attacks NAME --help`` lists them.

    Returns:
        The typed results (``results["exposure"]``, ``results.canaries``, ...).

    Raises:
        UserInputError: bad input (an option of an attack that does not run included), before anything is loaded
            or written.
    """
    check_options(options, attacks)
    trains_shadows = "shadow_cache" in accepted_options(attacks)  # an attack run that trains shadow models
    if trains_shadows and options.get("shadow_cache") is None and not os.environ.get("DPAUDIT_CACHE"):
        # models trained on private rows stay beside the attack's output (docs/privacy.md); without one, in a private
        # temporary folder removed when the attack ends
        if out is None:
            import tempfile

            with tempfile.TemporaryDirectory(prefix="dpaudit-shadows-") as temporary:  # mode 0700 (mkdtemp)
                return attack(
                    model,
                    data,
                    attacks,
                    out=None,
                    overwrite=overwrite,
                    device=device,
                    progress=progress,
                    command=command,
                    pages=pages,
                    before_attacks=before_attacks,
                    **{**options, "shadow_cache": temporary},
                )
        from dpaudit.attacks.shadow_models import default_cache

        options["shadow_cache"] = str(default_cache(out))
    run = functools.partial(
        _attack,
        model,
        data,
        attacks,
        out=out,
        overwrite=overwrite,
        device=device,
        progress=progress,
        command=command,
        pages=pages,
        before_attacks=before_attacks,
        **options,
    )
    if out is None:
        return run()
    with run_dir_lock(out, stage="attack"):  # one stage per output directory at a time
        return run()


def _attack(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    attacks: Iterable[str] | str,
    *,
    out: str | os.PathLike[str] | None,
    overwrite: bool,
    device: str | None,
    progress: bool,
    command: list[str] | None,
    pages: PageWriter | None = None,
    before_attacks: BeforeAttacks | None = None,
    **values: Any,
) -> AttackResults:
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import load, resolve_model

    try:
        options = AttackOptions(**values)
    except (TypeError, ValueError) as err:
        raise UserInputError(str(err)) from None
    batch_size, reveal, seed = options.batch_size, options.reveal, options.seed
    names = [attacks] if isinstance(attacks, str) else list(attacks)
    names = [n for name in names for n in name.split(",")]
    run = load_inject_run(data)
    source = resolve_model(model)
    unable: dict[str, str] = {}  # attacks that would have joined the defaults: why they cannot run
    names = default_attacks(
        names,
        coin_flip=coin_flip_mode(run),
        model_kind=source.kind,
        able=lambda cls: _passes(cls, options, source, run, unable),
    )
    classes = resolve_attacks(names, source.kind, model=str(model), blind=options.blind_baseline)
    design = (run.manifest.get("secret_space") or {}).get("kind")
    kept, skipped = [], []
    for cls in classes:  # attack-specific option checks (e.g. LiRA's shadow count), before anything is loaded
        try:
            designs = prop(cls, "designs")
            if designs is not None and design not in designs:
                raise UserInputError(
                    f"--data {run.path}: the {cls.name} attack knows no score for secret space "
                    f"{design!r}; rerun dpaudit inject."
                )
            prop(cls, "check")(options, source, run)
        except UserInputError as err:
            if cls.name in {n.strip() for n in names}:  # named explicitly: refuse; from "all": skip it and say why
                raise
            skipped.append(f"--attacks all: skipped {cls.name} ({err})")
            continue
        kept.append(cls)
    classes = kept
    needs_canaries = [c.name for c in classes if prop(c, "scores_canaries")]
    if needs_canaries and not run.canaries:
        raise UserInputError(
            f"--data {data} has no canaries (inject --no-canaries): --attacks "
            f"{','.join(needs_canaries)} would have nothing to score; pass --attacks loss (or shadow, "
            "ref, lira, rmia), the membership attacks on train.jsonl vs heldout.jsonl."
        )
    config = {"attacks": [c.name for c in classes], "model": str(model), "data": str(data), **options.to_dict()}
    inputs = {
        **{str(Path(model) / k): v for k, v in source.files.items()},
        **{str(Path(data) / k): v for k, v in run.manifest.get("outputs", {}).items()},
    }
    if out is not None and not overwrite and (done := finished_attack(out, config=config, inputs=inputs, seed=seed)):
        return done
    if out is not None:
        prepare_output_dir(out, overwrite=overwrite)
    space = run.space
    if space is not None and reveal >= space.length:
        raise UserInputError(
            f"--reveal {reveal}: {space.format} secrets have {space.length} positions; reveal at most "
            f"{space.length - 1}."
        )
    if space is None and reveal:
        raise UserInputError("--reveal applies to digits:N and words:N secrets, not phrases; remove it.")
    claimed = options_claim(source, options)
    canaries = list(run.canaries)
    kind = (run.manifest.get("secret_space") or {}).get("kind")
    shared = None if kind in CONTEXT_FREE_KINDS else shared_context_warning(canaries, space, reveal)
    notes = [w for w in (shared,) if w] + skipped + _start_unusable(unable, source)
    for note in notes:
        warnings.warn(note, AttackWarning, stacklevel=2)

    scorer = load(source, batch_size=batch_size, device=device, progress=progress)
    cut = truncation_warning(scorer.tokenizer, canaries, source.manifest)
    if cut:
        notes.append(cut)
        warnings.warn(cut, AttackWarning, stacklevel=2)
    context = AttackContext(scorer=scorer, canaries=canaries, space=space, options=options, data=run)
    if before_attacks is not None:
        before_attacks(context, classes)
    utility = None
    if source.manifest is None:  # a model trained elsewhere: no train run logged its held-out figure; measure it here
        from dpaudit.attacks.utility import measure_heldout_utility

        try:
            utility = measure_heldout_utility(scorer, run, seed=seed, label_set=source.label_set())
        except Exception as err:  # noqa: BLE001 - the attacks still run; the page then shows no utility, and says why
            notes.append(f"the held-out utility could not be measured: {err}")
    results: list[AttackResult] = []
    fields: dict[str, dict[str, Any]] = {c.id: {} for c in canaries}
    score_files: dict[str, Sequence[Mapping[str, Any]]] = {}
    errors: list[dict[str, str]] = []
    failures: list[Exception] = []
    for cls in classes:
        try:
            outcome = cls().run(context)
        except Exception as err:  # noqa: BLE001 - one failing attack never discards the others' results
            failures.append(err)
            text = str(err) if isinstance(err, UserInputError) else f"{type(err).__name__}: {err}"
            errors.append({"attack": cls.name, "error": text, "type": type(err).__name__})
            notes.append(f"{cls.name} failed and has no result: {text}")
            warnings.warn(f"{cls.name} failed and has no result: {text}", AttackWarning, stacklevel=2)
            continue
        results.append(outcome.result)
        for cid, canary_values in outcome.canary_fields.items():
            fields[cid].update(canary_values)
        score_files.update(outcome.score_files)
        for note in outcome.result.warnings:
            warnings.warn(f"{cls.name}: {note}", AttackWarning, stacklevel=2)
    # a split the text alone separates, a model-based attack no better than the text alone: say so
    for note in blind_separation(results) + blind_comparison(results):
        notes.append(note)
        warnings.warn(note, AttackWarning, stacklevel=2)
    scores = tuple(
        CanaryScore(id=c.id, frequency=c.frequency, secret=c.secret, reveal=reveal, **fields[c.id]) for c in canaries
    )
    template = run.manifest.get("template", {}).get("template")
    n_controls = sum(c.frequency == 0 for c in canaries)
    results_obj = AttackResults(
        model=ModelInfo(path=str(model), kind=source.kind, architecture=source.architecture, utility=utility),
        data=DataInfo(
            path=str(data),
            secret_format=run.manifest.get("secret_space", {}).get("format", ""),
            log2_space_size=None if space is None else float(space.log2_size),
            canaries=len(canaries),
            controls=n_controls,
            template=template,
        ),
        claimed=claimed,
        attacks=tuple(results),
        warnings=tuple(notes),
        errors=tuple(errors),
        canaries=scores,
        score_files=score_files,
    ).with_headline()  # computed once, stored in results.json, read from there by every reader
    if failures and all(getattr(r, "baseline", False) for r in results):  # no attack left: its error is the answer
        raise failures[0]
    if out is not None:
        write_attack_dir(
            out, results_obj, config=config, inputs=inputs, seed=seed, overwrite=overwrite, command=command, pages=pages
        )
    return results_obj


def canary_csv(canaries: Sequence[CanaryScore]) -> str:
    """``scores/canaries.csv``: a header of :class:`CanaryScore`'s fields, then a row per canary (empty: not measured)."""
    import csv
    import io

    fields = [f.name for f in dataclasses.fields(CanaryScore)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for canary in canaries:
        writer.writerow({k: "" if v is None else v for k, v in canary.to_json().items()})
    return buffer.getvalue()


def _passes(cls: Any, options: Any, source: Any, run: Any, why: dict[str, str]) -> bool:
    """Whether an attack's check passes on this target (an attack that joins the defaults when able); when not, its
    refusal is kept in ``why`` under its name."""
    try:
        prop(cls, "check")(options, source, run)
    except UserInputError as err:
        why[cls.name] = str(err)
        return False
    return True


def _start_unusable(unable: Mapping[str, str], source: Any) -> list[str]:
    """The note of a default run whose target records a public start (``init_from``) that the attacks against it
    could not use (moved, changed, another tokenizer): they would have run, and the user should know why they did
    not. Nothing for a target trained from scratch or brought without a record."""
    init_from = getattr(getattr(source, "privacy", None), "init_from", None)
    if not unable or not init_from:
        return []
    names, reason = ", ".join(sorted(unable)), next(iter(unable.values()))
    return [f"the training-free attacks against the target's public start ({names}) did not run: {reason}"]


def write_attack_dir(
    out: str | os.PathLike[str],
    results: AttackResults,
    *,
    config: dict[str, Any],
    inputs: dict[str, str],
    seed: int,
    overwrite: bool,
    command: list[str] | None,
    pages: PageWriter | None = None,
) -> Path:
    """Write ``results.json``, ``scores/canaries.jsonl`` (and its CSV), the ``pages`` and ``manifest.json`` into ``out``
    atomically.

    ``pages`` (the attack stage passes the report's ``index.html``) renders from exactly what the staged
    directory holds and the manifest as a reader will see it; the pages' hashes join the manifest's
    outputs (a page omits its own hash, the one output that cannot list itself).
    """
    with staged_directory(out, overwrite=overwrite) as stage:
        atomic_write_json(stage / RESULTS, results.to_json())
        (stage / "scores").mkdir()
        write_jsonl(stage / CANARY_SCORES, (c.to_json() for c in results.canaries))
        atomic_write_text(stage / CANARY_CSV, canary_csv(results.canaries))
        for name, rows in results.score_files.items():  # scores/mia_<attack>.jsonl
            write_jsonl(stage / name, rows)
        outputs = file_hashes(stage, [RESULTS, CANARY_SCORES, CANARY_CSV, *results.score_files])
        manifest = build_manifest(
            schema=SCHEMA, config=config, seed=seed, inputs=inputs, outputs=outputs, command=command
        )
        manifest = json.loads(json.dumps(manifest))  # exactly what a reader of manifest.json will see
        if pages is not None:
            rendered = dict(pages(stage, results, manifest))
            for name, text in rendered.items():
                atomic_write_text(stage / name, text)
            manifest["outputs"] = file_hashes(stage, [*outputs, *rendered])
        atomic_write_json(stage / "manifest.json", manifest)
    return Path(out)


def finished_attack(
    out: str | os.PathLike[str], *, config: Mapping[str, Any], inputs: Mapping[str, str], seed: int
) -> AttackResults | None:
    """The results in ``out`` when it holds a finished attack of this very command (its manifest records the same
    config, seed and input hashes, and every file verifies), else None.

    A rerun of a finished ``dpaudit attack`` returns them (their warnings re-issued, then a
    :class:`FinishedAttack` note) instead of refusing the non-empty ``--out``; ``--overwrite`` runs it again.
    """
    from dpaudit.files.run_dirs import finished_output, same_json

    manifest = finished_output(out, schema_prefix="dpaudit.attack/")
    if (
        manifest is None
        or manifest.get("seed") != seed
        or not same_json(manifest.get("config"), config)
        or not same_json(manifest.get("inputs"), inputs)
    ):
        return None
    results = read_attack_dir(out)
    for note in results.warnings:
        warnings.warn(note, AttackWarning, stacklevel=2)
    for result in results.attacks:
        for note in getattr(result, "warnings", ()):
            warnings.warn(f"{result.attack}: {note}", AttackWarning, stacklevel=2)
    warnings.warn(
        f"--out {out} holds the results of this very command (the same options, model and data; its files "
        "verified): nothing was recomputed or written; pass --overwrite to run it again.",
        FinishedAttack,
        stacklevel=2,
    )
    return results


def read_attack_dir(path: str | os.PathLike[str]) -> AttackResults:
    """Read an attack directory back (verified against its manifest)."""
    import json

    from dpaudit.files.run_dirs import read_jsonl, verify_run_dir

    path = Path(path)
    manifest = verify_run_dir(path, schema_prefix="dpaudit.attack/")
    obj = json.loads((path / RESULTS).read_text(encoding="utf-8"))
    registered = available_attacks()
    for entry in obj.get("attacks") or ():  # a plug-in's result type is known once its attack is imported
        name = entry.get("attack") if isinstance(entry, dict) else None
        if name in registered:
            attack_class(name)
    canaries = tuple(CanaryScore.from_json(r) for r in read_jsonl(path / CANARY_SCORES))
    results = AttackResults.from_json(obj, canaries)
    extra = {
        name: list(read_jsonl(path / name)) for name in manifest.get("outputs", {}) if name.startswith("scores/mia_")
    }
    return dataclasses.replace(results, score_files=extra) if extra else results
