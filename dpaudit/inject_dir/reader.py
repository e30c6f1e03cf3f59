"""The inject run directory, read side: file names, schema, the canary record, and the one verified reader.

``dpaudit inject`` (the :mod:`canaries` package, the writing side) produces a directory of

- ``train.jsonl``: the members and the inserted canary rows, shuffled (the private training data);
- ``heldout.jsonl``: non-member corpus rows (evaluation and membership baselines);
- ``public.jsonl``: rows for tokenizers and shadow models (the only input a tokenizer may see);
- ``canaries.jsonl``: every canary, inserted or control, with its frequency (never shown to a trainer);
- ``manifest.json``: schema ``dpaudit.inject/1``, the config, the seed and the sha256 of each file above.

Rows are ``{"text": ...}``, or ``{"text": ..., "label": ...}`` for a classification corpus (a label is a
string or an integer; the manifest's ``corpus.labelled`` says which kind of corpus it is). A classifier's
label set (:class:`LabelSet`) comes from public information only: ``public.jsonl``'s labels
(:func:`public_label_set`) or the user's ``--labels``; :attr:`InjectRun.all_labels`, the union over every
split, reads private data and is never a released model's label set.

A directory a shadow or reference model trains on (written by :mod:`dpaudit.attacks.shadow_models`) may hold row
REFERENCES instead of private rows: ``{"ref": "train.jsonl:17", "sha256": "<text's sha256>"}`` (and ``label`` where it
differs from the source row's), resolved against the inject directory its manifest names (``row_source``) and
checked by hash. Private rows are then never copied into a shadow cache: only their position and hash.

Every later stage (each trainer, the attacks, the report) reads the directory through
:func:`load_inject_run`, which refuses a directory whose manifest does not list all of
:data:`REQUIRED_FILES` or whose files no longer match their recorded sha256: an edited ``train.jsonl``
is refused, not silently trained on or audited. This module is framework-free (no jax, no torch).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import MANIFEST_NAME, read_jsonl, sha256_file, verify_run_dir

SCHEMA = "dpaudit.inject/1"
SCHEMA_PREFIX = "dpaudit.inject/"
TRAIN, HELDOUT, PUBLIC, CANARIES = "train.jsonl", "heldout.jsonl", "public.jsonl", "canaries.jsonl"
#: The three text splits, in the order trainers read them.
SPLITS = (TRAIN, HELDOUT, PUBLIC)
#: Files every inject manifest must list among its (hash-checked) outputs.
REQUIRED_FILES = (TRAIN, HELDOUT, PUBLIC, CANARIES)
OUTPUT_FILES = REQUIRED_FILES
TOKENIZER_NOTE = (
    "Train tokenizers on public.jsonl only: a tokenizer trained on train.jsonl would learn the canaries' "
    "secrets as vocabulary and leak them regardless of how the model is trained."
)

#: The manifest key declaring the new-token canaries' tokens (``dpaudit inject --design new-tokens``): the set of every
#: canary's tokens, members' and non-members' alike, public design information that tokenizers add to the vocabulary.
NEW_TOKENS = "new_tokens"
_NEW_TOKEN = re.compile(r"[a-z]+")

#: A class label of a classification corpus.
Label = str | int


def label_order(labels: Iterable[Label]) -> list[Label]:
    """The canonical order of a label set: integers (ascending), then strings (ascending).

    Label ids (0, 1, ...) index this list, so they never depend on which label came first in the corpus.
    """
    return sorted(set(labels), key=lambda lab: (isinstance(lab, str), lab))


#: Where a classifier's label set came from (``privacy.json`` ``details.labels_from``).
LABELS_FROM_PUBLIC = "public.jsonl"
LABELS_DECLARED = "declared --labels"


@dataclass(frozen=True)
class LabelSet:
    """A classifier's label set: class id i is ``names[i]``; rows' labels are compared as ``str(label)``.

    A released classifier's ``config.json`` holds ``id2label`` and its head has ``len(names)`` outputs,
    both released un-noised, so the set must come from public information only: the labels of
    ``public.jsonl`` (:func:`public_label_set`) or a list the user declares (``--labels``), never from
    ``train.jsonl`` (docs/privacy.md, "Nothing released is computed from private data").

    Attributes:
        names: the labels, as strings, in class-id order.
        source: :data:`LABELS_FROM_PUBLIC`, :data:`LABELS_DECLARED`, or where an attack read them.
        unknown: the label a row whose label is outside ``names`` is mapped to (``--unknown-label``), or
            None: such private rows are refused and non-private rows left out.
    """

    names: tuple[str, ...]
    source: str
    unknown: str | None = None

    def __post_init__(self) -> None:
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"label names must be distinct, got {list(self.names)}.")
        if self.unknown is not None and self.unknown not in self.names:
            raise ValueError(f"unknown label {self.unknown!r} is not one of {list(self.names)}.")

    def id_of(self, label: Label) -> int | None:
        """Class id of a row's ``label``: its own, else the ``unknown`` label's, else None (not in the set)."""
        try:
            return self.names.index(str(label))
        except ValueError:
            return None if self.unknown is None else self.names.index(self.unknown)

    def details(self) -> dict[str, Any]:
        """What ``privacy.json``'s ``details`` says about the label set and the unknown-label policy."""
        if self.unknown is None:
            policy = (
                "train.jsonl rows (inserted canaries included) with a label outside the set are refused "
                "before training; heldout.jsonl and public.jsonl rows with one are left out wherever labels "
                "are used (held-out accuracy, clip scaling on public rows)"
            )
        else:
            policy = f"rows of any split with a label outside the set are mapped to {self.unknown!r}"
        return {"labels_from": self.source, "num_labels": len(self.names), "unknown_labels": policy}


