"""The inject options as ``dpaudit inject`` and ``dpaudit.inject(...)`` take them, checked into an InjectConfig.

One function for both doors, so that the command line and the Python API accept and refuse the same
combinations with the same one-line errors (each names the command-line option). An option left at
None was not given: that is how a combination that makes no sense (``--heldout-size`` with the user's
own ``--heldout`` file, ``--frequencies`` with ``--no-canaries``) is told from a default.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dpaudit.canaries.insert import DEFAULT_FREQUENCIES, Schedule, SplitSpec, parse_frequencies
from dpaudit.canaries.pipeline import InjectConfig
from dpaudit.common.errors import UserInputError
from dpaudit.corpus import BUILTIN_ASSISTANT
from dpaudit.inject_dir.secret_spaces import DESIGN_FORMAT, parse_design

#: Defaults of the options that may be left unset (None), as ``dpaudit inject --help`` shows them.
DEFAULT_PER_FREQUENCY = 20
DEFAULT_HELDOUT_FRACTION = 0.1
DEFAULT_PUBLIC_FRACTION = 0.2


@dataclass(frozen=True, kw_only=True)
class InjectOptions:
    """What the user asked for, None meaning "not given" (the names of ``dpaudit inject``'s options)."""

    corpus: str | None = None
    train: str | None = None
    heldout: str | None = None
    public: str | None = None
    corpus_format: str = "auto"
    text_column: str | None = None
    label_column: str | None = None
    corpus_size: int | None = None
    seed: int = 0
    secret_format: str | None = None
    design: str | None = None
    template: str | None = None
    word_list: str | None = None
    phrase_corpus: str | None = None
    frequencies: str | None = None
    per_frequency: int | None = None
    holdout: int | None = None
    coin_flip: bool = False
    no_canaries: bool = False
    heldout_fraction: float | None = None
    public_fraction: float | None = None
    heldout_size: int | None = None
    public_size: int | None = None
    encoding_errors: str = "strict"
    resplit: bool = False
    resplit_seed: int | None = None
    exclude: tuple[str, ...] = ()


_SPLITTING = {
    "corpus_size": "--corpus-size",
    "heldout_fraction": "--heldout-fraction",
    "public_fraction": "--public-fraction",
    "heldout_size": "--heldout-size",
    "public_size": "--public-size",
}
_CANARY_OPTIONS = {
    "secret_format": "--format",
    "design": "--design",
    "template": "--template",
    "word_list": "--word-list",
    "phrase_corpus": "--phrase-corpus",
    "frequencies": "--frequencies",
    "per_frequency": "--per-frequency",
    "holdout": "--holdout",
    "coin_flip": "--coin-flip",
}


def _paths(files: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    """``--exclude``'s files as strings: one path (``dpaudit.inject(exclude="a.jsonl")``) or several."""
    if isinstance(files, (str, os.PathLike)):
        return (os.fspath(files),)
    return tuple(os.fspath(f) for f in files)


def _given(options: InjectOptions, names: dict[str, str]) -> list[str]:
    return [flag for name, flag in names.items() if getattr(options, name) not in (None, False)]


def check_sources(o: InjectOptions) -> None:
    """Where the rows come from: ``--corpus`` or ``--train`` with ``--heldout`` (and ``--public``), not both."""
    if o.corpus is None and o.train is None and o.heldout is None:
        raise UserInputError(
            "dpaudit inject needs rows: --corpus FILE|builtin:assistant (split by inject) or --train "
            "FILE --heldout FILE (your own split)."
        )
    if o.corpus is not None and (o.train is not None or o.heldout is not None):
        which = "--train" if o.train is not None else "--heldout"
        raise UserInputError(
            f"--corpus and {which} both name the rows; pass --corpus (inject splits it) or --train and "
            "--heldout (your own split), not both."
        )
    if o.corpus is None and (o.train is None) != (o.heldout is None):
        given, missing = ("--train", "--heldout") if o.train is not None else ("--heldout", "--train")
        raise UserInputError(
            f"{given} needs {missing} FILE too: the members are the --train rows, the non-members the --heldout rows."
        )
    if o.public is not None and o.corpus is not None:
        raise UserInputError(
            "--public applies to your own split (--train/--heldout); --corpus is split by inject: set "
            "its public share with --public-size or --public-fraction."
        )
    if (o.resplit or o.resplit_seed is not None) and o.train is None:
        flag = "--resplit" if o.resplit else "--resplit-seed"
        raise UserInputError(
            f"{flag} re-splits your own --train and --heldout rows; --corpus is split at random already: remove {flag}."
        )
    if o.resplit_seed is not None and not o.resplit:
        raise UserInputError("--resplit-seed seeds --resplit; add --resplit or remove --resplit-seed.")
    if o.train is not None:
        splitting = _given(o, _SPLITTING)
        if splitting:
            raise UserInputError(
                f"{splitting[0]} splits --corpus; with --train/--heldout the files are the splits: "
                f"remove {splitting[0]}."
            )
    if o.exclude and o.corpus != BUILTIN_ASSISTANT:
        raise UserInputError(
            f"--exclude applies to --corpus {BUILTIN_ASSISTANT} (its generator skips those rows); remove it, or drop "
            "the rows from your own files before inject."
        )
    if o.corpus == BUILTIN_ASSISTANT:
        for name, flag in (("text_column", "--text-column"), ("label_column", "--label-column")):
            if getattr(o, name) is not None:
                raise UserInputError(f"{flag} applies to your own files, not --corpus {BUILTIN_ASSISTANT}; remove it.")


def inject_config(o: InjectOptions) -> InjectConfig:
    """Check the options together and build the :class:`~canaries.pipeline.InjectConfig` they describe.

    Without ``--frequencies`` (and without ``--coin-flip``), the frequencies are chosen from the number of
    training rows when the rows are read (:func:`canaries.insert.default_frequencies`).

    Raises:
        UserInputError: naming the option at fault, before anything is read or written.
    """
    check_sources(o)
    if o.no_canaries:
        canary_options = _given(o, _CANARY_OPTIONS)
        if canary_options:
            raise UserInputError(
                f"{canary_options[0]} sets the canaries, and --no-canaries writes none; remove one of them."
            )
    design = DESIGN_FORMAT if o.design is None else o.design
    design_name, _ = parse_design(design)
    if design_name != DESIGN_FORMAT and o.secret_format is not None:
        raise UserInputError(
            f"--format applies to --design format only; --design {design} makes its own secrets: remove --format."
        )
    per_frequency = DEFAULT_PER_FREQUENCY if o.per_frequency is None else o.per_frequency
    holdout = o.holdout
    from_size = False
    if o.coin_flip:
        if holdout:
            raise UserInputError(
                "--holdout has no meaning with --coin-flip (the coin picks the non-members); remove it."
            )
        freqs = parse_frequencies("1" if o.frequencies is None else o.frequencies)
        if len(freqs) != 1:
            raise UserInputError(
                f"--coin-flip inserts every member at one frequency; pass one value, e.g. --frequencies 1 (got {o.frequencies})."
            )
        holdout = 0
    elif o.no_canaries:
        freqs, per_frequency, holdout = (1,), 1, 0  # recorded, never used: the manifest counts 0 canaries
    else:
        from_size = o.frequencies is None
        freqs = DEFAULT_FREQUENCIES if from_size else parse_frequencies(o.frequencies)  # type: ignore[arg-type]
        holdout = per_frequency if holdout is None else holdout
    if o.corpus_size is not None and o.corpus_size < 1:
        raise UserInputError(f"--corpus-size must be a positive integer, got {o.corpus_size}.")
    heldout_fraction = DEFAULT_HELDOUT_FRACTION if o.heldout_fraction is None else o.heldout_fraction
    public_fraction = DEFAULT_PUBLIC_FRACTION if o.public_fraction is None else o.public_fraction
    try:
        return InjectConfig(
            corpus=o.corpus,
            train=o.train,
            heldout=o.heldout,
            public=o.public,
            corpus_format=o.corpus_format,
            corpus_size=o.corpus_size,
            seed=o.seed,
            format=o.secret_format
            if o.secret_format is not None
            else "digits:10"
            if design_name == DESIGN_FORMAT
            else None,
            design=design,
            template=o.template,
            word_list=o.word_list,
            phrase_corpus=o.phrase_corpus,
            schedule=Schedule(frequencies=freqs, per_frequency=per_frequency, holdout=holdout, coin_flip=o.coin_flip),
            splits=SplitSpec(
                heldout_fraction=heldout_fraction,
                public_fraction=public_fraction,
                heldout_size=o.heldout_size,
                public_size=o.public_size,
            ),
            encoding_errors=o.encoding_errors,
            text_column=o.text_column,
            label_column=o.label_column,
            canaries=not o.no_canaries,
            frequencies_from_size=from_size,
            resplit=o.resplit,
            resplit_seed=o.resplit_seed,
            exclude=_paths(o.exclude),
        )
    except ValueError as err:
        raise UserInputError(f"dpaudit inject: {err}") from None


def summary_lines(summary: dict[str, Any], out: str) -> list[str]:
    """The lines ``dpaudit inject`` prints (and ``dpaudit.inject(...)`` keeps) for a summary."""
    from dpaudit.canaries.pipeline import format_share

    c = summary["counts"]
    lines = [
        f"Wrote {out}: train.jsonl {c['train_rows']} rows ({c['members']} members + {c['canary_insertions']} "
        f"canary insertions = {format_share(c['canary_share'])} canary rows), heldout.jsonl {c['heldout']}, "
        f"public.jsonl {c['public']}."
    ]
    if c.get("public_generated"):
        lines.append(
            f"public.jsonl: {c['public_generated']} utterances generated beyond --corpus-size "
            f"{c['members'] + c['heldout']} (members and held-out rows), none of them a private row or a canary."
        )
    overlap = c.get("overlap_removed")
    if overlap is not None:
        o = overlap
        lines.append(
            f"Your split: members = the --train rows, non-members = the --heldout rows; duplicates (equal after "
            f"normalization) treated alike on both sides: {o['train_duplicates_collapsed']} --train and "
            f"{o['heldout_duplicates_collapsed']} --heldout repeats collapsed to one row; "
            f"{o['heldout_in_train']} --heldout rows equal to a --train row removed ({o['train_rows_in_heldout']} "
            f"--train rows had such a copy); {o['public_in_train_or_heldout']} --public rows equal to a --train or "
            f"--heldout row removed ({o['public_duplicates_collapsed']} --public repeats collapsed); "
            f"{o['near_duplicate_pairs']} member/non-member pairs of near duplicates kept (dpaudit attack leaves both "
            "ends out of the examples task)."
        )
    resplit = summary.get("resplit")
    if resplit is not None:
        lines.append(
            f"Re-split (--resplit, seed {resplit['seed']}): train + held-out rows pooled and drawn again into "
            f"{resplit['train']} members and {resplit['heldout']} held-out rows ({resplit['moved_to_train']} held-out "
            "rows became members). Train the model on train.jsonl: one trained on your --train file is not the one "
            "these members describe."
        )
    if summary.get("mode") == "no-canaries":
        lines.append(
            "No canaries (--no-canaries): canaries.jsonl is empty; the audit is membership inference on the rows "
            "(dpaudit attack --attacks loss, or shadow, ref, lira, rmia)."
        )
    else:
        lines.append(
            f"Canaries: {c['canaries']} ({c['canaries_inserted']} inserted, {c['canaries_control']} never "
            f"inserted), format {summary['format']}, log2|R| = {summary['log2_size']:.2f}, mode {summary['mode']}."
        )
        if summary.get("frequencies_chosen"):
            lines.append(summary["frequencies_chosen"] + ".")
        design = summary["design"]
        lines.append(
            f"Design {design['name']}: a canary reads {design['example_canary']!r}; fitting score: "
            f"{design['fitting_score']}."
        )
        if "new_tokens" in design:
            lines.append(
                f"New tokens: {design['new_tokens']}, declared in manifest.json (new_tokens) for the tokenizer: "
                "their set is public, which canary was inserted is not."
            )
    public_split = summary.get("public_split")
    if public_split is not None and c["public"] == 0:
        lines.append(public_split)
    else:
        lines.append("Train tokenizers on public.jsonl only.")
    return lines
