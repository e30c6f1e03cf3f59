"""Where a run starts from (``--init-from``) and what it trains on (``--data-split``); framework-free.

DP models are pretrained on public data and then trained privately (Anil et al. 2021; Li et al. 2022,
"Large language models can be strong differentially private learners"; Yu et al. 2021). A trainer's
``--init-from DIR`` takes

- a dpaudit train run directory (its ``model/``; the run's manifest is hash-checked and says what the
  start was trained on), or its ``model/`` folder itself (recognized as that run's), or
- any Hugging Face model directory of an architecture the trainer supports (``config.json``, safetensors
  weights, ``tokenizer.json``).

The guarantee of the new run covers its own training data only: the start's parameters enter as they
are, so the guarantee means what it says only if the start is public (trained on public data only).
``privacy.json`` says so and records the start (:meth:`StartingPoint.record`); a start that a dpaudit
manifest shows was trained on this run's private ``train.jsonl`` (the same content, or any train split
of the same inject directory, also through its own start) is refused before anything is written
(:func:`refuse_private_start`).

``--data-split public`` trains on the inject directory's ``public.jsonl`` instead of ``train.jsonl``:
the way to make a public start from the inject directory itself. Such a run, started from nothing or
from a start whose own record says it holds public data only, is marked public
(:func:`public_data_only`): its model holds no private data and needs no epsilon.

Which ``train.jsonl`` files went into a model (its own and its start's, transitively) is listed in the
private manifest (:func:`private_training_inputs`), never in ``privacy.json``: their hashes confirm
guessed rows.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dpaudit.common.errors import UserInputError
from dpaudit.files.model_dirs import Layout, check_model_dir
from dpaudit.files.run_dirs import MANIFEST_NAME, load_manifest, sha256_file, verify_run_dir

__all__ = [
    "DATA_SPLITS",
    "DP_ON_PUBLIC_NOTE",
    "DataSplit",
    "PUBLIC_START_REQUIREMENT",
    "SPLIT_FILES",
    "StartingPoint",
    "private_training_inputs",
    "public_data_only",
    "refuse_private_start",
    "resolve_start",
]

DataSplit = Literal["train", "public"]
#: The inject splits a run may train on, and their files.
SPLIT_FILES: dict[str, str] = {"train": "train.jsonl", "public": "public.jsonl"}
DATA_SPLITS = tuple(SPLIT_FILES)
TRAIN_FILE = SPLIT_FILES["train"]
TRAIN_SCHEMA_PREFIX = "dpaudit.train/"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
MODEL_DIR = "model"

#: What privacy.json says about any start (its ``init_from.requirement``, and the guarantee sentence).
PUBLIC_START_REQUIREMENT = (
    "the starting point must be public (trained on public data only) for the guarantee to mean what it says: its "
    "parameters enter this model as they are, and whatever private data it was trained on is NOT covered by this "
    "run's epsilon."
)
#: The note of a DP run on the public split.
DP_ON_PUBLIC_NOTE = (
    "DP on public data protects nothing: this run trained on public.jsonl (--data-split public), which is public; "
    "its epsilon describes the mechanism, not a protection anyone needs."
)


@dataclass(frozen=True, kw_only=True)
class StartingPoint:
    """A checked ``--init-from`` directory.

    Attributes:
        given: the path as the user gave it.
        model_dir: the Hugging Face directory holding config, weights and tokenizer.
        run_dir: the dpaudit train run directory it belongs to, or None for a bare Hugging Face directory.
        weights: weight file name (relative to ``model_dir``) -> sha256.
        trained_on: the inject split file the start run trained on (``train.jsonl`` or ``public.jsonl``);
            None for a bare Hugging Face directory (unknown).
        public_data_only: the start run's manifest says it saw public data only; None when unknown.
        trainer: the trainer of the start run (None for a bare directory).
        private_inputs: path -> sha256 of every ``train.jsonl`` that went into the start (its manifest's
            record, transitively); private: for the manifest and the refusal, never for privacy.json.
        unrecorded_base: for a dpaudit run that trained on ``public.jsonl`` only, from a bare Hugging Face
            directory (directly or through such runs): that directory's path. Nothing records what it was
            trained on, so the run holds public data only if it does: the standing of the directory itself
            given as ``--init-from``. None otherwise (a run on ``train.jsonl``, one known public, one from a start
            declared private).
    """

    given: str
    model_dir: Path
    run_dir: Path | None = None
    weights: Mapping[str, str] = field(default_factory=dict)
    trained_on: str | None = None
    public_data_only: bool | None = None
    accepted_private: bool = False
    trainer: str | None = None
    private_inputs: Mapping[str, str] = field(default_factory=dict)
    unrecorded_base: str | None = None

    @property
    def dpaudit_run(self) -> bool:
        return self.run_dir is not None

    @property
    def inputs(self) -> dict[str, str]:
        """The start's weight files as manifest inputs (path -> sha256): a changed start is another run."""
        return {str(self.model_dir / name): digest for name, digest in sorted(self.weights.items())}

    @property
    def identity(self) -> dict[str, str]:
        """What a checkpoint's identity holds of the start (weight file name -> sha256)."""
        return dict(sorted(self.weights.items()))

    def record(self) -> dict[str, Any]:
        """``privacy.json``'s ``init_from``: public facts of the start only (no hash of private data)."""
        return {
            "path": self.given,
            "weights_sha256": dict(sorted(self.weights.items())),
            "dpaudit_run": self.dpaudit_run,
            "trainer": self.trainer,
            "trained_on": self.trained_on,
            "public_data_only": self.public_data_only,
            "requirement": PUBLIC_START_REQUIREMENT,
            **({"unrecorded_base": self.unrecorded_base} if self.unrecorded_base else {}),
            **({"accepted_private": True} if self.accepted_private else {}),
        }

    def describe(self) -> str:
        """One phrase naming the start, for the guarantee sentence and notes."""
        digest = next(iter(sorted(self.weights.items())), ("weights", "?"))
        what = "a Hugging Face model directory"
        if self.dpaudit_run:
            what = f"a dpaudit {self.trainer} run trained on {self.trained_on}"
            if self.unrecorded_base:
                what += f" from the Hugging Face model directory {self.unrecorded_base}"
        return f"--init-from {self.given} ({what}; {digest[0]} sha256 {digest[1][:16]})"