def public_label_set(run: InjectRun, *, unknown: str | None = None) -> LabelSet:
    """The label set of ``public.jsonl`` in :func:`label_order`: public information only.

    Raises:
        UserInputError: fewer than 2 labels, or two labels that print alike (``1`` and ``"1"``), or an
            ``unknown`` label not among them; the message says to declare the set with ``--labels``.
    """
    path = run.path / PUBLIC
    labels = label_order(run.split(PUBLIC).labels or ())
    names = tuple(str(label) for label in labels)
    if len(names) < 2:
        raise UserInputError(
            f"{path} holds {len(names)} distinct label(s) ({', '.join(names) or 'none'}); a classifier "
            "needs at least 2: declare the label set with --labels a,b,c."
        )
    if len(set(names)) != len(names):
        raise UserInputError(
            f'{path} holds labels that are equal as text (e.g. 1 and "1"); make them distinct or '
            "declare the label set with --labels."
        )
    if unknown is not None and unknown not in names:
        raise UserInputError(
            f"--unknown-label {unknown!r} is not a label of {path} ({', '.join(names)}); pick one of "
            "them or declare the set with --labels."
        )
    return LabelSet(names=names, source=LABELS_FROM_PUBLIC, unknown=unknown)


@dataclass(frozen=True, kw_only=True)
class Canary:
    """One canary as written to ``canaries.jsonl``.

    ``text`` is ``prefix + secret + suffix``. ``frequency`` is how many times it was inserted into
    ``train.jsonl`` (0 = control, never inserted); ``member`` is True exactly when it was inserted (in
    coin-flip mode a fair coin decided it, Steinke et al. 2023). ``label`` is set for a labelled corpus.
    """

    id: str
    prefix: str
    secret: str
    suffix: str
    format: str
    frequency: int
    member: bool
    label: Label | None = None

    def __post_init__(self) -> None:
        if self.frequency < 0:
            raise ValueError(f"frequency must be >= 0, got {self.frequency}.")
        if self.member != (self.frequency > 0):
            raise ValueError(
                f"member must be True exactly when frequency > 0, got member={self.member}, frequency={self.frequency}."
            )

    @property
    def text(self) -> str:
        return self.prefix + self.secret + self.suffix

    def to_record(self) -> dict[str, Any]:
        """The ``canaries.jsonl`` row (fixed key order)."""
        record: dict[str, Any] = {
            "id": self.id,
            "prefix": self.prefix,
            "secret": self.secret,
            "suffix": self.suffix,
            "text": self.text,
            "format": self.format,
            "frequency": self.frequency,
            "member": self.member,
        }
        if self.label is not None:
            record["label"] = self.label
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Canary:
        """Inverse of :meth:`to_record`; checks that ``text`` is prefix + secret + suffix."""
        canary = cls(
            id=record["id"],
            prefix=record["prefix"],
            secret=record["secret"],
            suffix=record["suffix"],
            format=record["format"],
            frequency=int(record["frequency"]),
            member=bool(record["member"]),
            label=record.get("label"),
        )
        if record.get("text") != canary.text:
            raise ValueError(f"canary {canary.id}: text is not prefix + secret + suffix.")
        return canary


