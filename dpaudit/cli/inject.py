"""``dpaudit inject``: plant canaries in a corpus and write the train/heldout/public run directory.

A thin shell over :func:`canaries.pipeline.inject`: :func:`canaries.options.inject_config` (shared with
``dpaudit.inject(...)``) turns options into an :class:`~canaries.pipeline.InjectConfig`, with one-line
errors naming the option, and the summary is printed (or JSON with ``--json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit.cli.params import FiniteFloat
from dpaudit.training.config_types import seed_type

_DEFAULT_FREQUENCIES = "1,2,3,4,5,6,7,8,9,10,20,50,100"
_EPILOG = (
    "\b\nExample: dpaudit inject --corpus builtin:assistant --out runs/data --seed 0\n"
    "Example: dpaudit inject --train my_train.csv --heldout my_test.csv --public my_public.csv --out runs/mine "
    "--label-column category"
)


@click.command(epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option(
    "--corpus",
    default=None,
    metavar="FILE|builtin:assistant",
    help="Corpus that inject splits into members, held-out and public rows: plain text (one example per line), "
    "JSONL (text, optional label), CSV/TSV with a header, or builtin:assistant.",
)
@click.option(
    "--train",
    "train_file",
    default=None,
    metavar="FILE",
    help="Your own split instead of --corpus: the rows your model trained on (the members; canaries go "
    "here only). Needs --heldout.",
)
@click.option(
    "--heldout",
    "heldout_file",
    default=None,
    metavar="FILE",
    help="With --train: rows your model never saw (the non-members). Duplicates are treated alike on both sides: "
    "rows equal after normalization collapse to one within --train and within --heldout, a --heldout row equal to "
    "a --train row is removed, near-duplicate pairs are counted (all printed and in manifest.json).",
)
@click.option(
    "--resplit",
    is_flag=True,
    help="With --train/--heldout: pool their rows and draw members and held-out rows again at random, in the same "
    "sizes, so that both sides come from one distribution (for when you can retrain on train.jsonl). The split is "
    "not a privacy mechanism: the seed is public and recorded in manifest.json.",
)
@click.option(
    "--resplit-seed",
    type=seed_type(),
    default=None,
    help="Seed of --resplit's draw (public, recorded)  [default: --seed].",
)
@click.option(
    "--public",
    "public_file",
    default=None,
    metavar="FILE",
    help="With --train: public rows, the only input of tokenizers, label sets and shadow models (duplicates of "
    "--train/--heldout rows removed). Without it public.jsonl is empty: fine for attacking a model "
    "trained elsewhere (loss, exposure, reconstruction, canary); dpaudit train and the shadow, ref, lira "
    "and rmia attacks need it.",
)
@click.option(
    "--corpus-format",
    type=click.Choice(["auto", "text", "jsonl", "csv", "tsv"]),
    default="auto",
    show_default=True,
    help="Format of the corpus files; auto picks by suffix (.jsonl, .csv, .tsv, else text).",
)
@click.option(
    "--text-column",
    default=None,
    metavar="NAME",
    help="CSV/TSV column (header name) or JSONL key of the text  [default: text].",
)
@click.option(
    "--label-column",
    default=None,
    metavar="NAME|none",
    help="Column or key of the label  [default: label]; 'none' reads the files as unlabelled. A file with "
    "other columns but no label column is refused, naming them.",
)
@click.option(
    "--corpus-size",
    type=int,
    default=None,
    help="Utterances to generate with builtin:assistant, split into training members, held-out and public "
    "rows (only members and held-out rows when --public-size does not fit beside them)  [default: 20000].",
)
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory to write.")
@click.option(
    "--seed",
    type=seed_type(),
    default=0,
    show_default=True,
    help="Seed for every random choice; the same seed gives byte-identical files.",
)
@click.option(
    "--no-canaries",
    is_flag=True,
    help="Write no canary: a membership audit of your rows alone (members = train, non-members = held-out).",
)
@click.option(
    "--format",
    "secret_format",
    default=None,
    help="Secret space of --design format: digits:N (|R|=10^N), words:N (|R|=V^N) or phrases[:K] (K words of "
    "a sentence from --phrase-corpus)  [default: digits:10].",
)
@click.option(
    "--design",
    default=None,
    metavar="format|new-tokens[:L]|rare-tokens[:L]",
    help="Canary design. new-tokens: a token that exists nowhere else, written L times (default 24), its own "
    "per canary (the set is declared in the manifest and the trainers add it to the tokenizer): memorized "
    "from one insertion (after Panda et al. 2025); rare-tokens: L (default 4) of the rarest words of "
    "public.jsonl; format: secrets of --format. With --coin-flip, dpaudit attack audits them in one run "
    "with the score that fits the design.  [default: format]",
)
@click.option(
    "--template",
    default=None,
    help="Canary template with one {secret}; {name} is filled with a distinct first + last name per canary, "
    "so that each canary's context is its own  [default: \"{name}'s account number is {secret}\"; "
    "'{secret}' for phrases and --design new-tokens].",
)
@click.option(
    "--word-list",
    default=None,
    metavar="FILE|public",
    help="Word list for words:N: a file (one word per line) or 'public' (most frequent words of the "
    "public split)  [default: the shipped list of common English words].",
)
@click.option(
    "--phrase-corpus",
    type=click.Path(path_type=Path),
    default=None,
    help="Sentences to take phrase secrets from (--format phrases); must be disjoint from --corpus.",
)
@click.option(
    "--frequencies",
    default=None,
    metavar="F1,F2,...",
    help=f"Insertion counts, one group of canaries per count  [default: chosen from the training rows: the "
    f"fullest of {_DEFAULT_FREQUENCIES}, 1,2,5,10,20,50,100, ..., 1 whose canary rows stay within 25% "
    "of train.jsonl (printed); 1 with --coin-flip].",
)
@click.option(
    "--per-frequency",
    type=click.IntRange(min=1),
    default=None,
    help="Canaries per frequency (with --coin-flip: the number of canaries)  [default: 20].",
)
@click.option(
    "--holdout",
    type=click.IntRange(min=0),
    default=None,
    help="Control canaries, generated the same way and never inserted  [default: --per-frequency].",
)
@click.option(
    "--coin-flip",
    is_flag=True,
    help="One-run audit mode: each canary is inserted (at the single frequency) iff a fair coin says so.",
)
@click.option(
    "--heldout-fraction",
    type=FiniteFloat(0, 1, max_open=True),
    default=None,
    help="Share of --corpus kept out of training as non-members (heldout.jsonl)  [default: 0.1].",
)
@click.option(
    "--public-fraction",
    type=FiniteFloat(0, 1, max_open=True),
    default=None,
    help="Share of --corpus for tokenizers and shadow models (public.jsonl)  [default: 0.2].",
)
@click.option(
    "--heldout-size",
    type=click.IntRange(min=0),
    default=None,
    help="Absolute number of held-out examples (overrides --heldout-fraction).",
)
@click.option(
    "--public-size",
    type=click.IntRange(min=0),
    default=None,
    help="Absolute number of public examples (overrides --public-fraction). With builtin:assistant it may "
    "exceed the rest: when it leaves no training member, --corpus-size is split into members and "
    "held-out rows alone and the public rows are generated beside them (never the same text, never a "
    "canary).",
)
@click.option(
    "--encoding-errors",
    type=click.Choice(["strict", "replace"]),
    default="strict",
    show_default=True,
    help="Undecodable UTF-8: strict stops with the line number; replace substitutes U+FFFD.",
)
@click.option(
    "--exclude",
    "exclude",
    multiple=True,
    metavar="FILE",
    help="With builtin:assistant: rows never to draw (repeatable): no generated row, private or public, equals a "
    "row of FILE after normalization (case, punctuation, spacing), e.g. another inject directory's public.jsonl, so "
    "that your private rows are none of the rows you chose a recipe on. The new directory is then a function of FILE "
    "(which rows were redrawn shows which were excluded), and so is every model trained on it: exclude only files "
    "you may use (public ones), never another experiment's private rows; an inject directory's train.jsonl, "
    "heldout.jsonl or canaries.jsonl is refused. Rows one slot value apart (near duplicates) may remain. Each "
    "FILE's sha256 is recorded.",
)
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists and is not empty.")
@click.option(
    "--force",
    is_flag=True,
    help="Accept canary rows above 50% of train.jsonl (refused by default: such a training set is mostly canaries).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def inject(
    corpus: str | None,
    train_file: str | None,
    heldout_file: str | None,
    public_file: str | None,
    corpus_format: str,
    text_column: str | None,
    label_column: str | None,
    corpus_size: int | None,
    out: Path,
    seed: int,
    no_canaries: bool,
    secret_format: str | None,
    design: str | None,
    template: str | None,
    word_list: str | None,
    phrase_corpus: Path | None,
    frequencies: str | None,
    per_frequency: int | None,
    holdout: int | None,
    coin_flip: bool,
    heldout_fraction: float | None,
    public_fraction: float | None,
    heldout_size: int | None,
    public_size: int | None,
    encoding_errors: str,
    resplit: bool,
    resplit_seed: int | None,
    exclude: tuple[str, ...],
    overwrite: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Plant secret canaries in a corpus (or your own train/held-out split) and write train/heldout/public splits.

    Each frequency f gets --per-frequency canaries ("Dana Whitfield's account number is 2 8 1 ...") inserted f
    times into train.jsonl, shuffled among the members; --holdout control canaries are never
    inserted. canaries.jsonl says which is which; nothing in train.jsonl marks a canary. Train
    tokenizers on public.jsonl only. Canary rows may be at most 50% of train.jsonl unless --force;
    the share is printed either way.

    Rerunning a finished run's command prints its summary again and writes nothing (--overwrite runs it again).

    With --train and --heldout, your split is kept: members = your train rows (plus the canaries, unless
    --no-canaries), non-members = your held-out rows, so dpaudit attack measures membership of exactly
    the rows your model was trained on.
    """
    from dpaudit.canaries.options import InjectOptions, inject_config, summary_lines
    from dpaudit.canaries.pipeline import inject as run_inject
    from dpaudit.inject_dir.reader import ALREADY_DONE

    config = inject_config(
        InjectOptions(
            corpus=corpus,
            train=train_file,
            heldout=heldout_file,
            public=public_file,
            corpus_format=corpus_format,
            text_column=text_column,
            label_column=label_column,
            corpus_size=corpus_size,
            seed=seed,
            secret_format=secret_format,
            design=design,
            template=template,
            word_list=word_list,
            phrase_corpus=None if phrase_corpus is None else str(phrase_corpus),
            frequencies=frequencies,
            per_frequency=per_frequency,
            holdout=holdout,
            coin_flip=coin_flip,
            no_canaries=no_canaries,
            heldout_fraction=heldout_fraction,
            public_fraction=public_fraction,
            heldout_size=heldout_size,
            public_size=public_size,
            encoding_errors=encoding_errors,
            resplit=resplit,
            resplit_seed=resplit_seed,
            exclude=exclude,
        )
    )
    summary = run_inject(config, out, overwrite=overwrite, force=force)
    if summary.pop(ALREADY_DONE, False):  # a rerun of a finished run's command: printed again, nothing written
        click.echo(
            f"note: --out {out} holds the inject run of this very command (the same options and inputs; its files "
            "verified): nothing was written; pass --overwrite to run it again.",
            err=True,
        )
    summary = {"out": str(out), **summary}
    for warning in summary.get("warnings", ()):
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    for line in summary_lines(summary, str(out)):
        click.echo(line)