def resolve_start(value: str | Path, *, option: str = "--init-from", layout: Layout | None = None) -> StartingPoint:
    """Check ``value`` and say what it is: a dpaudit train run (or its ``model/``), else a Hugging Face directory.

    A run directory is verified against its manifest (a changed weight file is refused). The model directory then
    passes the one up-front check of every model directory (:func:`dpaudit.files.model_dirs.check_model_dir`: safetensors
    only, weights that fit ``config.json`` by the loading trainer's ``layout``, a tokenizer within the embedding
    table, finite values), before the trainer builds anything or writes anything.

    Raises:
        UserInputError: one line naming ``option``: no such directory, no ``config.json``, a run
            directory of another stage or one that was changed, a model directory that is not one model.
    """
    given = str(value)
    path = Path(value)
    if not path.is_dir():
        raise UserInputError(
            f"{option} {given}: no such directory; pass a dpaudit train run directory or a Hugging Face "
            "model directory."
        )
    run_dir = None
    if (path / MANIFEST_NAME).is_file():
        run_dir = path
    elif path.name == MODEL_DIR and (path.parent / MANIFEST_NAME).is_file() and _is_train_run(path.parent):
        run_dir = path.parent  # the model/ of a run: the run's own record applies (and its refusal)
    if run_dir is None:
        if not (path / "config.json").is_file():
            raise UserInputError(
                f"{option} {given}: no config.json; pass a dpaudit train run directory or a Hugging "
                "Face model directory."
            )
        check_model_dir(path, where=f"{option} {given}", layout=layout, option=option)
        return StartingPoint(given=given, model_dir=path, weights=_weight_hashes(path))
    try:
        manifest = verify_run_dir(run_dir, schema_prefix=TRAIN_SCHEMA_PREFIX)
    except UserInputError as err:
        raise UserInputError(f"{option} {given}: {err}") from None
    outputs = manifest.get("outputs") or {}
    weights = {
        name.split("/", 1)[1]: digest
        for name, digest in outputs.items()
        if name.startswith(f"{MODEL_DIR}/") and name.split("/", 1)[1] in _weight_names(outputs)
    }
    split = manifest.get("data_split", "train")
    trained_on = SPLIT_FILES.get(split, str(split))
    trainer = (manifest.get("config") or {}).get("trainer") if isinstance(manifest.get("config"), dict) else None
    check_model_dir(run_dir / MODEL_DIR, where=f"{option} {given}", layout=layout, option=option)
    return StartingPoint(
        given=given,
        model_dir=run_dir / MODEL_DIR,
        run_dir=run_dir,
        weights=weights,
        trained_on=trained_on,
        public_data_only=bool(manifest.get("public_data_only", False)),
        trainer=trainer,
        private_inputs=_recorded_private_inputs(manifest),
        unrecorded_base=_recorded_unrecorded_base(manifest),
    )