def read_canaries(path: str | os.PathLike[str]) -> list[Canary]:
    """The rows of a ``canaries.jsonl`` as :class:`Canary` objects."""
    out = []
    for i, record in enumerate(read_jsonl(path), start=1):
        try:
            out.append(Canary.from_record(record))
        except (KeyError, TypeError, ValueError) as err:
            raise UserInputError(f"{path}:{i}: not a canary record ({err}); rerun dpaudit inject.") from None
    return out


@dataclass(frozen=True)
class SplitRows:
    """The rows of one split: texts, and labels (one per text) for a labelled corpus, else None."""

    texts: list[str]
    labels: list[Label] | None


#: The manifest key naming the inject directory a split's row references point into (see the module docstring).
ROW_SOURCE = "row_source"


def text_hash(text: str) -> str:
    """The sha256 of a row's text (UTF-8): what a row reference is checked against."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_split(path: str | os.PathLike[str], *, labelled: bool, source: InjectRun | None = None) -> SplitRows:
    """Read a split file, checking each row's ``text`` (a string) and, if ``labelled``, its ``label``. A row reference
    (``ref``) is resolved in ``source`` (the directory the manifest's ``row_source`` names) and checked by hash."""
    path = Path(path)
    texts: list[str] = []
    labels: list[Label] = []
    for lineno, row in enumerate(read_jsonl(path), start=1):
        if "ref" in row:
            row = _resolve(path, lineno, row, source)
        text = row.get("text")
        if not isinstance(text, str):
            raise UserInputError(f"{path}:{lineno}: expected a string 'text' field; rerun dpaudit inject.")
        texts.append(text)
        if labelled:
            label = row.get("label")
            if isinstance(label, bool) or not isinstance(label, (str, int)):
                raise UserInputError(
                    f"{path}:{lineno}: expected a string or integer 'label' field; rerun dpaudit inject."
                )
            labels.append(label)
    return SplitRows(texts=texts, labels=labels if labelled else None)


def _resolve(path: Path, lineno: int, row: Mapping[str, Any], source: InjectRun | None) -> dict[str, Any]:
    """The row a reference points to: ``{"text", "label"}`` from ``source`` (its label unless the reference has one)."""
    where = f"{path}:{lineno}"
    if source is None:
        raise UserInputError(
            f"{where}: a row reference but the manifest names no row_source; remove this directory "
            "(a shadow cache entry) and rerun."
        )
    ref = row.get("ref")
    name, _, line = str(ref).rpartition(":")
    if name not in (*SPLITS, CANARIES) or not line.isdigit():
        raise UserInputError(
            f"{where}: bad row reference {ref!r}; remove this directory (a shadow cache entry) and rerun."
        )
    rows = source.reference_rows(name)
    index = int(line) - 1
    if not 0 <= index < len(rows) or text_hash(rows[index]["text"]) != row.get("sha256"):
        raise UserInputError(
            f"{where}: its row reference {ref} no longer matches {source.path / name}; remove this "
            "directory (a shadow cache entry) and rerun."
        )
    found = dict(rows[index])
    if "label" in row:
        found["label"] = row["label"]
    return found


@dataclass(frozen=True, kw_only=True, eq=False)
class InjectRun:
    """A verified inject run directory. Files are read on first use and kept (``functools.cached_property``).

    Attributes:
        path: the directory, as given.
        manifest: its ``manifest.json`` (already checked against every listed file).
    """

    path: Path
    manifest: dict[str, Any]
    _splits: dict[str, SplitRows] = field(default_factory=dict, init=False, repr=False)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def labelled(self) -> bool:
        """Whether rows carry a ``label`` (a classification corpus)."""
        corpus = self.manifest.get("corpus")
        return bool(corpus.get("labelled")) if isinstance(corpus, dict) else False

    def split(self, name: str) -> SplitRows:
        """Texts (and labels) of ``train.jsonl``, ``heldout.jsonl`` or ``public.jsonl``, read once."""
        if name not in SPLITS:
            raise ValueError(f"name must be one of {SPLITS}, got {name!r}.")
        if name not in self._splits:
            self._splits[name] = read_split(self.path / name, labelled=self.labelled, source=self.row_source)
        return self._splits[name]

    @functools.cached_property
    def row_source(self) -> InjectRun | None:
        """The verified inject directory this one's row references point into (None: it holds its rows itself)."""
        entry = self.manifest.get(ROW_SOURCE)
        if entry is None:
            return None
        source = load_inject_run(entry)
        if source.row_source is not None:
            raise UserInputError(f"{self.path / MANIFEST_NAME}: its row_source {entry} holds references itself; rerun.")
        return source

    def reference_rows(self, name: str) -> list[dict[str, Any]]:
        """The rows of one file as references resolve them: ``{"text"[, "label"]}`` by line (canaries.jsonl: each
        canary's text and label), read once."""
        cache = self.__dict__.setdefault("_reference_rows", {})
        if name not in cache:
            if name == CANARIES:
                cache[name] = [
                    {"text": c.text, **({} if c.label is None else {"label": c.label})} for c in self.canaries
                ]
            else:
                split = self.split(name)
                cache[name] = [
                    {"text": t, **({} if split.labels is None else {"label": split.labels[i]})}
                    for i, t in enumerate(split.texts)
                ]
        return cache[name]

    def reference_of(self) -> dict[str, str]:
        """Text -> its first reference ``"<file>:<line>"`` in this directory (train, heldout, public, then canaries)."""
        cache = self.__dict__.get("_reference_of")
        if cache is None:
            cache = {}
            for name in (*SPLITS, CANARIES):
                for i, row in enumerate(self.reference_rows(name), start=1):
                    cache.setdefault(row["text"], f"{name}:{i}")
            self.__dict__["_reference_of"] = cache
        return cache

    @property
    def train_texts(self) -> list[str]:
        return self.split(TRAIN).texts

    @property
    def heldout_texts(self) -> list[str]:
        return self.split(HELDOUT).texts

    @property
    def public_texts(self) -> list[str]:
        return self.split(PUBLIC).texts

    @functools.cached_property
    def all_labels(self) -> list[Label] | None:
        """Every label of every split and canary, in :func:`label_order`; None if unlabelled.

        For reading and checking data only, NEVER a released model's label set: it is a function of the
        private ``train.jsonl`` (one extra train row with a new label would add it, an un-noised release).
        A trainer's label set is :func:`public_label_set` or the user's ``--labels``; an attack reads the
        model's own ``id2label``.
        """
        if not self.labelled:
            return None
        found: set[Label] = set()
        for name in SPLITS:
            found.update(self.split(name).labels or ())
        found.update(c.label for c in self.canaries if c.label is not None)
        return label_order(found)

    @functools.cached_property
    def canaries(self) -> list[Canary]:
        """Every canary (inserted and control). Trainers must not read these: only attacks and reports."""
        return read_canaries(self.path / CANARIES)

    @functools.cached_property
    def space(self) -> Any:
        """The secret space rebuilt from the manifest (a :class:`dpaudit.inject_dir.secret_spaces.SecretSpace`), or None for
        phrase spaces, which need their phrase corpus. Imported lazily: spaces belong to the writing side."""
        from dpaudit.inject_dir.secret_spaces import space_from_manifest

        entry = self.manifest.get("secret_space")
        if not isinstance(entry, dict) or "kind" not in entry:
            raise UserInputError(f"{self.path / MANIFEST_NAME}: no 'secret_space' entry; rerun dpaudit inject.")
        return space_from_manifest(entry) if entry["kind"] in ("digits", "words") else None

    @functools.cached_property
    def new_tokens(self) -> tuple[str, ...]:
        """The tokens the manifest declares for new-token canaries (:data:`NEW_TOKENS`), () for other designs.

        Trainers add them to the tokenizer they learn from ``public.jsonl``
        (``dpaudit.training.tokenizer.train_wordpiece(..., new_tokens=run.new_tokens)``): the set is fixed
        before the coin flips and covers members and non-members alike, so it reveals no membership.

        Raises:
            UserInputError: an entry that is not a distinct lowercase ASCII word.
        """
        tokens = self.manifest.get(NEW_TOKENS) or []
        if (
            not isinstance(tokens, list)
            or not all(isinstance(t, str) and _NEW_TOKEN.fullmatch(t) for t in tokens)
            or len(set(tokens)) != len(tokens)
        ):
            raise UserInputError(
                f"{self.path / MANIFEST_NAME}: '{NEW_TOKENS}' must list distinct lowercase ASCII words; "
                "rerun dpaudit inject."
            )
        return tuple(tokens)

    @functools.cached_property
    def inputs(self) -> dict[str, str]:
        """Input hashes a later stage records in its own manifest: each split and ``manifest.json`` (path -> sha256)."""
        recorded = self.manifest["outputs"]
        inputs = {str(self.path / name): recorded[name] for name in SPLITS}
        inputs[str(self.path / MANIFEST_NAME)] = sha256_file(self.path / MANIFEST_NAME)
        return inputs

    @functools.cached_property
    def identity(self) -> str:
        """One hash naming the data (the splits and the manifest, by file name): what a checkpoint belongs to."""
        return hashlib.sha256(
            json.dumps(sorted((Path(k).name, v) for k, v in self.inputs.items())).encode()
        ).hexdigest()


def load_inject_run(path: str | os.PathLike[str]) -> InjectRun:
    """Verify an inject directory against its manifest and return a reader for it.

    Checks, before anything is read: the manifest's schema is ``dpaudit.inject/*``; it lists every one of
    :data:`REQUIRED_FILES` among its outputs (an unlisted file could be edited unnoticed); every listed
    file exists with its recorded sha256.

    Raises:
        UserInputError: naming the directory or file at fault, if any check fails.
    """
    path = Path(path)
    manifest = verify_run_dir(path, schema_prefix=SCHEMA_PREFIX)
    missing = [name for name in REQUIRED_FILES if name not in manifest.get("outputs", {})]
    if missing:
        raise UserInputError(
            f"{path / MANIFEST_NAME} does not list {', '.join(missing)} among its outputs, so it cannot be hash-checked; "
            "rerun dpaudit inject."
        )
    return InjectRun(path=path, manifest=manifest)


def canary_frequencies(manifest: Mapping[str, Any]) -> tuple[int, ...]:
    """The insertion counts (> 0) of an inject manifest's canaries, sorted; () if it names none.

    A canary inserted f times is f rows: trainers state the group-privacy bound for each of these. A run written
    without canaries (``dpaudit inject --no-canaries``) names none, whatever its recorded schedule.
    """
    counts = manifest.get("counts") or {}
    if counts.get("canaries") == 0:
        return ()
    by_frequency = counts.get("canaries_by_frequency") or {}
    found = set()
    for key in by_frequency:
        try:
            found.add(int(key))
        except (TypeError, ValueError):
            continue
    if not found:
        schedule = (manifest.get("config") or {}).get("schedule") or {}
        found = {f for f in schedule.get("frequencies") or [] if isinstance(f, int)}
    return tuple(sorted(f for f in found if f > 0))


#: The manifest fields of a finished inject run that let a rerun of its command return it: ``request`` (the
#: options as given, before defaults were resolved) and ``summary_keys`` (which fields are the summary it printed).
REQUEST_KEY, SUMMARY_KEYS = "request", "summary_keys"
#: Set in the summary :func:`finished_inject` returns: the run was found finished, nothing was written.
ALREADY_DONE = "already_done"


def finished_inject(out: str | os.PathLike[str], request: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary of a finished inject run of this very command in ``out``, or None.

    This very command: the manifest records the same ``request`` (the options as given), every input it lists
    (corpus, word list, phrase corpus) still has the recorded sha256, and every file of ``out`` verifies with
    nothing added. The summary is the one the run printed, read back from the manifest, with
    ``already_done: True``; ``dpaudit inject`` then prints it again and writes nothing, as train and the demo do.
    """
    from dpaudit.files.run_dirs import finished_output, inputs_unchanged, same_json

    manifest = finished_output(out, schema_prefix=SCHEMA_PREFIX)
    if manifest is None or REQUEST_KEY not in manifest or not same_json(manifest[REQUEST_KEY], request):
        return None
    keys = manifest.get(SUMMARY_KEYS)
    if not isinstance(keys, list) or not inputs_unchanged(dict(manifest.get("inputs") or {})):
        return None
    return {**{k: manifest[k] for k in keys if k in manifest}, ALREADY_DONE: True}
