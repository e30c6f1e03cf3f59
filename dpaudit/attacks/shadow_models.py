"""Shadow and reference models: trained through the trainer registry, cached, resumable.

(The ``shadow`` attack that classifies their features is :mod:`dpaudit.attacks.shokri`.)

The shadow-model attack (Shokri et al. 2017), LiRA (Carlini et al. 2022), RMIA (Zarifzadeh et al.
2024) and the reference-model attack (Mireshghallah et al. 2022) all need models trained like the
target on data the auditor controls. Each such model is trained by the target's own trainer
(``load_trainer(manifest["config"]["trainer"])``) with the target's Config (read from its manifest),
on a temporary inject-format directory:

- ``train.jsonl``: the rows this model is trained on (no canaries);
- ``heldout.jsonl``: the other rows of its pool (its non-members);
- ``public.jsonl``: the target's whole ``public.jsonl``, so a trainer that fits its tokenizer on the
  public split (jax-bert does) builds the very tokenizer the target has: scores compare token for token.

Each model lives in a cache directory keyed by a hash of (trainer, config, the rows of its split,
seed), reused across runs. A finished model is a complete train run directory (manifest verified);
an unfinished one is resumed by the trainer from its checkpoints after a kill.

Cache root: ``--shadow-cache DIR``, else ``$DPAUDIT_CACHE/shadows``, else ``~/.cache/dpaudit/shadows``.
Training runs in this process (jax-bert then imports jax; the compiled step is shared by every shadow
of the same shapes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.errors import UserInputError


def cache_root(option: str | os.PathLike[str] | None = None) -> Path:
    """The shadow cache directory (``--shadow-cache``, ``$DPAUDIT_CACHE/shadows``, ``~/.cache/dpaudit/shadows``)."""
    if option:
        return Path(option)
    env = os.environ.get("DPAUDIT_CACHE")
    if env:
        return Path(env) / "shadows"
    return Path.home() / ".cache" / "dpaudit" / "shadows"


@dataclass(frozen=True)
class TargetRecipe:
    """How the target was trained: its trainer's name and Config fields (from its manifest)."""

    trainer: str
    config: dict[str, Any]
    seed: int


def check_trained_like_target(attack: str, options: Any, source: Any, run: Any) -> None:
    """The checks of every attack that trains shadow or reference models like the target, run before any
    model is loaded: a measurable ``--fpr`` (:func:`dpaudit.attacks.mia.precheck`) and a target whose
    manifest names its trainer and Config (:func:`target_recipe`)."""
    from dpaudit.attacks.mia import precheck

    precheck(options, run)
    target_recipe(source, attack)


def target_recipe(source: Any, attack: str) -> TargetRecipe:
    """The target's trainer and config, or a one-line error for a bare model directory."""
    manifest = source.manifest
    config = dict((manifest or {}).get("config") or {})
    if manifest is None or "trainer" not in config:
        raise UserInputError(f"--attacks {attack} trains shadow models like the target, but --model {source.path} is not a "
                             "dpaudit train run directory (no manifest naming its trainer and config); pass a train run "
                             "directory" + (" or --reference-model DIR." if attack == "ref" else "."))
    trainer = config.pop("trainer")
    return TargetRecipe(trainer=str(trainer), config=config, seed=int(manifest.get("seed") or 0))


