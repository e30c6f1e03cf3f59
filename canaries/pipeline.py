"""The inject stage, composed: read the corpus, split it, draw canaries, write the run directory.

Two sources of rows: one corpus that inject splits into members, held-out and public rows
(``--corpus``), or the user's own split (``--train``, ``--heldout`` and optionally ``--public``): the
members are their train rows and the non-members their held-out rows, as in the most common
membership audit, with duplicates treated alike on both sides (:func:`load_user_split`) and counted, or pooled and
re-split at random (``--resplit``). Canaries are
optional (``canaries=False``) and, when drawn, inserted into the members only.

This is the one place that composes the pieces (readers, secret spaces, generation, insertion,
manifest); each piece knows nothing of the others. Every fallible step (bad corpus, too small a
space, impossible split) runs before anything is written, and the writing happens in a staged
directory that is renamed into place only when complete.

Randomness: one seed, split into independent numpy streams (``SeedSequence(seed,
spawn_key=(k,))``) for the split, the secrets, the coin flips, the canary labels and the training
shuffle, so changing, say, the number of canaries does not reshuffle the splits.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from dpaudit.canaries import manifest as mf
from dpaudit.canaries.generate import (
    DEFAULT_TEMPLATE,
    PHRASE_TEMPLATE,
    Canary,
    build_canaries,
    check_context,
    check_space_size,
    draw_labels,
    draw_secrets,
    normalize_tokens,
    parse_template,
    shared_context_warning,
)
from dpaudit.canaries.insert import (
    DEFAULT_CANARY_SHARE,
    HELDOUT,
    MEMBER,
    PUBLIC,
    RowEncoder,
    Schedule,
    SplitCounts,
    SplitSpec,
    assign_splits,
    default_frequencies,
    public_beyond,
    split_counts,
    train_order,
    write_rows,
)
from dpaudit.canaries.keys import KEY_STREAM, fill_keys
from dpaudit.common import resources
from dpaudit.common.errors import UserInputError
from dpaudit.common.progress import progress_bar
from dpaudit.corpus import BUILTIN_ASSISTANT, CorpusReader, assistant
from dpaudit.corpus.near_duplicates import normalize
from dpaudit.corpus.readers import NO_LABELS, Label
from dpaudit.files.run_dirs import (
    build_manifest,
    dumps_jsonl_line,
    file_hashes,
    load_manifest,
    prepare_output_dir,
    run_dir_lock,
    sha256_file,
    staged_directory,
    write_manifest,
)
from dpaudit.inject_dir.reader import NEW_TOKENS as NEW_TOKENS_KEY
from dpaudit.inject_dir.reader import PUBLIC as PUBLIC_SPLIT
from dpaudit.inject_dir.reader import REQUEST_KEY, SUMMARY_KEYS, finished_inject, label_order
from dpaudit.inject_dir.reader import SCHEMA_PREFIX as INJECT_SCHEMA_PREFIX
from dpaudit.inject_dir.secret_spaces import (
    CONTEXT_FREE_KINDS,
    DESIGN_FORMAT,
    NEW_TOKENS,
    RARE_TOKENS,
    SHIPPED_WORDS,
    NewTokenSpace,
    PhraseSpace,
    SecretSpace,
    digit_space,
    new_token_space,
    parse_design,
    parse_format,
    rare_token_space,
    read_word_list,
    shipped_words,
    word_space,
    words_from_texts,
)

# Independent random streams derived from the one seed (6 is canaries.keys.KEY_STREAM).
_SPLIT, _SECRETS, _COIN, _LABELS, _SHUFFLE = 1, 2, 3, 4, 5
_HELDOUT_ORDER, _PUBLIC_ORDER = 7, 8
_RESPLIT = 9  # --resplit's draw (its own --resplit-seed, --seed by default)
DEFAULT_CORPUS_SIZE = 20_000
#: Canary insertions may be at most this share of train.jsonl unless forced (``dpaudit inject --force``):
#: beyond it the training set is mostly canaries (--frequencies 1000000 once wrote a 1 GB file of one line).
MAX_CANARY_SHARE = 0.5
WORD_LIST_PUBLIC = "public"


@dataclass(frozen=True, kw_only=True)
class InjectConfig:
    """Everything that determines an inject run's outputs (recorded in the manifest).

    Attributes:
        corpus: a corpus file, or ``"builtin:assistant"``; None for a user's own split (``train``/``heldout``).
        train, heldout: the user's own split (``--train``/``--heldout``): the members are the train file's rows,
            the non-members the held-out file's, duplicates treated by :func:`load_user_split`'s rule.
        resplit, resplit_seed: pool train and held-out rows and re-split them at random into the same sizes
            (``--resplit``; :func:`resplit`), drawn with ``resplit_seed`` (None: ``seed``).
        public: with ``train``: the public rows (``--public``; tokenizers, label sets, shadow models); None writes
            an empty ``public.jsonl``, which attacks on a model trained elsewhere accept and trainers refuse.
        corpus_format: ``auto`` (from the suffix), ``text``, ``jsonl``, ``csv`` or ``tsv``.
        corpus_size: utterances to generate for ``builtin:assistant`` (None for files).
        seed: the one seed for every random choice.
        format: secret format, e.g. ``digits:10``, ``words:4``, ``phrases:3`` (the ``format`` design's secrets;
            None for another design).
        design: the canary design: ``format`` (secrets of ``format``), ``new-tokens[:L]`` or ``rare-tokens[:L]``
            (:func:`dpaudit.inject_dir.secret_spaces.parse_design`; designs for one-run audits after Panda et al. 2025).
        template: canary template with one ``{secret}``; None picks the format's default (``{secret}`` alone for
            phrases and new tokens, else a per-canary ``{name}`` context).
        word_list: for ``words:N``: None (shipped list), a file, or ``"public"``.
        phrase_corpus: for ``phrases``: the disjoint corpus file phrases are taken from.
        schedule: canary counts, frequencies and membership mode.
        splits: held-out and public shares of the corpus.
        encoding_errors: ``strict`` or ``replace`` for undecodable bytes.
        text_column, label_column: the text's and the label's column (CSV/TSV) or key (JSONL); None: ``text`` and
            ``label``; ``label_column="none"`` reads the files as unlabelled.
        canaries: False writes no canary (``--no-canaries``): a membership audit of the rows alone.
        frequencies_from_size: the schedule's frequencies were not given: :func:`default_frequencies` picks them
            from the number of members (the resolved ones are recorded in ``schedule``).
        exclude: for ``builtin:assistant``: files whose rows are never drawn (``--exclude``; each file's sha256 is
            an input of the run): no generated utterance, private or public, equals one of their texts after
            :func:`dpaudit.corpus.near_duplicates.normalize` (:func:`excluded_texts`).
    """

    corpus: str | None = None
    corpus_format: str = "auto"
    corpus_size: int | None = None
    seed: int = 0
    format: str | None = "digits:10"
    design: str = DESIGN_FORMAT
    template: str | None = None
    word_list: str | None = None
    phrase_corpus: str | None = None
    schedule: Schedule = field(default_factory=Schedule)
    splits: SplitSpec = field(default_factory=SplitSpec)
    encoding_errors: str = "strict"
    train: str | None = None
    heldout: str | None = None
    public: str | None = None
    text_column: str | None = None
    label_column: str | None = None
    canaries: bool = True
    frequencies_from_size: bool = False
    resplit: bool = False
    resplit_seed: int | None = None
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.corpus is None) == (self.train is None):
            raise ValueError("give either a corpus or a train file (with its held-out file), not both or neither.")
        if (self.train is None) != (self.heldout is None):
            raise ValueError("a train file needs its held-out file (train and heldout go together).")
        if self.public is not None and self.train is None:
            raise ValueError("public applies to a user's own split (train and heldout); a corpus is split by splits.")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}.")
        if self.encoding_errors not in ("strict", "replace"):
            raise ValueError(f"encoding_errors must be 'strict' or 'replace', got {self.encoding_errors!r}.")
        if self.corpus_size is not None and self.corpus_size < 1:
            raise ValueError(f"corpus_size must be >= 1, got {self.corpus_size}.")
        if self.resplit and self.train is None:
            raise ValueError(
                "resplit pools a user's own split (train and heldout); a corpus is split at random already."
            )
        if self.resplit_seed is not None and (not self.resplit or self.resplit_seed < 0):
            raise ValueError(f"resplit_seed needs resplit and must be >= 0, got {self.resplit_seed}.")
        if self.exclude and not self.builtin:
            raise ValueError(
                f"--exclude applies to --corpus {BUILTIN_ASSISTANT} (its generator skips those rows); remove it "
                "or drop the rows from your files yourself."
            )

    @property
    def resplit_seed_value(self) -> int:
        """The seed of ``--resplit``'s draw: ``--resplit-seed``, else ``--seed``."""
        return self.seed if self.resplit_seed is None else self.resplit_seed

    @property
    def builtin(self) -> bool:
        return self.corpus == BUILTIN_ASSISTANT

    @property
    def user_split(self) -> bool:
        """Whether the rows come split by the user (``--train``/``--heldout``) rather than from one corpus."""
        return self.train is not None

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``config``; fields added with the user's own split are left out at their defaults, so a
        run given only the options that existed before records the config keys it recorded before."""
        out = dataclasses.asdict(self)
        for name in _LATER_FIELDS:
            if out[name] == _LATER_FIELDS[name]:
                del out[name]
        return out


#: InjectConfig fields added after dpaudit.inject/1's first manifests, with their defaults.
_LATER_FIELDS = {
    "train": None,
    "heldout": None,
    "public": None,
    "text_column": None,
    "label_column": None,
    "canaries": True,
    "frequencies_from_size": False,
    "resplit": False,
    "resplit_seed": None,
    "exclude": (),
}


@dataclass
class LoadedCorpus:
    """The corpus held once in memory: texts, a label index per row, and where it came from."""

    texts: list[str]
    label_ids: list[int] | None
    labels: list[Label] | None
    label_counts: list[int] | None
    inputs: dict[str, str]
    info: dict[str, Any]
    codes: np.ndarray | None = None  # the user's own split: a split code per row, fixed by the files


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(stream,)))


def _load_phrase_sentences(config: InjectConfig) -> list[str]:
    reader = CorpusReader(config.phrase_corpus, errors=config.encoding_errors, option="--phrase-corpus")  # type: ignore[arg-type]
    sentences = [row.text.strip() for row in reader]
    if not sentences:
        raise UserInputError(
            f"--phrase-corpus {config.phrase_corpus} has no sentences; pass a file with one sentence per line."
        )
    return sentences


def generated_public(config: InjectConfig) -> int:
    """The public rows ``builtin:assistant`` generates beyond ``--corpus-size`` (0: the splits fit in it).

    A ``--public-size`` that leaves no training member beside the held-out rows cannot be carved out of a
    file, but the built-in corpus can make as many utterances as asked: ``--corpus-size`` is then the private
    part (members and held-out rows, split as with ``--public-size 0``) and the public rows are generated
    beside it, disjoint from it (:func:`dpaudit.corpus.assistant.generate_more`).
    """
    if not config.builtin:
        return 0
    return public_beyond(config.corpus_size or DEFAULT_CORPUS_SIZE, config.splits)


def refuse_private_exclude(path: str) -> None:
    """Refuse an ``--exclude`` file that is a private output of an inject directory (its ``train.jsonl``,
    ``heldout.jsonl`` or ``canaries.jsonl``, as the ``manifest.json`` beside it lists them).

    The directory drawn with ``--exclude`` is a function of the excluded rows (which rows were redrawn shows which
    were excluded), so every model trained on it, a public model released without DP among them, would depend on
    another experiment's private rows: only public files (``public.jsonl``) may be excluded (docs/canaries.md,
    "Splits, labels and randomness"). A copy of a private file elsewhere, with no manifest beside it, is not
    recognized.
    """
    file = Path(path)
    try:
        manifest = load_manifest(file.parent)
        inject_dir = str(manifest["schema"]).startswith(INJECT_SCHEMA_PREFIX) and file.name in manifest["outputs"]
    except (UserInputError, OSError, KeyError, TypeError):
        return  # not an inject directory's file (or not one it lists)
    if inject_dir and file.name != PUBLIC_SPLIT:
        raise UserInputError(
            f"--exclude {path} is a private split of the inject directory {file.parent} (its manifest.json lists "
            f"it): the new directory would depend on those rows; exclude only public rows ({PUBLIC_SPLIT}), or keep "
            "two experiments apart with different --seed values."
        )


def excluded_texts(config: InjectConfig) -> tuple[frozenset[str], dict[str, str]]:
    """The normalized texts of ``config.exclude``'s files, and each file's sha256 (an input of the run).

    Any text-bearing corpus file is read, labels ignored, except an inject directory's private split
    (:func:`refuse_private_exclude`); a missing or unreadable file is the reader's one-line error, naming
    ``--exclude``.
    """
    texts: set[str] = set()
    inputs: dict[str, str] = {}
    for path in config.exclude:
        refuse_private_exclude(path)
    for path in config.exclude:
        reader = CorpusReader(path, errors=config.encoding_errors, option="--exclude", label_column=NO_LABELS)  # type: ignore[arg-type]
        texts.update(normalize(row.text) for row in reader)
        inputs[path] = sha256_file(path)
    return frozenset(texts), inputs


def load_corpus(config: InjectConfig, *, forbidden: dict[str, int] | None = None, more_public: int = 0) -> LoadedCorpus:
    """Read (or generate) the corpus into memory once.

    Args:
        forbidden: normalized sentence -> line of the phrase corpus; any corpus row equal to one
            of them is an error (the phrase corpus must be disjoint from the training corpus).
        more_public: for ``builtin:assistant``, utterances generated after the corpus's own, disjoint
            from them (:func:`generated_public`); they are the last rows.
    """
    texts: list[str] = []
    label_ids: list[int] = []
    label_index: dict[Label, int] = {}
    labelled: bool | None = None
    exclude: frozenset[str] = frozenset()
    exclude_inputs: dict[str, str] = {}
    if config.builtin:
        size = config.corpus_size or DEFAULT_CORPUS_SIZE
        if size > assistant.max_size():
            raise UserInputError(
                f"--corpus-size {size}: builtin:assistant can make at most {assistant.max_size()} distinct utterances."
            )
        if more_public > assistant.max_more(size):
            raise UserInputError(
                f"--public-size {more_public}: builtin:assistant can make at most {assistant.max_more(size)} public "
                f"utterances beside --corpus-size {size}; lower --public-size or --corpus-size."
            )
        exclude, exclude_inputs = excluded_texts(config)
        generated = assistant.generate(size, config.seed, exclude=exclude)
        if more_public:
            more = assistant.generate_more(more_public, config.seed, after=size, exclude=exclude)
            generated = itertools.chain(generated, more)
        rows = ((i + 1, r["text"], r["label"]) for i, r in enumerate(generated))
        total, stats = size + more_public, None
        input_value = assistant.describe(size, config.seed, more=more_public)
    else:
        if more_public:
            raise ValueError("more_public applies only to builtin:assistant.")
        if config.corpus_size is not None:
            raise UserInputError(
                f"--corpus-size applies only to --corpus {BUILTIN_ASSISTANT}; remove it or use the built-in corpus."
            )
        reader = CorpusReader(
            config.corpus,
            format=config.corpus_format,
            errors=config.encoding_errors,  # type: ignore[arg-type]
            text_column=config.text_column,
            label_column=config.label_column,
        )
        rows, total, stats = iter(reader), None, reader
        input_value = sha256_file(config.corpus)
    with tqdm(total=total, desc="reading corpus", unit="rows", file=sys.stderr, disable=None, leave=False) as bar:
        for n, (line, text, label) in enumerate(rows, start=1):
            _check_phrase_disjoint(text, forbidden, where=f"--corpus {config.corpus} (line {line})")
            texts.append(text)
            if labelled is None:
                labelled = label is not None
            if labelled:
                label_ids.append(label_index.setdefault(label, len(label_index)))  # type: ignore[arg-type]
            if n % 65536 == 0:
                bar.update(65536)
    if not texts:
        what = "generated nothing" if config.builtin else "has no examples (empty or only blank lines)"
        raise UserInputError(f"--corpus {config.corpus} {what}; pass a corpus with at least one non-blank example.")
    info: dict[str, Any] = {"source": config.corpus, "rows": len(texts), "labelled": bool(labelled)}
    if config.exclude:
        info["excluded"] = {"files": list(config.exclude), "texts": len(exclude)}
    if stats is not None:
        info.update(
            format=stats.format, blank_skipped=stats.stats.blank_skipped, replaced_lines=stats.stats.replaced_lines
        )
    inputs = {config.corpus: input_value, **exclude_inputs}
    return _finish(texts, label_ids if labelled else None, label_index, inputs=inputs, info=info)  # type: ignore[dict-item]


def _finish(
    texts: list[str],
    label_ids: list[int] | None,
    label_index: dict[Label, int],
    *,
    inputs: dict[str, str],
    info: dict[str, Any],
    codes: np.ndarray | None = None,
) -> LoadedCorpus:
    """The corpus with its labels in canonical order (integers, then strings), so label ids do not depend on which
    label came first."""
    labels = label_counts = None
    if label_ids is not None:
        labels = label_order(label_index)
        remap = np.empty(len(labels), dtype=np.int64)
        for new, lab in enumerate(labels):
            remap[label_index[lab]] = new
        ids = remap[np.asarray(label_ids, dtype=np.int64)]
        label_counts = np.bincount(ids, minlength=len(labels)).tolist()
        label_ids = ids.tolist()
        info["labels"] = dict(zip(map(str, labels), label_counts))
    return LoadedCorpus(
        texts=texts,
        label_ids=label_ids,
        labels=labels,
        label_counts=label_counts,
        inputs=inputs,
        info=info,
        codes=codes,
    )


def _check_phrase_disjoint(text: str, forbidden: dict[str, int] | None, *, where: str) -> None:
    if forbidden is not None:
        key = " ".join(normalize_tokens(text))
        if key in forbidden:
            raise UserInputError(
                f"--phrase-corpus line {forbidden[key]} also occurs in {where}; the phrase corpus must be "
                "disjoint from the training corpus."
            )


def load_user_split(config: InjectConfig, *, forbidden: dict[str, int] | None = None) -> LoadedCorpus:
    """Read the user's own split (``--train``, ``--heldout``, ``--public``) into one corpus with fixed split codes.

    Duplicates are treated by one stated rule on both sides (docs/canaries.md, "Splits, labels and randomness"), with
    the similarity of :mod:`dpaudit.corpus.near_duplicates` (the attack's examples task uses the same one):

    - **within a side**, rows equal after :func:`~dpaudit.corpus.near_duplicates.normalize` are one row (the first
      kept), in the train and the held-out file alike: a member trained on twice is one member, and a split whose
      members alone carry repeats lets the text, not the model, tell the sides apart (a blind AUC of 0.611 on real
      text). Counted in ``train_duplicates_collapsed`` and ``heldout_duplicates_collapsed``.
    - **across the sides**, a held-out row equal to a train row (after normalization) is no non-member (the model
      saw that text): it is removed (``heldout_in_train``), and the train rows it copies are counted
      (``train_rows_in_heldout``). Pairs of near duplicates (character 5-gram Jaccard >= 0.8, not equal) are
      counted (``near_duplicate_pairs``) and kept: ``dpaudit attack``'s examples task leaves both ends of each out
      (``--near-duplicates exclude``), which inject cannot do for a member the model trained on.
    - a public row equal to a train or held-out row is removed (``public_in_train_or_heldout``): public.jsonl feeds
      tokenizers and shadow models and must hold no private text; within public.jsonl repeats are collapsed too.

    All counts are in ``info["overlap_removed"]``. With ``config.resplit``, train and held-out rows (after the rule
    above) are pooled and re-split at random into the same sizes (:func:`resplit`).

    Raises:
        UserInputError: an unreadable or empty file, files that disagree on having labels, a held-out file with
            nothing left once its duplicates of train rows are removed.
    """
    from dpaudit.corpus.near_duplicates import DEFAULT_THRESHOLD, cross_pairs, normalize

    files = [("--train", config.train, MEMBER), ("--heldout", config.heldout, HELDOUT)]
    if config.public is not None:
        files.append(("--public", config.public, PUBLIC))
    side_texts: dict[int, list[str]] = {}
    side_labels: dict[int, list[Label]] = {}
    label_index: dict[Label, int] = {}
    labelled: bool | None = None
    first = ""
    private: dict[str, int] = {}  # normalized text of a private row -> held-out rows that copied it
    removed = {
        "train_duplicates_collapsed": 0,
        "heldout_duplicates_collapsed": 0,
        "heldout_in_train": 0,
        "train_rows_in_heldout": 0,
        "near_duplicate_pairs": 0,
        "public_duplicates_collapsed": 0,
        "public_in_train_or_heldout": 0,
    }
    per_file: dict[str, Any] = {}
    inputs: dict[str, str] = {}
    for option, path, code in files:
        reader = CorpusReader(
            path,
            format=config.corpus_format,
            errors=config.encoding_errors,
            option=option,  # type: ignore[arg-type]
            text_column=config.text_column,
            label_column=config.label_column,
        )
        this: set[str] = set()
        kept_texts: list[str] = []
        kept_labels: list[Label] = []
        for line, text, label in reader:
            _check_phrase_disjoint(text, forbidden, where=f"{option} {path} (line {line})")
            if labelled is None:
                labelled, first = label is not None, f"{option} {path}"
            elif (label is not None) != labelled:
                has = "has labels" if label is not None else "has no labels"
                raise UserInputError(
                    f"{option} {path} {has} but {first} {'has labels' if labelled else 'has none'}; label every "
                    f"split or none (--label-column NAME, or --label-column {NO_LABELS})."
                )
            key = normalize(text)
            if key in this:  # a repeat within its own side: one row
                removed[f"{option.lstrip('-')}_duplicates_collapsed"] += 1
                continue
            if code != MEMBER and key in private:  # a copy of a private row on the other side
                if code == HELDOUT:
                    removed["heldout_in_train"] += 1
                    private[key] += 1
                else:
                    removed["public_in_train_or_heldout"] += 1
                continue
            this.add(key)
            kept_texts.append(text)
            kept_labels.append(label)  # type: ignore[arg-type]
        if reader.stats.rows == 0:
            raise UserInputError(
                f"{option} {path} has no examples (empty or only blank lines); pass a file with at least "
                "one non-blank example."
            )
        if not kept_texts:
            raise UserInputError(
                f"{option} {path}: every one of its {reader.stats.rows} rows is an exact duplicate of a "
                f"{'--train' if code == HELDOUT else '--train or --heldout'} row; pass rows the model was "
                "not trained on."
            )
        if code != PUBLIC:
            for key in this:
                private.setdefault(key, 0)
        side_texts[code], side_labels[code] = kept_texts, kept_labels
        inputs[str(path)] = sha256_file(path)  # type: ignore[arg-type]
        per_file[option.lstrip("-")] = {
            "path": str(path),
            "format": reader.format,
            "rows": reader.stats.rows,
            "kept": len(kept_texts),
            "blank_skipped": reader.stats.blank_skipped,
            "replaced_lines": reader.stats.replaced_lines,
        }
    removed["train_rows_in_heldout"] = sum(1 for t in side_texts[MEMBER] if private.get(normalize(t)))
    resplit_info = None
    if config.resplit:
        side_texts, side_labels, resplit_info = resplit(side_texts, side_labels, config.resplit_seed_value)
    # counted on the split written (after --resplit), the one the attack's examples task sees
    near = cross_pairs(side_texts[MEMBER], side_texts[HELDOUT], threshold=DEFAULT_THRESHOLD)
    removed["near_duplicate_pairs"] = len(near.pairs)  # none equal after normalization: those were removed
    texts: list[str] = []
    label_ids: list[int] = []
    codes: list[int] = []
    for code in (MEMBER, HELDOUT, PUBLIC):
        for text, label in zip(side_texts.get(code, ()), side_labels.get(code, ())):
            texts.append(text)
            codes.append(code)
            if labelled:
                label_ids.append(label_index.setdefault(label, len(label_index)))
    info: dict[str, Any] = {
        "source": "the user's own split (--train, --heldout" + (", --public)" if config.public else ")"),
        "rows": len(texts),
        "labelled": bool(labelled),
        "files": per_file,
        "overlap_removed": removed,
        "duplicates_rule": DUPLICATES_RULE,
        "near_duplicate_threshold": DEFAULT_THRESHOLD,
    }
    if resplit_info is not None:
        info["resplit"] = resplit_info
    return _finish(
        texts,
        label_ids if labelled else None,
        label_index,
        inputs=inputs,
        info=info,
        codes=np.asarray(codes, dtype=np.int8),
    )


#: How the user's split treats duplicates, as the manifest states it (``corpus.duplicates_rule``).
DUPLICATES_RULE = (
    "rows equal after normalization (NFKC, case-folded, punctuation as spaces) are one row within each of train, "
    "held-out and public alike; a held-out row equal to a train row is removed (the train row is counted), a public "
    "row equal to a train or held-out row is removed; member/non-member pairs of near duplicates (character 5-gram "
    "Jaccard >= the threshold) are counted and kept: dpaudit attack's examples task leaves both ends out"
)
#: What the manifest says about a re-split (``corpus.resplit.note``).
RESPLIT_NOTE = (
    "train and held-out rows pooled and re-split at random into the given sizes; the seed is public (the split is "
    "not a privacy mechanism: it only makes members and non-members one distribution). Retrain on train.jsonl: a "
    "model trained on the original --train file is not the one these members describe."
)


def resplit(
    texts: dict[int, list[str]], labels: dict[int, list[Label]], seed: int
) -> tuple[dict[int, list[str]], dict[int, list[Label]], dict[str, Any]]:
    """Pool the train and held-out rows and draw a uniformly random re-split of the same sizes (``--resplit``).

    Members and non-members are then exchangeable (one pool, one random draw), so the blind baseline has no shift to
    find (Das et al. 2024; Duan et al. 2024). The draw is a permutation of the pooled rows from
    ``numpy.random.default_rng(SeedSequence(seed, spawn_key=(9,)))``: reproducible, and not secret (it protects
    nothing). Public rows stay where they are.

    Returns:
        The re-split texts and labels (same keys as given) and the manifest's ``resplit`` record.
    """
    pool_texts = texts[MEMBER] + texts[HELDOUT]
    pool_labels = labels[MEMBER] + labels[HELDOUT]
    n_train = len(texts[MEMBER])
    order = _rng(seed, _RESPLIT).permutation(len(pool_texts)).tolist()
    out_texts, out_labels = dict(texts), dict(labels)
    out_texts[MEMBER] = [pool_texts[i] for i in order[:n_train]]
    out_labels[MEMBER] = [pool_labels[i] for i in order[:n_train]]
    out_texts[HELDOUT] = [pool_texts[i] for i in order[n_train:]]
    out_labels[HELDOUT] = [pool_labels[i] for i in order[n_train:]]
    record = {
        "seed": seed,
        "train": n_train,
        "heldout": len(pool_texts) - n_train,
        "moved_to_train": sum(1 for i in order[:n_train] if i >= n_train),
        "note": RESPLIT_NOTE,
    }
    return out_texts, out_labels, record


def check_format_options(config: InjectConfig) -> tuple[str, int]:
    """Parse ``--design`` and ``--format`` and check the options that belong to them, before any corpus is read.

    Returns:
        The secret kind (``digits``, ``words``, ``phrases``, ``new-tokens`` or ``rare-tokens``) and its count.
    """
    design, length = parse_design(config.design)
    if design != DESIGN_FORMAT:
        if config.word_list is not None or config.phrase_corpus is not None:
            option = "--word-list" if config.word_list is not None else "--phrase-corpus"
            raise UserInputError(f"{option} applies only to --design format, not --design {config.design}; remove it.")
        return design, length  # type: ignore[return-value]
    if config.format is None:
        raise UserInputError("--design format needs --format, e.g. --format digits:10.")
    kind, count = parse_format(config.format)
    if config.word_list is not None and kind != "words":
        raise UserInputError(f"--word-list applies only to --format words:N, not {config.format}; remove it.")
    if config.phrase_corpus is not None and kind != "phrases":
        raise UserInputError(f"--phrase-corpus applies only to --format phrases, not {config.format}; remove it.")
    if config.phrase_corpus is None and kind == "phrases":
        raise UserInputError(
            "--format phrases needs --phrase-corpus FILE: a corpus disjoint from --corpus to take phrases from."
        )
    return kind, count


def build_space(
    config: InjectConfig, *, public_texts: Sequence[str], phrase_sentences: Sequence[str] | None
) -> tuple[SecretSpace, dict[str, str]]:
    """The secret space the format names, and any extra input files (path -> sha256)."""
    kind, count = check_format_options(config)
    if kind == NEW_TOKENS:
        return new_token_space(count), {}
    if kind == RARE_TOKENS:
        return rare_token_space(count, public_texts), {}
    if kind == "digits":
        return digit_space(count), {}
    if kind == "words":
        if config.word_list is None:
            return word_space(count, shipped_words(), source=SHIPPED_WORDS), {}
        if config.word_list == WORD_LIST_PUBLIC:
            words = words_from_texts(public_texts)
            if len(words) < 2:
                raise UserInputError(
                    "--word-list public: the public split has fewer than 2 distinct words; use the shipped list or a file."
                )
            return word_space(count, words, source="public.jsonl (most frequent words)"), {}
        words = read_word_list(config.word_list)
        return word_space(count, words, source=config.word_list), {config.word_list: sha256_file(config.word_list)}
    if phrase_sentences is None:
        raise ValueError("phrase_sentences are required for a phrases format.")
    space = PhraseSpace(sentences=phrase_sentences, words=count, source=str(config.phrase_corpus))
    return space, {str(config.phrase_corpus): sha256_file(config.phrase_corpus)}  # type: ignore[arg-type]


#: What the manifest's tokenizer note adds for new-token canaries.
NEW_TOKENS_NOTE = (
    "The new-token canaries' tokens (new_tokens: every canary's, inserted or not, drawn before the coin "
    "flips) are public design information: tokenizers add them to the vocabulary learned from "
    "public.jsonl, so each is one whole token."
)
#: The score that fits each design's secrets (``dpaudit attack``'s canary attack uses it).
FITTING_SCORES = {
    "digits": "exposure (the secret's rank among all |R| candidates)",
    "words": "exposure (the secret's rank among all |R| candidates)",
    "phrases": "masked pseudo-log-likelihood of the secret",
    NEW_TOKENS: "masked pseudo-log-likelihood of the secret, each token normalized over the declared new tokens",
    RARE_TOKENS: "masked pseudo-log-likelihood of the secret",
}


def new_tokens(space: NewTokenSpace, canaries: Sequence[Canary]) -> list[str]:
    """Every new token of every canary (inserted or control), sorted: the set the manifest declares."""
    return sorted({token for c in canaries for token in space.units(c.secret)})


def design_record(config: InjectConfig, space: SecretSpace, canaries: Sequence[Canary]) -> dict[str, Any]:
    """The manifest's and the summary's ``design`` entry: the design, its secret format, the score that fits it,
    and one canary as it reads in train.jsonl (every canary is drawn the same way; which one was inserted is
    not shown by this choice: the first canary, member or not)."""
    name, _ = parse_design(config.design)
    record: dict[str, Any] = {
        "name": name,
        "secret_format": space.format,
        "fitting_score": FITTING_SCORES[space.kind],
        "example_canary": canaries[0].text if canaries else None,
    }
    if isinstance(space, NewTokenSpace):
        record["new_tokens"] = len(canaries) * space.distinct
    return record


def canary_share(canary_insertions: int, members: int) -> float:
    """The share of ``train.jsonl`` rows that are canary insertions (0 for an empty training set)."""
    total = canary_insertions + members
    return canary_insertions / total if total else 0.0


def format_share(share: float) -> str:
    """A share as a percentage with two decimals, more where rounding would show 100% for less than all."""
    digits = 2
    while share < 1.0 and round(share * 100, digits) >= 100.0 and digits < 12:
        digits += 1
    return f"{share * 100:.{digits}f}%"


def check_canary_share(canary_insertions: int, members: int, *, force: bool) -> float:
    """Refuse a schedule whose canaries would swamp the training set (more than :data:`MAX_CANARY_SHARE`).

    A training set that is mostly canaries no longer resembles the corpus the audit is about, and a
    huge frequency can write gigabytes of one sentence; ``force`` accepts it anyway. Runs before
    anything is written.

    Returns:
        The share (printed by ``dpaudit inject`` either way).
    """
    share = canary_share(canary_insertions, members)
    if share > MAX_CANARY_SHARE and not force:
        raise UserInputError(
            f"--frequencies/--per-frequency: canary rows would be {format_share(share)} of train.jsonl ({canary_insertions:,} "
            f"insertions among {members:,} corpus rows), above the {MAX_CANARY_SHARE:.0%} limit; lower the frequencies, "
            "use a larger corpus, or pass --force."
        )
    return share


#: What the manifest and the summary say about public.jsonl in the user's own split.
PUBLIC_GIVEN = "public.jsonl holds the --public rows (less duplicates of train or held-out rows, and of each other)."
NO_PUBLIC = (
    "no --public: public.jsonl is empty. Attacks on a model trained elsewhere (its tokenizer and labels come "
    "with it) need no public rows: loss, exposure, reconstruction, canary. dpaudit train (its tokenizer and "
    "label set come from public.jsonl only) and the shadow, ref, lira and rmia attacks (their models train on "
    "public rows) need --public FILE."
)


def inject(
    config: InjectConfig,
    out: str | Path,
    *,
    overwrite: bool = False,
    force: bool = False,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """Run the inject stage into ``out`` and return the summary (also stored in the manifest).

    The whole stage holds :func:`dpaudit.files.run_dirs.run_dir_lock` on ``out`` (a second inject into the same
    directory is refused, naming this process), which also removes staging folders a killed inject of
    the same ``out`` left behind. An ``out`` that holds a finished run of this very command (the same options,
    inputs unchanged; :func:`dpaudit.inject_dir.reader.finished_inject`) is returned as it is, its summary marked
    ``already_done``, unless ``overwrite``.

    Args:
        force: accept canary rows above :data:`MAX_CANARY_SHARE` of the training set.

    Raises:
        UserInputError: for any problem with the inputs, or a write that fails (disk full, file-size
            limit); nothing is left behind in that case.
    """
    request = config.to_json()  # the options as given: a rerun of the same command returns the finished run
    if overwrite or finished_inject(out, request) is None:
        prepare_output_dir(out, overwrite=overwrite)  # the cheap refusals first
    with run_dir_lock(out, stage="inject"):
        if not overwrite and (done := finished_inject(out, request)) is not None:
            return done
        return _inject(config, Path(out), overwrite=overwrite, force=force, command=command)


def _inject(
    config: InjectConfig, out: Path, *, overwrite: bool, force: bool, command: list[str] | None
) -> dict[str, Any]:
    out = prepare_output_dir(out, overwrite=overwrite)  # again, under the lock: another run may have just finished
    request = config.to_json()
    kind, _ = check_format_options(config)
    template = (
        config.template
        if config.template is not None
        else (PHRASE_TEMPLATE if kind in CONTEXT_FREE_KINDS else DEFAULT_TEMPLATE)
    )
    prefix, suffix = parse_template(template)
    check_context(template, kind=kind)
    # Record resolved defaults, so the manifest's config alone reproduces the run.
    design, length = parse_design(config.design)
    config = dataclasses.replace(
        config,
        template=template,
        design=design if length is None else f"{design}:{length}",
        format=config.format if design == DESIGN_FORMAT else None,
        corpus_size=(config.corpus_size or DEFAULT_CORPUS_SIZE) if config.builtin else config.corpus_size,
    )
    phrase_sentences = _load_phrase_sentences(config) if kind == "phrases" else None
    forbidden = None
    if phrase_sentences is not None:
        forbidden = {}
        for lineno, sentence in enumerate(phrase_sentences, start=1):
            forbidden.setdefault(" ".join(normalize_tokens(sentence)), lineno)

    more_public = 0 if config.user_split else generated_public(config)
    corpus = (
        load_user_split(config, forbidden=forbidden)
        if config.user_split
        else load_corpus(config, forbidden=forbidden, more_public=more_public)
    )
    if corpus.codes is not None:  # the user's own split: the files fix it
        codes = corpus.codes
        counts = SplitCounts(
            members=int((codes == MEMBER).sum()),
            heldout=int((codes == HELDOUT).sum()),
            public=int((codes == PUBLIC).sum()),
        )
    elif more_public:  # the corpus is the private part, split as with --public-size 0; the generated rows are public
        private = split_counts(len(corpus.texts) - more_public, dataclasses.replace(config.splits, public_size=0))
        counts = SplitCounts(members=private.members, heldout=private.heldout, public=more_public)
        codes = np.concatenate(
            [assign_splits(private, _rng(config.seed, _SPLIT)), np.full(more_public, PUBLIC, np.int8)]
        )
    else:
        counts = split_counts(len(corpus.texts), config.splits)
        codes = assign_splits(counts, _rng(config.seed, _SPLIT))
    if config.frequencies_from_size:  # chosen from the members, recorded in the manifest's config
        chosen = default_frequencies(counts.members, config.schedule.per_frequency)
        config = dataclasses.replace(config, schedule=dataclasses.replace(config.schedule, frequencies=chosen))
    schedule = config.schedule
    frequencies = schedule.canary_frequencies(_rng(config.seed, _COIN)) if config.canaries else np.zeros(0, np.int64)
    public_rows = np.flatnonzero(codes == PUBLIC)
    needs_public = config.word_list == WORD_LIST_PUBLIC or kind == RARE_TOKENS
    space, extra_inputs = build_space(
        config,
        public_texts=[corpus.texts[i] for i in public_rows.tolist()] if needs_public else (),
        phrase_sentences=phrase_sentences,
    )

    n_canaries = schedule.n_canaries if config.canaries else 0
    # Before any secret is drawn: the share of canary rows (refused above 50% without --force), then what the
    # work will cost, said when it is long and refused when the machine cannot hold it (canaries/cost.py).
    check_space_size(space, n_canaries)
    share = check_canary_share(int(frequencies.sum()), counts.members, force=force)
    _check_cost(space, n_canaries, int(frequencies.sum()), corpus.texts, prefix + suffix, out)

    # New tokens are released (every trained model's vocabulary declares them), so whether a draw is kept may
    # depend on public rows only: a private row's text must never change the released set. A random
    # 10-letter token occurs in a private row with probability ~ rows x 26^-10; other secrets stay private
    # and are kept absent from the whole corpus.
    scanned = [corpus.texts[i] for i in public_rows.tolist()] if isinstance(space, NewTokenSpace) else corpus.texts
    draws, rejected = draw_secrets(
        space,
        n_canaries,
        rng=_rng(config.seed, _SECRETS),
        corpus_texts=scanned,
        context_texts=[prefix, suffix],
    )
    labels = None
    if corpus.labels is not None and draws:
        # Canary labels follow the PUBLIC split's label counts: a classifier's label set comes from public.jsonl
        # (docs/privacy.md, "Nothing released is computed from private data"), so a canary must not carry
        # a label only private rows have (it would be refused at train time). Without public rows, the corpus counts.
        public_counts = np.bincount(
            np.asarray(corpus.label_ids, dtype=np.int64)[public_rows],  # type: ignore[arg-type]
            minlength=len(corpus.labels),
        ).tolist()
        weights = public_counts if sum(public_counts) > 0 else corpus.label_counts
        picks = draw_labels(weights, len(draws), rng=_rng(config.seed, _LABELS))  # type: ignore[arg-type]
        labels = [corpus.labels[i] for i in picks.tolist()]
    canaries = build_canaries(
        draws, frequencies, template_prefix=prefix, template_suffix=suffix, format=space.format, labels=labels
    )
    canaries = fill_keys(canaries, _rng(config.seed, KEY_STREAM))  # a unique {name} per canary
    order = train_order(np.flatnonzero(codes == MEMBER), frequencies, _rng(config.seed, _SHUFFLE))

    summary = _summary(config, counts, canaries, len(order), space, rejected)
    summary["design"] = design_record(config, space, canaries)
    summary["counts"]["canary_share"] = share
    if more_public:
        summary["counts"]["public_generated"] = more_public  # public rows made beyond --corpus-size
    if config.user_split:
        summary["counts"]["overlap_removed"] = corpus.info["overlap_removed"]
        summary["duplicates_rule"] = corpus.info["duplicates_rule"]
        if "resplit" in corpus.info:
            summary["resplit"] = corpus.info["resplit"]
        summary["public_split"] = PUBLIC_GIVEN if config.public is not None else NO_PUBLIC
    if config.frequencies_from_size and config.canaries:
        chosen_text = (
            f"--frequencies {','.join(map(str, schedule.frequencies))} chosen for {counts.members:,} training rows"
        )
        if share <= DEFAULT_CANARY_SHARE:
            summary["frequencies_chosen"] = (
                f"{chosen_text}: the fullest default schedule whose canary rows stay within {DEFAULT_CANARY_SHARE:.0%} "
                "of train.jsonl (pass --frequencies to choose)"
            )
        else:
            summary["frequencies_chosen"] = (
                f"{chosen_text}: the shortest default schedule, and still {format_share(share)} canary rows, above the "
                f"{DEFAULT_CANARY_SHARE:.0%} a default aims at; lower --per-frequency or use more training rows"
            )
    shared = shared_context_warning(template, kind=kind, n_canaries=len(canaries)) if canaries else None
    if shared:
        summary["warnings"] = [shared]  # printed by dpaudit inject, kept in the manifest
    unlisted = labels_missing_from_public(corpus, codes)
    if unlisted:
        summary.setdefault("warnings", []).append(missing_labels_warning(unlisted))
    _write(
        out,
        overwrite=overwrite,
        config=config,
        corpus=corpus,
        codes=codes,
        order=order,
        canaries=canaries,
        space=space,
        template=(template, prefix, suffix),
        extra_inputs=extra_inputs,
        summary=summary,
        command=command,
        request=request,
    )
    return summary


def _check_cost(
    space: SecretSpace, n_canaries: int, canary_rows: int, texts: Sequence[str], context: str, out: Path
) -> None:
    """Say what drawing ``n_canaries`` secrets and writing ``canary_rows`` canary lines will cost when it is long, and
    refuse it when this machine cannot hold it (:mod:`dpaudit.canaries.cost`), before any secret is drawn."""
    from dpaudit.canaries import cost as inject_cost

    if not n_canaries:
        return
    example = next(iter(space.draws(np.random.default_rng(0))), None)  # its length only: not the secret stream
    text_chars = len(context) + (len(example.secret) if example is not None else 0) + 16  # a {name} filled in
    distinct = getattr(space, "distinct", 1) if isinstance(space, NewTokenSpace) else 0
    cost = inject_cost.estimate(
        canaries=n_canaries,
        canary_rows=canary_rows,
        text_chars=text_chars,
        corpus_rows=len(texts),
        corpus_chars=sum(map(len, texts)),
        new_tokens=n_canaries * distinct,
        base_bytes=resources.resident_bytes(),
    )
    inject_cost.check_fits(cost, out)
    if inject_cost.worth_saying(cost):
        print(inject_cost.describe(cost), file=sys.stderr, flush=True)


def labels_missing_from_public(corpus: LoadedCorpus, codes: np.ndarray) -> list[Label]:
    """The labels of train.jsonl's corpus rows that no public.jsonl row has, in the corpus's label order.

    A classifier's label set comes from ``public.jsonl`` (or ``--labels``): :func:`dpaudit.inject_dir.reader.public_label_set`.
    Such a label is refused only when the private model trains, after a public model trained on the shorter set;
    inject knows both splits, so it says so first. Empty for an unlabelled corpus or an empty public split (which
    inject's summary already says ``dpaudit train`` cannot use).
    """
    if corpus.label_ids is None or corpus.labels is None:
        return []
    ids = np.asarray(corpus.label_ids, dtype=np.int64)
    public = ids[codes == PUBLIC]
    if public.size == 0:
        return []
    missing = np.setdiff1d(ids[codes == MEMBER], public)
    return [corpus.labels[i] for i in missing.tolist()]


def missing_labels_warning(missing: Sequence[Label]) -> str:
    """One line naming the labels public.jsonl lacks and what to pass (``dpaudit train --labels``)."""
    shown = ", ".join(repr(str(label)) for label in missing[:8]) + (
        f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    )
    return (
        f"{len(missing)} label(s) of train.jsonl never occur in public.jsonl ({shown}): a classifier's label set "
        "comes from public.jsonl, so dpaudit train would refuse those rows only at the private training, after the "
        "public model trained without them; give every training --labels with the whole set (--labels a,b,c or "
        "@FILE), or add public rows with those labels."
    )


def _summary(
    config: InjectConfig,
    counts: SplitCounts,
    canaries: list[Canary],
    train_rows: int,
    space: SecretSpace,
    rejected: int,
) -> dict[str, Any]:
    inserted = [c for c in canaries if c.member]
    by_frequency: dict[str, int] = {}
    for c in canaries:
        by_frequency[str(c.frequency)] = by_frequency.get(str(c.frequency), 0) + 1
    return {
        "mode": config.schedule.mode if config.canaries else "no-canaries",
        "format": space.format,
        "log2_size": space.log2_size,
        "counts": {
            "corpus": counts.total,
            "members": counts.members,
            "heldout": counts.heldout,
            "public": counts.public,
            "train_rows": train_rows,
            "canaries": len(canaries),
            "canaries_inserted": len(inserted),
            "canaries_control": len(canaries) - len(inserted),
            "canary_insertions": sum(c.frequency for c in canaries),
            "canaries_by_frequency": by_frequency,
            "secrets_rejected_in_corpus": rejected,
        },
    }


def _write(
    out: Path,
    *,
    overwrite: bool,
    config: InjectConfig,
    corpus: LoadedCorpus,
    codes: np.ndarray,
    order: np.ndarray,
    canaries: list[Canary],
    space: SecretSpace,
    template: tuple[str, str, str],
    extra_inputs: dict[str, str],
    summary: dict[str, Any],
    command: list[str] | None,
    request: dict[str, Any] | None = None,
) -> None:
    encoder = RowEncoder(labels=corpus.labels)
    canary_lines = [
        encoder.line(c.text, None if corpus.labels is None else corpus.labels.index(c.label)) for c in canaries
    ]
    write = dict(texts=corpus.texts, label_ids=corpus.label_ids, encoder=encoder)
    current = mf.TRAIN
    try:
        with staged_directory(out, overwrite=overwrite) as stage:
            with open(stage / mf.TRAIN, "w", encoding="utf-8", newline="\n") as handle:
                write_rows(handle, order, canary_lines=canary_lines, desc="train.jsonl", **write)
            for name, code, stream in ((mf.HELDOUT, HELDOUT, _HELDOUT_ORDER), (mf.PUBLIC, PUBLIC, _PUBLIC_ORDER)):
                current = name
                # Shuffled, so that every prefix is a uniform sample of the split: consumers read the first
                # rows (a trainer's evaluation, the public rows that scale per-layer clip norms), and a
                # corpus sorted by label would otherwise give them one intent only.
                rows = _rng(config.seed, stream).permutation(np.flatnonzero(codes == code))
                with open(stage / name, "w", encoding="utf-8", newline="\n") as handle:
                    write_rows(handle, rows, desc=name, **write)
            current = mf.CANARIES
            with open(stage / mf.CANARIES, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(
                    "".join(
                        dumps_jsonl_line(c.to_record()) for c in progress_bar(canaries, desc=mf.CANARIES, unit="canary")
                    )
                )
            text, prefix, suffix = template
            declared = {NEW_TOKENS_KEY: new_tokens(space, canaries)} if isinstance(space, NewTokenSpace) else {}
            manifest = build_manifest(
                schema=mf.SCHEMA,
                config=config.to_json(),
                seed=config.seed,
                inputs={**corpus.inputs, **extra_inputs},
                outputs=file_hashes(stage, mf.OUTPUT_FILES),
                command=command,
                extra={
                    **summary,
                    "secret_space": space.describe(),
                    "template": {"template": text, "prefix": prefix, "suffix": suffix},
                    "splits": {"from": "the user's own files (--train, --heldout, --public)"}
                    if config.user_split
                    else {
                        "heldout_fraction": config.splits.heldout_fraction,
                        "public_fraction": config.splits.public_fraction,
                        "heldout_size": config.splits.heldout_size,
                        "public_size": config.splits.public_size,
                    },
                    "corpus": corpus.info,
                    "canary_labels": "drawn in proportion to the corpus label counts" if corpus.labels else None,
                    "tokenizer": mf.TOKENIZER_NOTE if not declared else f"{mf.TOKENIZER_NOTE} {NEW_TOKENS_NOTE}",
                    **declared,
                    "random_streams": "numpy SeedSequence(seed, spawn_key=(k,)): 1 split, 2 secrets, 3 coin, 4 labels, 5 shuffle, 6 keys",
                    # a rerun of the same command returns this run (dpaudit.inject_dir.reader.finished_inject)
                    **({REQUEST_KEY: request, SUMMARY_KEYS: list(summary)} if request is not None else {}),
                },
            )
            current = "manifest.json"
            write_manifest(stage, manifest)
    except OSError as err:  # disk full, file-size limit, ...: the staging folder is already gone
        raise UserInputError(
            f"--out {out}: writing {current} failed ({err.strerror or err}); nothing was written. Free disk space or "
            "raise the file-size limit (ulimit -f), then rerun."
        ) from None