def _recorded_unrecorded_base(manifest: Mapping[str, Any]) -> str | None:
    """The bare Hugging Face directory a run's public-only chain rests on (:attr:`StartingPoint.unrecorded_base`),
    from its manifest: a run on ``public.jsonl`` whose recorded start is that directory, or a dpaudit run resting on
    one."""
    start = manifest.get("init_from")
    if (
        manifest.get("public_data_only") is True
        or manifest.get("data_split") != "public"
        or not isinstance(start, dict)
    ):
        return None
    if start.get("dpaudit_run") is False and isinstance(start.get("path"), str):
        return str(start["path"])
    base = start.get("unrecorded_base")
    return str(base) if isinstance(base, str) and not start.get("accepted_private") else None


def _is_train_run(directory: Path) -> bool:
    try:
        return str(load_manifest(directory).get("schema", "")).startswith(TRAIN_SCHEMA_PREFIX)
    except UserInputError:
        return False


def _weight_names(outputs: Mapping[str, str]) -> set[str]:
    """The weight files among a run's ``model/`` outputs: the single file, or the index and its shards."""
    names = {name.split("/", 1)[1] for name in outputs if name.startswith(f"{MODEL_DIR}/")}
    return {n for n in names if n.endswith(".safetensors") or n == WEIGHTS_INDEX}