def build_config(trainer: Any, recipe: TargetRecipe, *, train_size: int, overrides: dict[str, Any] | None = None
                 ) -> tuple[Any, list[str]]:
    """The target's Config for a shadow of ``train_size`` rows, and what had to change (warnings).

    Fields the Config does not have are dropped; a redacted ``noise_seed`` (a string) is dropped; a
    batch larger than the shadow's data is reduced to half of it (said in a warning). A target trained
    to a ``target_epsilon`` gives shadows calibrated to the same epsilon on their own data size (the
    same privacy level, as Shokri et al.'s shadows mimic the target's training).
    """
    fields = {f.name: f for f in dataclasses.fields(trainer.Config)}
    kw = {k: v for k, v in recipe.config.items() if k in fields}
    if "noise_seed" in kw and not (kw["noise_seed"] is None or isinstance(kw["noise_seed"], int)):
        del kw["noise_seed"]
    kw.update(overrides or {})
    notes = []
    if isinstance(kw.get("batch_size"), int) and kw["batch_size"] > train_size and not kw.get("batch_schedule"):
        new = max(1, train_size // 2)
        notes.append(f"the target's batch size {kw['batch_size']} exceeds a shadow's {train_size} rows; shadows use {new}.")
        kw["batch_size"] = new
    try:
        return trainer.Config(**kw), notes
    except (TypeError, ValueError) as err:
        raise UserInputError(f"cannot rebuild the target's {recipe.trainer} config for shadow models ({err}).") from None


@dataclass(frozen=True)
class ShadowSpec:
    """One model to train: its rows (``pool`` indices flagged ``member``) and seed."""

    index: int
    member: np.ndarray  # bool over the pool
    seed: int


def _rows(texts: Sequence[str], labels: Sequence[Any] | None, idx: np.ndarray) -> list[dict[str, Any]]:
    if labels is None:
        return [{"text": texts[i]} for i in idx.tolist()]
    return [{"text": texts[i], "label": labels[i]} for i in idx.tolist()]


def write_shadow_data(path: Path, *, train: list[dict[str, Any]], heldout: list[dict[str, Any]],
                      public: list[dict[str, Any]], labelled: bool, target_manifest: dict[str, Any]) -> Path:
    """An inject-format directory (verifiable by :func:`dpaudit.inject_run.load_inject_run`), no canaries."""
    from dpaudit.inject_run import (
        CANARIES,
        HELDOUT,
        OUTPUT_FILES,
        PUBLIC,
        SCHEMA,
        TRAIN,
    )
    from dpaudit.rundir import (
        build_manifest,
        file_hashes,
        staged_directory,
        write_jsonl,
        write_manifest,
    )

    with staged_directory(path, overwrite=True) as stage:
        for name, rows in ((TRAIN, train), (HELDOUT, heldout), (PUBLIC, public), (CANARIES, [])):
            write_jsonl(stage / name, rows)
        extra = {"corpus": {"labelled": labelled, "source": "dpaudit shadow split"}, "mode": "shadow",
                 "secret_space": target_manifest.get("secret_space"), "canaries": 0,
                 "tokenizer": "public.jsonl is the target's public split (the same tokenizer as the target)."}
        if "labels" in target_manifest:
            extra["labels"] = target_manifest["labels"]
        manifest = build_manifest(schema=SCHEMA, config={"shadow": True, "coin_flip": False}, seed=None, inputs={},
                                  outputs=file_hashes(stage, OUTPUT_FILES), command=["dpaudit", "attack", "(shadow data)"],
                                  extra=extra)
        write_manifest(stage, manifest)
    return path


def _finished(model_dir: Path) -> bool:
    from dpaudit.rundir import verify_run_dir

    if not (model_dir / "manifest.json").is_file():
        return False
    try:
        verify_run_dir(model_dir, schema_prefix="dpaudit.train/")
    except UserInputError:
        return False
    return True


@dataclass
class ShadowPool:
    """The rows shadows are drawn from: texts and (for a classifier) labels as written in the data."""

    texts: list[str]
    labels: list[Any] | None


@dataclass(frozen=True)
class TrainedShadow:
    spec: ShadowSpec
    path: Path
    cached: bool


def train_shadows(*, source: Any, run: Any, pool: ShadowPool, specs: Sequence[ShadowSpec], attack: str, cache: Path,
                  max_minutes: float | None = None, overrides: dict[str, Any] | None = None,
                  what: str = "shadow") -> tuple[list[TrainedShadow], list[str]]:
    """Train (or reuse from the cache) one model per spec; one progress line per model on stderr.

    With ``max_minutes``, no new model is started once that much time has passed and at least one
    model exists (cached models are always used). Returns the models that exist and warnings.
    """
    from dpaudit.inject_run import PUBLIC
    from dpaudit.training.api import load_trainer

    recipe = target_recipe(source, attack)
    trainer = load_trainer(recipe.trainer)
    if getattr(source, "labels", None) is not None and "labels" in {f.name for f in dataclasses.fields(trainer.Config)}:
        # A classifier's shadows get the target's own label set, declared in its class-id order: the scores of
        # the target and of every shadow then index the same classes (and no shadow reads labels off its rows).
        unknown = source.unknown_label if source.unknown_label in source.labels else None
        overrides = {"labels": list(source.labels), "unknown_label": unknown, **(overrides or {})}
    public_split = run.split(PUBLIC)
    public = _rows(public_split.texts, public_split.labels, np.arange(len(public_split.texts)))
    notes: list[str] = []
    out: list[TrainedShadow] = []
    start = time.monotonic()
    for n, spec in enumerate(specs, start=1):
        idx_in, idx_out = np.flatnonzero(spec.member), np.flatnonzero(~spec.member)
        config, changed = build_config(trainer, recipe, train_size=idx_in.size, overrides=overrides)
        for note in changed:
            if note not in notes:
                notes.append(note)
        rows_in, rows_out = _rows(pool.texts, pool.labels, idx_in), _rows(pool.texts, pool.labels, idx_out)
        ident = {"trainer": recipe.trainer, "config": dataclasses.asdict(config), "seed": spec.seed,
                 "train": hashlib.sha256(json.dumps(rows_in, sort_keys=True).encode()).hexdigest(),
                 "heldout": hashlib.sha256(json.dumps(rows_out, sort_keys=True).encode()).hexdigest(),
                 "public": hashlib.sha256(json.dumps(public, sort_keys=True).encode()).hexdigest()}
        key = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:24]
        home = cache / key
        model_dir = home / "model"
        if _finished(model_dir):
            print(f"{what} {n}/{len(specs)}: cached ({home})", file=sys.stderr, flush=True)
            out.append(TrainedShadow(spec, model_dir, True))
            continue
        elapsed = (time.monotonic() - start) / 60
        if max_minutes is not None and out and elapsed >= max_minutes:  # at least one model is always trained
            notes.append(f"--max-shadow-minutes {max_minutes:g}: stopped after {len(out)} of {len(specs)} {what} models "
                         f"({elapsed:.1f} min); {len(out)} used.")
            print(f"{what} {n}/{len(specs)}: not started (--max-shadow-minutes {max_minutes:g} reached)", file=sys.stderr)
            break
        home.mkdir(parents=True, exist_ok=True)
        (home / "identity.json").write_text(json.dumps(ident, indent=1, sort_keys=True, default=str))
        data_dir = home / "data"
        try:
            from dpaudit.inject_run import load_inject_run

            load_inject_run(data_dir)
        except UserInputError:
            write_shadow_data(data_dir, train=rows_in, heldout=rows_out, public=public,
                              labelled=pool.labels is not None, target_manifest=run.manifest)
        t0 = time.monotonic()
        try:
            trainer.train(data_dir, model_dir, config, seed=spec.seed)
        except UserInputError:
            if not model_dir.exists():
                raise
            shutil.rmtree(model_dir)  # an unusable leftover (not resumable): start this one over
            trainer.train(data_dir, model_dir, config, seed=spec.seed)
        print(f"{what} {n}/{len(specs)}: trained on {idx_in.size} rows in {time.monotonic() - t0:.1f} s ({home})",
              file=sys.stderr, flush=True)
        out.append(TrainedShadow(spec, model_dir, False))
    return out, notes


