"""``dpaudit inject``: plant canaries in a corpus and write the train/heldout/public run directory.

A thin shell over :func:`canaries.pipeline.inject`: it turns options into an
:class:`~canaries.pipeline.InjectConfig`, maps configuration mistakes to one-line errors naming
the option, and prints a summary (or JSON with ``--json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit.training.config_types import seed_type
from dpaudit.cli.params import FiniteFloat
from dpaudit.errors import UserInputError

_DEFAULT_FREQUENCIES = "1,2,3,4,5,6,7,8,9,10,20,50,100"
_EPILOG = "Example: dpaudit inject --corpus builtin:assistant --out runs/data --seed 0"


@click.command(epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option("--corpus", required=True, metavar="FILE|builtin:assistant",
              help="Corpus: plain text (one example per line), JSONL (text, optional label), CSV/TSV with a "
                   "'text' (and optional 'label') header, or builtin:assistant.")
@click.option("--corpus-format", type=click.Choice(["auto", "text", "jsonl", "csv", "tsv"]), default="auto",
              show_default=True, help="Corpus file format; auto picks by suffix (.jsonl, .csv, .tsv, else text).")
@click.option("--corpus-size", type=int, default=None,
              help="Utterances to generate with builtin:assistant, split into training members, held-out and public "
                   "rows (only members and held-out rows when --public-size does not fit beside them)  [default: 20000].")
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Run directory to write.")
@click.option("--seed", type=seed_type(), default=0, show_default=True,
              help="Seed for every random choice; the same seed gives byte-identical files.")
@click.option("--format", "secret_format", default=None,
              help="Secret space of --design format: digits:N (|R|=10^N), words:N (|R|=V^N) or phrases[:K] (K words of "
                   "a sentence from --phrase-corpus)  [default: digits:10].")
@click.option("--design", default="format", show_default=True, metavar="format|new-tokens[:L]|rare-tokens[:L]",
              help="Canary design. new-tokens: a token that exists nowhere else, written L times (default 24), its own "
                   "per canary (the set is declared in the manifest and the trainers add it to the tokenizer): memorized "
                   "from one insertion (after Panda et al. 2025); rare-tokens: L (default 4) of the rarest words of "
                   "public.jsonl; format: secrets of --format. With --coin-flip, dpaudit attack audits them in one run "
                   "with the score that fits the design.")
@click.option("--template", default=None,
              help="Canary template with one {secret}; {name} is filled with a distinct first + last name per canary, "
                   "so that each canary's context is its own  [default: \"{name}'s account number is {secret}\"; "
                   "'{secret}' for phrases and --design new-tokens].")
@click.option("--word-list", default=None, metavar="FILE|public",
              help="Word list for words:N: a file (one word per line) or 'public' (most frequent words of the "
                   "public split)  [default: the shipped list of common English words].")
@click.option("--phrase-corpus", type=click.Path(path_type=Path), default=None,
              help="Sentences to take phrase secrets from (--format phrases); must be disjoint from --corpus.")
@click.option("--frequencies", default=None, metavar="F1,F2,...",
              help=f"Insertion counts, one group of canaries per count  [default: {_DEFAULT_FREQUENCIES}; "
                   "1 with --coin-flip].")
@click.option("--per-frequency", type=click.IntRange(min=1), default=20, show_default=True,
              help="Canaries per frequency (with --coin-flip: the number of canaries).")
@click.option("--holdout", type=click.IntRange(min=0), default=None,
              help="Control canaries, generated the same way and never inserted  [default: --per-frequency].")
@click.option("--coin-flip", is_flag=True,
              help="One-run audit mode: each canary is inserted (at the single frequency) iff a fair coin says so.")
@click.option("--heldout-fraction", type=FiniteFloat(0, 1, max_open=True), default=0.1, show_default=True,
              help="Share of the corpus kept out of training as non-members (heldout.jsonl).")
@click.option("--public-fraction", type=FiniteFloat(0, 1, max_open=True), default=0.2, show_default=True,
              help="Share of the corpus for tokenizers and shadow models (public.jsonl).")
@click.option("--heldout-size", type=click.IntRange(min=0), default=None,
              help="Absolute number of held-out examples (overrides --heldout-fraction).")
@click.option("--public-size", type=click.IntRange(min=0), default=None,
              help="Absolute number of public examples (overrides --public-fraction). With builtin:assistant it may "
                   "exceed the rest: when it leaves no training member, --corpus-size is split into members and "
                   "held-out rows alone and the public rows are generated beside them (never the same text, never a "
                   "canary).")
@click.option("--encoding-errors", type=click.Choice(["strict", "replace"]), default="strict", show_default=True,
              help="Undecodable UTF-8: strict stops with the line number; replace substitutes U+FFFD.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists and is not empty.")
@click.option("--force", is_flag=True,
              help="Accept canary rows above 50% of train.jsonl (refused by default: such a training set is mostly canaries).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
def inject(corpus: str, corpus_format: str, corpus_size: int | None, out: Path, seed: int,
           secret_format: str | None, design: str, template: str | None, word_list: str | None, phrase_corpus: Path | None,
           frequencies: str | None, per_frequency: int, holdout: int | None, coin_flip: bool,
           heldout_fraction: float, public_fraction: float, heldout_size: int | None, public_size: int | None,
           encoding_errors: str, overwrite: bool, force: bool, as_json: bool) -> None:
    """Plant secret canaries in a corpus and write train/heldout/public splits with a manifest.

    Each frequency f gets --per-frequency canaries ("Dana Whitfield's account number is 2 8 1 ...") inserted f
    times into train.jsonl, shuffled among the members; --holdout control canaries are never
    inserted. canaries.jsonl says which is which; nothing in train.jsonl marks a canary. Train
    tokenizers on public.jsonl only. Canary rows may be at most 50% of train.jsonl unless --force;
    the share is printed either way.
    """
    from dpaudit.canaries.insert import Schedule, SplitSpec, parse_frequencies
    from dpaudit.canaries.pipeline import InjectConfig, format_share
    from dpaudit.canaries.pipeline import inject as run_inject
    from dpaudit.secret_spaces import DESIGN_FORMAT, parse_design

    design_name, _ = parse_design(design)
    if design_name != DESIGN_FORMAT and secret_format is not None:
        raise UserInputError(f"--format applies to --design format only; --design {design} makes its own secrets: remove "
                             "--format.")

    if coin_flip:
        if holdout:
            raise UserInputError("--holdout has no meaning with --coin-flip (the coin picks the non-members); remove it.")
        freqs = parse_frequencies("1" if frequencies is None else frequencies)
        if len(freqs) != 1:
            raise UserInputError(
                f"--coin-flip inserts every member at one frequency; pass one value, e.g. --frequencies 1 (got {frequencies})."
            )
        holdout = 0
    else:
        freqs = parse_frequencies(_DEFAULT_FREQUENCIES if frequencies is None else frequencies)
        holdout = per_frequency if holdout is None else holdout
    if corpus_size is not None and corpus_size < 1:
        raise UserInputError(f"--corpus-size must be a positive integer, got {corpus_size}.")
    try:
        config = InjectConfig(
            corpus=corpus,
            corpus_format=corpus_format,
            corpus_size=corpus_size,
            seed=seed,
            format=secret_format if secret_format is not None else "digits:10" if design_name == DESIGN_FORMAT else None,
            design=design,
            template=template,
            word_list=word_list,
            phrase_corpus=None if phrase_corpus is None else str(phrase_corpus),
            schedule=Schedule(frequencies=freqs, per_frequency=per_frequency, holdout=holdout, coin_flip=coin_flip),
            splits=SplitSpec(heldout_fraction=heldout_fraction, public_fraction=public_fraction,
                             heldout_size=heldout_size, public_size=public_size),
            encoding_errors=encoding_errors,
        )
    except ValueError as err:
        raise UserInputError(f"dpaudit inject: {err}") from None
    summary = run_inject(config, out, overwrite=overwrite, force=force)
    summary = {"out": str(out), **summary}
    for warning in summary.get("warnings", ()):
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    c = summary["counts"]
    click.echo(f"Wrote {out}: train.jsonl {c['train_rows']} rows ({c['members']} members + {c['canary_insertions']} "
               f"canary insertions = {format_share(c['canary_share'])} canary rows), heldout.jsonl {c['heldout']}, "
               f"public.jsonl {c['public']}.")
    if c.get("public_generated"):
        click.echo(f"public.jsonl: {c['public_generated']} utterances generated beyond --corpus-size "
                   f"{c['members'] + c['heldout']} (members and held-out rows), none of them a private row or a canary.")
    click.echo(f"Canaries: {c['canaries']} ({c['canaries_inserted']} inserted, {c['canaries_control']} never inserted), "
               f"format {summary['format']}, log2|R| = {summary['log2_size']:.2f}, mode {summary['mode']}.")
    design = summary["design"]
    click.echo(f"Design {design['name']}: a canary reads {design['example_canary']!r}; fitting score: "
               f"{design['fitting_score']}.")
    if "new_tokens" in design:
        click.echo(f"New tokens: {design['new_tokens']}, declared in manifest.json (new_tokens) for the tokenizer: their set "
                   "is public, which canary was inserted is not.")
    click.echo("Train tokenizers on public.jsonl only.")