def _weight_hashes(model_dir: Path) -> dict[str, str]:
    """sha256 of a Hugging Face directory's safetensors weights: ``model.safetensors``, or the index and
    each shard it names. Empty when there are none (the trainer's loader then says what is wrong)."""
    if (model_dir / WEIGHTS).is_file():
        return {WEIGHTS: sha256_file(model_dir / WEIGHTS)}
    index = model_dir / WEIGHTS_INDEX
    if not index.is_file():
        return {}
    out = {WEIGHTS_INDEX: sha256_file(index)}
    try:
        shards = sorted({str(v) for v in json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return out
    for shard in shards:
        if (model_dir / shard).is_file() and (model_dir / shard).parent == model_dir:
            out[shard] = sha256_file(model_dir / shard)
    return out


def _recorded_private_inputs(manifest: Mapping[str, Any]) -> dict[str, str]:
    """The ``train.jsonl`` files a train manifest says went into its model: its ``private_training_inputs``;
    a manifest written before that field trained on its ``train.jsonl`` input, always."""
    recorded = manifest.get("private_training_inputs")
    if isinstance(recorded, dict):
        return {str(k): str(v) for k, v in recorded.items()}
    inputs = manifest.get("inputs") or {}
    return {str(k): str(v) for k, v in inputs.items() if Path(str(k)).name == TRAIN_FILE}


def private_training_inputs(split: str, inputs: Mapping[str, str], start: StartingPoint | None) -> dict[str, str]:
    """The ``train.jsonl`` files (path -> sha256) that went into a run's model: its own when it trains on
    the train split, and its start's, transitively (for the private manifest, and the next run's refusal)."""
    own = (
        {str(_resolved(Path(k))): v for k, v in inputs.items() if Path(k).name == TRAIN_FILE}
        if split == "train"
        else {}
    )
    return {**(dict(start.private_inputs) if start is not None else {}), **own}


def public_data_only(split: str, start: StartingPoint | None) -> bool:
    """Whether a run saw public data only: it trained on ``public.jsonl`` and started from nothing, or from
    a dpaudit run whose own manifest says it saw public data only."""
    return split == "public" and (start is None or start.public_data_only is True)


def refuse_private_start(
    start: StartingPoint, inputs: Mapping[str, str], *, option: str = "--init-from", accept_private: bool = False
) -> StartingPoint:
    """Refuse a start trained on this run's private data, as its dpaudit manifest shows, and a dpaudit start that did
    not train on public data only unless ``accept_private`` (``--accept-private-start``) declares it; returns the start
    (marked ``accepted_private`` then, so that the record says first that the epsilon does not cover it).

    ``inputs`` are this run's manifest inputs (path -> sha256), among them the inject directory's
    ``train.jsonl``. The start is refused when a ``train.jsonl`` that went into it (its own training
    split, or its start's, transitively: :func:`private_training_inputs`) has the same sha256, or lies
    in the same inject directory (any train split of it, an earlier ``dpaudit inject`` there included).
    A start whose manifest says it trained on ``public.jsonl`` passes; so does a bare Hugging Face
    directory (nothing says what it saw: privacy.json states the requirement), and a dpaudit run that trained
    on ``public.jsonl`` from one (:attr:`StartingPoint.unrecorded_base`: the same standing, the claim naming that
    directory).

    Raises:
        UserInputError: one line naming ``option`` and why.
    """
    train = {path: digest for path, digest in inputs.items() if Path(path).name == TRAIN_FILE}
    hashes = set(train.values())
    folders = {_resolved(Path(path).parent) for path in train}
    for path, digest in start.private_inputs.items():
        same_content = digest in hashes
        if same_content or _resolved(Path(path).parent) in folders:
            why = (
                "the same content as this run's train.jsonl"
                if same_content
                else "a train split of this run's inject directory"
            )
            raise UserInputError(
                f"{option} {start.given}: this start was trained on {path} ({why}), this run's private data; a start "
                "must be public (train one with --data-split public), or the guarantee would not cover that data."
            )
    if start.dpaudit_run and start.public_data_only is not True and start.unrecorded_base is None:
        if not accept_private:
            raise UserInputError(
                f"{option} {start.given}: this start is a dpaudit run that did not train on public data only (it trained "
                f"on {start.trained_on or 'an unrecorded split'}), so the new run's epsilon would not cover what it "
                "learned; train a public start with --data-split public, or pass --accept-private-start to declare it "
                "(the claim then says so first)."
            )
        return dataclasses.replace(start, accepted_private=True)
    return start


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path.absolute()


def run_inputs(
    data: Any, *, init_from: str | None, data_split: str, layout: Layout | None = None
) -> tuple[dict[str, str], Any, tuple[int, ...], StartingPoint | None]:
    """What a trainer's ``load_data`` reports of its inputs: (inputs, identity, canary frequencies, start).

    ``layout``: the trainer's expectation of a start's weights (:data:`dpaudit.files.model_dirs.Layout`), for the up-front
    check of ``--init-from``.

    The start's weights are an input, and a checkpoint belongs to this start only (its hashes join the
    identity); canaries live in ``train.jsonl`` only, so a run on ``public.jsonl`` holds none.
    """
    from dpaudit.inject_dir.reader import canary_frequencies

    inputs, identity = dict(data.inputs), data.identity
    start = None
    if init_from is not None:
        start = resolve_start(init_from, layout=layout)
        inputs.update(start.inputs)
        identity = {"data": identity, "init_from": start.identity}
    frequencies = tuple(canary_frequencies(data.manifest)) if data_split == "train" else ()
    return inputs, identity, frequencies, start