def check_same_tokenizer(target: Any, other: Any, *, option: str) -> None:
    """Refuse a reference model whose tokenizer differs from the target's (token-level scores would not compare)."""
    a, b = target.tokenizer, other.tokenizer
    if a.get_vocab() != b.get_vocab():
        raise UserInputError(f"{option} {other.source.path}: its tokenizer differs from the target's ({len(b.get_vocab())} "
                             f"vs {len(a.get_vocab())} tokens); a reference model must use the target's tokenizer.")


def load_scorers(context: Any, models: Sequence[TrainedShadow]) -> list[Any]:
    """Scorers for trained shadows, with the target's batch size and device."""
    from dpaudit.scoring import load

    scorers = []
    for m in models:
        s = load(m.path, batch_size=context.scorer.batch_size, device=context.scorer.device, progress=False)
        check_same_tokenizer(context.scorer, s, option="shadow model")
        scorers.append(s)
    return scorers


# -- the public-half shadows of the shadow and rmia attacks (and the ref attack's pool) ------------


def public_pool(run: Any, label_set: Any = None) -> ShadowPool:
    """``public.jsonl``'s rows; with a classifier's ``label_set``, only those whose label the model has
    (a shadow trained like the target would refuse the others, and their loss is undefined)."""
    from dpaudit.inject_run import PUBLIC

    split = run.split(PUBLIC)
    if split.labels is None or label_set is None:
        return ShadowPool(texts=list(split.texts), labels=None if split.labels is None else list(split.labels))
    keep = [i for i, lab in enumerate(split.labels) if label_set.id_of(lab) is not None]
    return ShadowPool(texts=[split.texts[i] for i in keep], labels=[split.labels[i] for i in keep])


def pool_label_ids(label_set: Any, pool: ShadowPool) -> list[int] | None:
    """Class ids of the pool's labels in the model's label set (every pool row has one: :func:`public_pool`)."""
    if pool.labels is None or label_set is None:
        return None
    return [label_set.id_of(lab) for lab in pool.labels]


def public_half_specs(n_pool: int, k: int, seed: int) -> list[ShadowSpec]:
    """k shadows, each IN on an independent random half of the public pool (seeded)."""
    specs = []
    for i in range(k):
        rng = np.random.default_rng([seed, 0x5348, i])
        member = np.zeros(n_pool, bool)
        member[rng.permutation(n_pool)[: n_pool // 2]] = True
        specs.append(ShadowSpec(index=i, member=member, seed=seed * 1000 + i))
    return specs


def public_shadows(context: Any, attack: str, *, what: str = "shadow") -> tuple[list[Any], list[Any], ShadowPool, list[str]]:
    """Train or reuse the k public-half shadows (shared by ``shadow`` and ``rmia``): (models, scorers, pool, notes)."""
    cached = getattr(context, "_public_shadows", None)
    if cached is not None:
        return cached
    options = context.options
    pool = public_pool(context.data, context.scorer.source.label_set())
    if len(pool.texts) < 4:
        raise UserInputError(f"--attacks {attack}: public.jsonl has {len(pool.texts)} rows; shadow models need at least 4 "
                             "(re-inject with a larger --public-size).")
    specs = public_half_specs(len(pool.texts), options.shadow_models, options.seed)
    models, notes = train_shadows(source=context.scorer.source, run=context.data, pool=pool, specs=specs, attack=attack,
                                  cache=cache_root(options.shadow_cache), max_minutes=options.max_shadow_minutes,
                                  overrides=options.shadow_overrides, what=what)
    if not models:
        raise UserInputError(f"--max-shadow-minutes {options.max_shadow_minutes:g}: no shadow model could be trained in "
                             "time; raise it.")
    scorers = load_scorers(context, models)
    context._public_shadows = (models, scorers, pool, notes)
    return context._public_shadows
