"""Shadow and reference models: trained like the target, cached, resumable, compared with the target.

(The ``shadow`` attack that classifies their features is :mod:`dpaudit.attacks.shokri`.)

The shadow-model attack (Shokri et al. 2017), LiRA (Carlini et al. 2022), RMIA (Zarifzadeh et al.
2024) and the reference-model attack (Mireshghallah et al. 2022) all need models trained like the
target on data the auditor controls. All four papers assume these models match the target: the same
architecture and training recipe on data of the same distribution and size. A shadow trained on a
quarter of the target's rows with the target's epochs runs a quarter of its optimizer steps and can end
near chance (24 steps and 10.9% held-out accuracy against the target's 78 steps and 82%):
every attack calibrated on it is calibrated on an untrained model. So each model here is trained

- by the target's own trainer (``load_trainer(manifest["config"]["trainer"])``) with the target's
  Config (read from its manifest), or, for a model trained elsewhere (no dpaudit manifest), by the
  trainer and recipe the user names (``--shadow-trainer NAME --shadow-config FILE.json``);
- on as many rows as the target trained on (privacy.json's N, its declared ``--dataset-size``, or
  ``train.jsonl``'s rows) whenever the pool has them, so that the same epochs and batch size give the
  same number of optimizer steps; when the pool is smaller, a trainer counted in epochs gets the epochs
  that come closest to the target's step count at the target's batch size (a trainer counted in steps,
  jax-bert, runs the target's steps anyway), and the results say what differs;
- with the target's label set (its ``config.json`` id2label, the public one), so the scores of the
  target and of every shadow index the same classes;
- on a temporary inject-format directory: ``train.jsonl`` (its rows, no canaries), ``heldout.jsonl``
  (where its held-out accuracy is measured: the target's own ``heldout.jsonl`` rows it did not train
  on, so that the two accuracies compare on the same rows; the rest of its pool when none is left) and
  ``public.jsonl`` (the target's whole ``public.jsonl``, so a trainer that fits its tokenizer on the
  public split, as jax-bert does, builds the very tokenizer the target has).

Each model's held-out accuracy (the trainers' evaluation, :data:`dpaudit.training.baselines.UTILITY_KINDS`)
is recorded beside the target's (:class:`dpaudit.attacks.results.ShadowModelsInfo`), with a warning when
their mean differs from the target's by more than :data:`ACCURACY_MARGIN`.

Each model lives in a cache directory keyed by a hash of (trainer, config, the rows of its split,
seed), reused across runs. A finished model is a complete train run directory (manifest verified);
an unfinished one is resumed by the trainer from its checkpoints after a kill. The models of one attack
train through :func:`dpaudit.fleet.fleet.run_fleet` when it is installed and ``--workers`` or
``--ray-address`` ask for parallel workers; otherwise one after the other in this process (jax-bert then
imports jax; the compiled step is shared by every shadow of the same shapes).

User-supplied shadow models (``--shadow-dirs``): each directory is a model (a dpaudit train run
directory or a Hugging Face model directory with the target's tokenizer) holding :data:`MEMBERS_FILE`, a
JSON list of what it trained on: each entry a training text, or ``"sha256:<hex>"``, the sha256 of a
text's UTF-8 bytes. A pool row is IN for that model when its text (or its hash) is listed.

Cache root: ``--shadow-cache DIR``; by default ``<out>-shadows`` beside the attack's output (a private temporary folder,
removed afterwards, when the attack writes no output), or ``$DPAUDIT_CACHE/shadows`` when that is set. Folders are
created with mode 0700, and a shadow's data directory holds only references to the target's rows (file, line and the
text's sha256, resolved against the inject directory by :func:`dpaudit.inject_dir.reader.load_inject_run`), never the private
rows themselves; ``public.jsonl`` (public by design) is copied. The announcement says where the models go.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.mia import MembershipAttack, precheck
from dpaudit.attacks.options import ShadowOptions
from dpaudit.common.errors import UserInputError
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

#: Shadow (or reference) models whose mean held-out accuracy differs from the target's by more than this,
#: absolute (0.10 = 10 percentage points), are called out in the results: the attack is then calibrated on
#: models unlike the target (shadows at 10.9% against a target at 82%).
ACCURACY_MARGIN = 0.10
#: The membership file of a user-supplied shadow directory (``--shadow-dirs``).
MEMBERS_FILE = "members.json"


def cache_root(option: str | os.PathLike[str] | None = None) -> Path:
    """The shadow cache directory: ``--shadow-cache`` (the attack stage defaults it to :func:`default_cache` beside its
    output), else ``$DPAUDIT_CACHE/shadows``. There is no shared per-user default: the models it holds were trained on
    private rows, so they stay where the user put the attack (docs/privacy.md)."""
    if option:
        return Path(option)
    env = os.environ.get("DPAUDIT_CACHE")
    if env:
        return Path(env) / "shadows"
    raise UserInputError(
        "shadow and reference models need a cache directory: pass --shadow-cache DIR (or --out, whose "
        "sibling DIR-shadows is the default), or set $DPAUDIT_CACHE."
    )


def default_cache(out: str | os.PathLike[str]) -> Path:
    """The shadow cache of an attack writing ``out``: the folder ``<out>-shadows`` beside it."""
    out = Path(out)
    return out.with_name(out.name + "-shadows")


def private_dir(path: Path) -> Path:
    """``path`` created (with its missing parents) readable by this user only (mode 0700): a folder that will hold models
    trained on private rows. An existing folder is used as it is."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    return path


# -- the target's recipe --------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetRecipe:
    """How the target was trained, and what a model trained like it is compared with.

    Attributes:
        trainer, config: the trainer's registered name and its Config fields.
        seed: the target's public seed.
        rows: the target's training rows N (privacy.json, else its declared size, else train.jsonl's rows).
        steps: the optimizer steps the target ran (its manifest; None for a model trained elsewhere).
        utility: (name, value) of the target's last held-out figure (its manifest summary), or None.
        origin: where the recipe comes from, in words.
        imitate: for a recipe named by ``--shadow-trainer`` without a start of its own, the target's model directory:
            each model starts from a fresh copy of its architecture and tokenizer (:func:`_fresh_start_identity`),
            so that its scores and the target's index the same tokens; None: the recipe builds its own model.
        lora: a ``--peft lora`` target's ``privacy.json`` ``details.trained`` (rank, alpha, targets, the frozen base
            and its hashes): its models are LoRA adapters of the same layout over the same base, which must still be
            what the target adapted (:func:`check_lora_base`); None for a target that trained every weight.
    """

    trainer: str
    config: dict[str, Any]
    seed: int
    rows: int | None = None
    steps: int | None = None
    utility: tuple[str, float] | None = None
    origin: str = "the target's manifest"
    imitate: str | None = None
    lora: dict[str, Any] | None = None

    @property
    def batch_size(self) -> int | None:
        value = self.config.get("batch_size")
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_trained_like_target(attack: str, options: Any, source: Any, run: Any) -> None:
    """The checks of every attack that trains shadow or reference models like the target, run before any
    model is loaded: a measurable ``--fpr`` (:func:`dpaudit.attacks.mia.precheck`) and either usable
    ``--shadow-dirs`` or a recipe (:func:`target_recipe`: the target's manifest or ``--shadow-trainer``)."""
    precheck(options, run)
    if getattr(options, "shadow_dirs", None):
        shadow_dir_paths(options)
        return
    recipe = target_recipe(source, attack, options=options, run=run)
    check_lora_base(attack, recipe)
    if getattr(options, "shadow_trainer", None):
        trainer = _shadow_trainer(recipe.trainer)
        config, _, _ = plan_config(
            trainer, recipe, train_size=max(recipe.rows or 2, 2), overrides=getattr(options, "shadow_overrides", None)
        )
        check_named_recipe(trainer, recipe, config, source, options=options)


class ShadowTrainedAttack(MembershipAttack):
    """A membership attack that compares the target with models trained like it (shadow or reference models), or
    with the user's ``--shadow-dirs``: its options add :class:`~dpaudit.attacks.options.ShadowOptions`, and its one
    check (:meth:`check`) is every such attack's.

    Attributes:
        min_shadows: the models it needs (``--shadow-models`` or ``--shadow-dirs``), and why (``min_shadows_why``).
    """

    Config: ClassVar[type] = ShadowOptions
    min_shadows: ClassVar[int] = 1
    min_shadows_why: ClassVar[str] = ""

    @classmethod
    def uses_shadows(cls, options: Any) -> bool:
        """Whether, with these options, it compares the target with shadow or reference models (always, unless a
        subclass is given its model another way)."""
        del options
        return True

    @classmethod
    def trains_models(cls, options: Any) -> bool:
        """It trains them unless the user gave them (``--shadow-dirs``)."""
        return cls.uses_shadows(options) and not options.shadow_dirs

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """Before any model is loaded: enough models (:attr:`min_shadows`), then what every attack that trains models
        like the target checks (:func:`check_trained_like_target`); without shadow models, the membership checks."""
        if not cls.uses_shadows(options):
            precheck(options, run)
            return
        why = f" ({cls.min_shadows_why})" if cls.min_shadows_why else ""
        if options.shadow_dirs:
            if len(shadow_dir_paths(options)) < cls.min_shadows:
                raise UserInputError(f"--attacks {cls.name} needs >= {cls.min_shadows} --shadow-dirs{why}.")
        elif options.shadow_models < cls.min_shadows:
            raise UserInputError(
                f"--attacks {cls.name} needs --shadow-models >= {cls.min_shadows}{why}, got {options.shadow_models}."
            )
        check_trained_like_target(cls.name, options, source, run)


def heldout_utility(manifest: dict[str, Any] | None) -> tuple[str, float] | None:
    """(name, value) of a train run's held-out figure from its manifest summary (the trainers' last evaluation),
    by :data:`dpaudit.training.baselines.UTILITY_KINDS`; None when it has none."""
    from dpaudit.training.baselines import UTILITY_KINDS

    summary = (manifest or {}).get("summary") or {}
    for kind in UTILITY_KINDS:
        for key in kind.keys:
            value = summary.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                return kind.name, float(value)
    return None


def _target_rows(source: Any, run: Any) -> int | None:
    record = getattr(source, "privacy", None)
    for value in (getattr(record, "dataset_size", None), getattr(record, "declared_dataset_size", None)):
        if isinstance(value, int) and value > 0:
            return value
    if run is not None:
        from dpaudit.inject_dir.reader import TRAIN

        return len(run.split(TRAIN).texts) or None
    return None


def read_shadow_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object of ``--shadow-config FILE.json`` (a trainer's Config fields), or a one-line error."""
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(
            f"--shadow-config {path}: cannot read it ({getattr(err, 'strerror', None) or err}); give "
            "a JSON file of the trainer's Config fields."
        ) from None
    except ValueError as err:
        raise UserInputError(
            f"--shadow-config {path}: not valid JSON ({err}); give a JSON object of the trainer's "
            'Config fields, e.g. {"mode": "sgd", "epochs": 3, "batch_size": 32}.'
        ) from None
    if not isinstance(obj, dict):
        raise UserInputError(
            f"--shadow-config {path}: expected a JSON object of the trainer's Config fields, got a "
            f"{type(obj).__name__}."
        )
    obj.pop("trainer", None)
    return obj


def _shadow_trainer(name: str) -> Any:
    """The trainer ``--shadow-trainer NAME`` names, or a one-line error naming that option."""
    from dpaudit.training.api import available_trainers, load_trainer

    if name not in available_trainers():
        raise UserInputError(
            f"--shadow-trainer {name!r} is not a registered trainer; choose one of: "
            f"{', '.join(sorted(available_trainers()))}."
        )
    return load_trainer(name)


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    """A warning on stderr, once per process (every attack that trains shadows reads the recipe)."""
    print(message, file=sys.stderr)


def shadow_config_fields(path: str | os.PathLike[str], trainer: Any) -> dict[str, Any]:
    """``--shadow-config FILE.json`` as the trainer's Config fields, its keys read by the same rules as ``dpaudit
    train --config`` (:func:`dpaudit.training.config_types.config_keys`): an unknown key is refused, not dropped."""
    from dpaudit.training.config_types import config_keys

    keys = config_keys(read_shadow_config(path), trainer.Config, f"--shadow-config {path}", warn=_warn_once)
    return {name: value for name, (_key, value) in keys.items()}


def target_recipe(source: Any, attack: str, *, options: Any = None, run: Any = None) -> TargetRecipe:
    """The target's trainer and config (its manifest, or ``--shadow-trainer``/``--shadow-config``), with the
    figures a shadow is matched to and compared with; a one-line error for a bare model directory without them."""
    manifest = source.manifest
    named = getattr(options, "shadow_trainer", None)
    config_file = getattr(options, "shadow_config", None)
    if config_file and not named:
        raise UserInputError("--shadow-config needs --shadow-trainer NAME (the registered trainer the config is for).")
    imitate = None
    if named:
        trainer_cls = _shadow_trainer(str(named))
        config = shadow_config_fields(config_file, trainer_cls) if config_file else {}
        trainer, seed = str(named), int(getattr(options, "seed", 0) or 0)
        origin = f"--shadow-trainer {named}" + (f" --shadow-config {config_file}" if config_file else "")
        fields = {f.name for f in dataclasses.fields(trainer_cls.Config)}
        if "task" in fields and config.get("task") is None and source.kind in TASK_OF_KIND:
            config["task"] = TASK_OF_KIND[source.kind]  # a shadow is a model of the target's kind
        if "init_from" in fields and not config.get("init_from"):
            imitate = str(source.model_dir)  # its architecture and tokenizer, fresh weights per model
    else:
        config = dict((manifest or {}).get("config") or {})
        if manifest is None or "trainer" not in config:
            raise UserInputError(
                f"--attacks {attack} trains shadow models like the target, but --model {source.path} is not a dpaudit "
                "train run directory (no manifest naming its trainer and config); pass a train run directory, name the "
                "recipe with --shadow-trainer NAME --shadow-config FILE.json, or give trained models with --shadow-dirs"
                + (" or --reference-model DIR." if attack == "ref" else ".")
            )
        trainer = str(config.pop("trainer"))
        seed = int(manifest.get("seed") or 0)
        origin = "the target's manifest"
    steps = (manifest or {}).get("steps")
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    trained = (getattr(getattr(source, "privacy", None), "details", None) or {}).get("trained")
    lora = trained if not named and isinstance(trained, dict) and trained.get("peft") == "lora" else None
    recipe = TargetRecipe(
        trainer=trainer,
        config=config,
        seed=seed,
        rows=_target_rows(source, run),
        steps=steps,
        utility=heldout_utility(manifest),
        origin=origin,
        imitate=imitate,
        lora=lora,
    )
    return recipe


def lora_words(lora: dict[str, Any]) -> str:
    """A LoRA layout in words: ``LoRA adapters (rank 8, alpha 16, on c_attn) over <base>``."""
    base = (lora.get("base") or {}).get("init_from") or "a random initialization"
    full = lora.get("modules_trained_in_full") or []
    alpha = lora.get("alpha")
    return (
        f"LoRA adapters (rank {lora.get('rank')}"
        + (f", alpha {alpha:g}" if isinstance(alpha, (int, float)) else "")
        + f", on {','.join(lora.get('targets') or [])}"
        + (f"; {', '.join(full)} trained in full" if full else "")
        + f") over {base}"
    )


def check_lora_base(attack: str, recipe: TargetRecipe) -> None:
    """A LoRA target's models train adapters over its base: refuse, before any model trains, a base that is gone or
    whose weights changed since the target adapted it (the models would adapt another model).

    Raises:
        UserInputError: one line naming the base and what to do.
    """
    if recipe.lora is None:
        return
    from dpaudit.scoring.adapters import changed_weights

    base = recipe.lora.get("base") or {}
    given = base.get("init_from")
    if not isinstance(given, str):
        return  # adapters over the preset's random init, drawn again from the public seed by the trainer
    path = Path(given)
    model_dir = path / "model" if (path / "model").is_dir() else path
    why = "is not found here" if not path.is_dir() else None
    if why is None:
        changed = changed_weights(model_dir, base.get("weights_sha256"))
        why = None if changed is None else f"changed since the target adapted it ({changed})"
    if why is not None:
        raise UserInputError(
            f"--attacks {attack}: the target is {lora_words(recipe.lora)}, and that base {why}; its shadow "
            "models are adapters over the same base: restore it there, or bring trained models with --shadow-dirs."
        )


#: The torch trainers' ``--task`` of each model kind: a shadow of a model trained elsewhere is a model of its kind.
TASK_OF_KIND = {CLASSIFIER: "classify", MASKED_LM: "mlm", CAUSAL_LM: "clm"}


def _positions(config: dict[str, Any]) -> int | None:
    """A config.json's position table size (``max_position_embeddings``, GPT-2's ``n_positions``), or None."""
    for key in ("max_position_embeddings", "n_positions"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _vocabulary(model_dir: Path) -> dict[str, int] | None:
    """A model directory's token -> id map (``tokenizer.json``, else ``vocab.txt``), or None without either."""
    if (model_dir / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_vocab(with_added_tokens=True)
        except Exception:  # noqa: BLE001 - the Rust reader's own error type
            return None
    if (model_dir / "vocab.txt").is_file():
        lines = (model_dir / "vocab.txt").read_text(encoding="utf-8", errors="replace").splitlines()
        return {token: i for i, token in enumerate(lines)}
    return None


def check_named_recipe(trainer: Any, recipe: TargetRecipe, config: Any, source: Any, *, options: Any = None) -> None:
    """Refuse, before any model trains, a ``--shadow-trainer`` recipe whose models cannot match the target: another
    task than the target's kind, a trainer that cannot train that kind, a start (its own ``init_from``) with another
    tokenizer or architecture, a target whose tokenizer the trainers cannot train with, a ``max_length`` beyond the
    target's position table. Its models then have the target's tokenizer and architecture (a fresh copy of it, or
    the recipe's start), so their scores compare with the target's token for token.

    Raises:
        UserInputError: one line naming the option or file and what to do.
    """
    from dpaudit.files.model_dirs import architecture_difference, read_config

    named = f"--shadow-trainer {recipe.trainer}"
    where = (
        f"--shadow-config {getattr(options, 'shadow_config', None)}"
        if getattr(options, "shadow_config", None)
        else named
    )
    fields = {f.name for f in dataclasses.fields(trainer.Config)}
    kind, model = source.kind, f"--model {source.path}"
    if "task" in fields:
        task = getattr(config, "task", None)
        if task != TASK_OF_KIND.get(kind):
            raise UserInputError(
                f"{where}: task {task!r}, but {model} is a {kind} ({source.architecture}); its shadow "
                f'models must be {kind}s too: set "task": "{TASK_OF_KIND.get(kind)}" or leave task out.'
            )
    elif kind != MASKED_LM:
        raise UserInputError(
            f"{named} trains masked LMs only, but {model} is a {kind} ({source.architecture}); name a "
            "trainer of that kind (--shadow-trainer edp-sgd), or bring shadows with --shadow-dirs."
        )
    target_config = read_config(source.model_dir, where=model)
    start = getattr(config, "init_from", None)
    if start:  # the recipe's own (public) start: it must be the target's architecture and tokenizer
        from dpaudit.scoring.architecture import transformers_layout
        from dpaudit.training.starting_point import resolve_start

        start_dir = resolve_start(start, option=f"{where}: init_from", layout=transformers_layout).model_dir
        difference = architecture_difference(read_config(start_dir, where=str(start_dir)), target_config)
        if difference is None and _vocabulary(start_dir) != _vocabulary(source.model_dir):
            difference = "its tokenizer differs"
        if difference is not None:
            raise UserInputError(
                f"{where}: init_from {start} is not {model}'s architecture and tokenizer ({difference}); "
                "shadow models would not score the target's tokens: start them from the public model "
                "the target was trained from, or leave init_from out (a fresh copy of the target's "
                "architecture and tokenizer)."
            )
        return
    if recipe.imitate is None:
        return
    if not (source.model_dir / "tokenizer.json").is_file():
        raise UserInputError(
            f"{model}: no tokenizer.json; its shadow models start from its architecture and tokenizer "
            "and the trainers read the fast tokenizer file: save it there "
            "(AutoTokenizer.from_pretrained(dir).save_pretrained(dir))."
        )
    if kind != CAUSAL_LM:
        from tokenizers import Tokenizer

        from dpaudit.training.tokenizer import special_token_ids

        try:
            special_token_ids(Tokenizer.from_file(str(source.model_dir / "tokenizer.json")))
        except ValueError as err:
            raise UserInputError(
                f"{model}: {err} {named} trains shadows of a BERT-family model with its WordPiece "
                "tokenizer ([PAD] [UNK] [CLS] [SEP] [MASK]); bring shadows with --shadow-dirs."
            ) from None
        except Exception as err:  # noqa: BLE001 - the Rust reader's own error type
            raise UserInputError(
                f"{model}: tokenizer.json is not a tokenizers file ({err}); save the model's fast "
                "tokenizer there (tokenizer.save_pretrained(dir))."
            ) from None
    if "task" not in fields and target_config.get("model_type", "bert") != "bert":
        raise UserInputError(
            f"{named} trains BERT masked LMs, but {model} is a {target_config.get('model_type')!r} model; "
            "name a torch trainer (--shadow-trainer edp-sgd), or bring shadows with --shadow-dirs."
        )
    positions, length = _positions(target_config), getattr(config, "max_length", None)
    if positions is not None and isinstance(length, int) and length > positions:
        raise UserInputError(
            f"{where}: max_length {length} exceeds {model}'s position table ({positions} positions); "
            f'set "max_length" to at most {positions}.'
        )


def _fresh_start_identity(model_dir: Path, seed: int) -> dict[str, Any]:
    """What a fresh start is, for a cache key: the imitated config.json and tokenizer files by content, and the seed."""
    from dpaudit.files.run_dirs import sha256_file
    from dpaudit.scoring.architecture import TOKENIZER_FILES

    files = ("config.json", *TOKENIZER_FILES)
    return {
        "fresh_copy_of": {name: sha256_file(model_dir / name) for name in files if (model_dir / name).is_file()},
        "seed": int(seed),
    }


def planned_steps(config: Any, train_size: int) -> int | None:
    """Optimizer steps a Config plans on ``train_size`` rows: ``total_steps`` for a trainer counted in steps
    (jax-bert), ``epochs x ceil(N / batch)`` for one counted in epochs (the torch trainers; N the declared
    ``dataset_size`` when set), None when neither applies."""
    names = {f.name for f in dataclasses.fields(config)}
    if "epochs" not in names and isinstance(getattr(config, "total_steps", None), int):
        return int(config.total_steps)
    epochs, batch = getattr(config, "epochs", None), getattr(config, "batch_size", None)
    if isinstance(epochs, int) and isinstance(batch, int) and batch > 0:
        size = getattr(config, "dataset_size", None) or train_size
        return epochs * math.ceil(size / batch)
    return None


def plan_config(
    trainer: Any,
    recipe: TargetRecipe,
    *,
    train_size: int,
    overrides: dict[str, Any] | None = None,
    fixed: dict[str, Any] | None = None,
) -> tuple[Any, list[str], int | None]:
    """The target's Config for a model of ``train_size`` rows, what differs from the target (notes), and its steps.

    Fields the Config does not have are dropped; a redacted ``noise_seed`` (a string) is dropped. On fewer
    rows than the target: a declared ``dataset_size`` is dropped (the model's own rows set q, so its expected
    batch stays the target's), a batch larger than the rows is halved to fit, and a trainer counted in epochs
    gets the epochs whose steps come closest to the target's. A target trained to a ``target_epsilon`` gives
    models calibrated to the same epsilon on their own data size (Shokri et al.'s shadows mimic the target's
    training). ``fixed`` (the target's label set) is set as given; ``overrides`` (Python API, tests) win over
    everything and are said in the notes.
    """
    fields = {f.name for f in dataclasses.fields(trainer.Config)}
    kw = {k: v for k, v in recipe.config.items() if k in fields}
    if "noise_seed" in kw and not (kw["noise_seed"] is None or isinstance(kw["noise_seed"], int)):
        del kw["noise_seed"]
    overrides = dict(overrides or {})
    notes = []
    same_size = recipe.rows is None or train_size == recipe.rows
    if kw.get("dataset_size") is not None and not same_size:
        notes.append(
            f"the target declared --dataset-size {kw['dataset_size']}; shadow models of {train_size} rows use "
            "their own row count (their expected batch stays the target's)."
        )
        kw["dataset_size"] = None
    batch = kw.get("batch_size")
    if isinstance(batch, int) and batch > train_size and not kw.get("batch_schedule"):
        new = max(1, train_size // 2)
        notes.append(f"the target's batch size {batch} exceeds a shadow's {train_size} rows; shadows use {new}.")
        kw["batch_size"] = batch = new
    if (
        not same_size
        and recipe.steps
        and "epochs" in fields
        and "epochs" not in overrides
        and isinstance(batch, int)
        and batch > 0
    ):
        per_epoch = math.ceil(train_size / batch)
        kw["epochs"] = max(1, round(recipe.steps / per_epoch))
    kw.update(fixed or {})
    kw.update(overrides)
    try:
        config = trainer.Config(**kw)
    except (TypeError, ValueError) as err:
        raise UserInputError(
            f"cannot build the {recipe.trainer} config for shadow models from {recipe.origin} ({err})."
        ) from None
    if overrides:
        notes.append(f"shadow models' Config overridden (Python API shadow_overrides): {overrides}.")
    return config, notes, planned_steps(config, train_size)


def _span(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def size_notes(recipe: TargetRecipe, what: str, rows: Sequence[int], steps: Sequence[int | None]) -> list[str]:
    """One note each when the models' row counts or optimizer steps differ from the target's (ranges over models)."""
    notes = []
    off_rows = [n for n in rows if recipe.rows is not None and n != recipe.rows]
    if off_rows:
        notes.append(
            f"{what} models train on {_span(off_rows)} rows, the target on {recipe.rows}: the pool they are "
            f"drawn from sets the count (see the shadow data); epochs are chosen so that the optimizer steps "
            "come closest to the target's."
        )
    off_steps = [s for s in steps if s is not None and recipe.steps is not None and s != recipe.steps]
    if off_steps:
        notes.append(
            f"{what} models run {_span(off_steps)} optimizer steps, the target ran {recipe.steps} (whole "
            "epochs of their rows at the target's batch size, or shadow_overrides)."
        )
    return notes


# -- the models to train ----------------------------------------------------------------------------


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


def write_shadow_data(
    path: Path,
    *,
    train: list[dict[str, Any]],
    heldout: list[dict[str, Any]],
    public: list[dict[str, Any]],
    labelled: bool,
    target_manifest: dict[str, Any],
    source: Any = None,
) -> Path:
    """An inject-format directory (verifiable by :func:`dpaudit.inject_dir.reader.load_inject_run`), no canaries.

    With ``source`` (the target's inject run), each train and held-out row found there is written as a reference
    (its file and line, and its text's sha256), never as the row: the private rows stay in the user's inject directory.
    The label set is the trainer's Config ``labels`` (the target's), never read from these rows.
    """
    from dpaudit.files.run_dirs import (
        build_manifest,
        file_hashes,
        staged_directory,
        write_jsonl,
        write_manifest,
    )
    from dpaudit.inject_dir.reader import (
        CANARIES,
        HELDOUT,
        OUTPUT_FILES,
        PUBLIC,
        ROW_SOURCE,
        SCHEMA,
        TRAIN,
    )

    with staged_directory(path, overwrite=True) as stage:
        for name, rows in ((TRAIN, train), (HELDOUT, heldout), (PUBLIC, public), (CANARIES, [])):
            write_jsonl(
                stage / name, rows if source is None or name in (PUBLIC, CANARIES) else _references(rows, source)
            )
        extra = {
            "corpus": {"labelled": labelled, "source": "dpaudit shadow split"},
            "mode": "shadow",
            "secret_space": target_manifest.get("secret_space"),
            "canaries": 0,
            "tokenizer": "public.jsonl is the target's public split (the same tokenizer as the target).",
        }
        if source is not None:
            extra[ROW_SOURCE] = str(Path(source.path).resolve())
        manifest = build_manifest(
            schema=SCHEMA,
            config={"shadow": True, "coin_flip": False},
            seed=None,
            inputs={},
            outputs=file_hashes(stage, OUTPUT_FILES),
            command=["dpaudit", "attack", "(shadow data)"],
            extra=extra,
        )
        write_manifest(stage, manifest)
    return path


def _references(rows: list[dict[str, Any]], source: Any) -> list[dict[str, Any]]:
    """Each row as a reference into ``source`` (:meth:`dpaudit.inject_dir.reader.InjectRun.reference_of`), its label kept only
    where it differs from the source row's; a row ``source`` does not hold is written as it is."""
    from dpaudit.inject_dir.reader import text_hash as sha256_of_text

    where = source.reference_of()
    out = []
    for row in rows:
        ref = where.get(row["text"])
        if ref is None:
            out.append(row)
            continue
        name, _, line = ref.rpartition(":")
        entry: dict[str, Any] = {"ref": ref, "sha256": sha256_of_text(row["text"])}
        if "label" in row and source.reference_rows(name)[int(line) - 1].get("label") != row["label"]:
            entry["label"] = row["label"]
        out.append(entry)
    return out


def _finished(model_dir: Path) -> bool:
    """A finished, verified cache entry: the model fleet's own test (one definition of a cache hit)."""
    from dpaudit.fleet.fleet import finished_run_dir

    return finished_run_dir(model_dir)


@dataclass
class ShadowPool:
    """The rows shadows are drawn from: texts and (for a classifier) labels as written in the data."""

    texts: list[str]
    labels: list[Any] | None


@dataclass(frozen=True)
class TrainedShadow:
    """A model an attack uses: its spec (membership over the pool), directory, and how it was trained."""

    spec: ShadowSpec
    path: Path
    cached: bool
    train_rows: int = 0
    steps: int | None = None
    batch_size: int | None = None
    utility: tuple[str, float] | None = None


#: The cache entry's folder of a fresh start (the target's architecture and tokenizer, new weights).
FRESH_START = "start"


@dataclass(frozen=True)
class _Planned:
    spec: ShadowSpec
    config: Any
    steps: int | None
    home: Path
    rows_in: list[dict[str, Any]]
    rows_out: list[dict[str, Any]]
    ident: dict[str, Any]
    fresh_from: Path | None = None  # the model whose fresh copy this one starts from (TargetRecipe.imitate)

    @property
    def model_dir(self) -> Path:
        return self.home / "model"


def announce(what: str, recipe: TargetRecipe, planned: Sequence[_Planned], cached: int) -> str:
    """The line said before a phase starts: how many models and how they train (their cost follows it, from
    :func:`dpaudit.common.cost_model.shadow_lines`)."""
    todo = len(planned) - cached
    rows = sorted({len(p.rows_in) for p in planned})
    steps = sorted({p.steps for p in planned if p.steps is not None})
    how = (
        f"{recipe.trainer}, {'/'.join(map(str, rows))} rows"
        + (f", {'/'.join(map(str, steps))} steps" if steps else "")
        + (f", {lora_words(recipe.lora)}, the base frozen" if recipe.lora is not None else "")
        + (f"; the target: {recipe.rows} rows" if recipe.rows else "")
        + (f", {recipe.steps} steps" if recipe.steps else "")
    )
    return f"{what} models: {len(planned)} ({how}): {cached} cached, {todo} to train."


def _fleet() -> Any:
    """:mod:`dpaudit.fleet.fleet` when it is installed, else None (models then train one after the other here)."""
    try:
        from dpaudit.fleet import fleet
    except ImportError:
        return None
    return fleet if hasattr(fleet, "run_fleet") else None


def train_shadows(
    *,
    source: Any,
    run: Any,
    pool: ShadowPool,
    specs: Sequence[ShadowSpec],
    attack: str,
    cache: Path,
    options: Any = None,
    max_minutes: float | None = None,
    overrides: dict[str, Any] | None = None,
    what: str = "shadow",
    recipe: TargetRecipe | None = None,
) -> tuple[list[TrainedShadow], list[str]]:
    """Train (or reuse from the cache) one model per spec, announced first; one progress line per model on stderr.

    With ``max_minutes``, no new model is started once that much time has passed and at least one
    model exists (cached models are always used). Returns the models that exist and notes (what differs
    from the target). ``options`` (:class:`dpaudit.attacks.registry.AttackOptions`) gives ``workers``,
    ``ray_address``, ``shadow_trainer``/``shadow_config`` and ``seed``.
    """
    from dpaudit.inject_dir.reader import HELDOUT, PUBLIC
    from dpaudit.training.api import load_trainer

    start = time.monotonic()
    recipe = recipe or target_recipe(source, attack, options=options, run=run)
    check_lora_base(attack, recipe)
    trainer = load_trainer(recipe.trainer)
    if getattr(source, "labels", None) is not None and "labels" in {f.name for f in dataclasses.fields(trainer.Config)}:
        # A classifier's shadows get the target's own label set (its config.json id2label, the public one), in its
        # class-id order: the scores of the target and of every shadow then index the same classes, and no shadow
        # reads a label set off its own rows (21 intents in train, 16 in public crashed the scoring).
        fixed = {"labels": list(source.labels)}
        if source.unknown_label in source.labels:  # (a bare model records none: the recipe's own value stays)
            fixed["unknown_label"] = source.unknown_label
    else:
        fixed = None
    public_split = run.split(PUBLIC)
    public = _rows(public_split.texts, public_split.labels, np.arange(len(public_split.texts)))
    public_hash = hashlib.sha256(json.dumps(public, sort_keys=True).encode()).hexdigest()
    held = run.split(HELDOUT)
    # A language model's pool has no labels, its held-out rows may (the built-in corpus's): it is evaluated on their
    # texts, as the target was (drawn from the audit universe instead, LiRA's causal shadows evaluated up to 512 other
    # rows, a third of a tiny shadow's CPU, and their accuracy was not the target's figure's).
    evaluation = _rows(held.texts, held.labels if pool.labels is not None else None, np.arange(len(held.texts)))
    notes: list[str] = []
    planned: list[_Planned] = []
    for spec in specs:
        idx_in, idx_out = np.flatnonzero(spec.member), np.flatnonzero(~spec.member)
        config, changed, steps = plan_config(trainer, recipe, train_size=idx_in.size, overrides=overrides, fixed=fixed)
        notes.extend(note for note in changed if note not in notes)
        rows_in, rows_out = _rows(pool.texts, pool.labels, idx_in), _rows(pool.texts, pool.labels, idx_out)
        trained = {r["text"] for r in rows_in}
        if evaluation and any(r["text"] not in trained for r in evaluation):
            # evaluated on the target's own held-out rows (those it did not train on): accuracies compare row for row
            rows_out = [r for r in evaluation if r["text"] not in trained]
        ident = {
            "trainer": recipe.trainer,
            "config": dataclasses.asdict(config),
            "seed": spec.seed,
            "train": hashlib.sha256(json.dumps(rows_in, sort_keys=True).encode()).hexdigest(),
            "heldout": hashlib.sha256(json.dumps(rows_out, sort_keys=True).encode()).hexdigest(),
            "public": public_hash,
        }
        if recipe.imitate is not None:  # a fresh copy of the target's architecture and tokenizer, by content and seed
            ident["start"] = _fresh_start_identity(Path(recipe.imitate), spec.seed)
        key = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:24]
        fresh_from = None
        if recipe.imitate is not None:
            fresh_from = Path(recipe.imitate)
            config = dataclasses.replace(config, init_from=str(cache / key / FRESH_START))
        planned.append(_Planned(spec, config, steps, cache / key, rows_in, rows_out, ident, fresh_from))
    notes.extend(size_notes(recipe, what, [len(p.rows_in) for p in planned], [p.steps for p in planned]))
    done = [_finished(p.model_dir) for p in planned]
    print(f"{attack}: " + announce(what, recipe, planned, sum(done)), file=sys.stderr, flush=True)
    if not all(done):
        from dpaudit.attacks import shadow_cost
        from dpaudit.common.cost_model import RATES, shadow_lines, training_work

        first = next(p for p, d in zip(planned, done) if not d)
        todo = len(done) - sum(done)
        config = dataclasses.asdict(first.config)
        lines = None
        one = training_work(recipe.trainer, config, first.steps)
        steps_cpu = todo * RATES[one.kind].per_unit * one.units  # their steps' CPU in the table, reference machine
        probing = shadow_cost.worth_probing(steps_cpu, getattr(source, "model_dir", None))
        if probing:
            private_dir(cache)
            lines = _probe_estimate(trainer, first, todo, public, pool, run, cache, options)
        # parallel workers only through the fleet: without it the models train one after the other here
        fleet_module = _fleet()
        parallel = fleet_module is not None and (
            (getattr(options, "workers", None) or 1) > 1 or getattr(options, "ray_address", None) is not None
        )
        if lines is None and not parallel and not probing:  # small models trained here: no process start-up each
            lines = shadow_cost.in_process_lines(
                recipe.trainer, config, first.steps, todo=todo, heldout_rows=len(first.rows_out)
            )
        if lines is None:  # the measured table, scaled to this machine and load
            # priced as the models that will train (their config and steps: a halved batch, other epochs); the
            # target's measured training stands for one only when they run its steps at its batch
            same = first.steps == recipe.steps and config.get("batch_size") == recipe.batch_size
            model_dir = getattr(source, "model_dir", None) if same else None
            at_once, start = 1, 0.0
            if parallel:  # (through the fleet: parallel says it is installed)
                at_once = getattr(options, "workers", None) or 1
                start = fleet_module.start_wall_seconds(at_once, todo, getattr(options, "ray_address", None))
            speed, share = shadow_cost.timed_speed() if at_once > 1 else (None, None)
            lines = shadow_lines(
                recipe.trainer, config, first.steps, todo=todo, model_dir=model_dir, workers=at_once,
                start_wall=start, speed=speed, share=share,
            )  # fmt: skip
        for line in lines:
            print(f"{attack}: {line}", file=sys.stderr, flush=True)
        private_dir(cache)
        print(
            f"{attack}: {what} models trained on rows of {run.path} are written to {cache} (mode 0700; their data "
            "folders hold references to those rows, not the rows): remove it when the audit is done.",
            file=sys.stderr,
            flush=True,
        )
    fresh = [p for p, finished in zip(planned, done) if not finished and not p.home.exists()]
    for p, finished in zip(planned, done):
        if not finished:
            _prepare(p, public, pool, run)
    labels = [f"{what} {p.spec.index + 1}/{len(planned)}" for p in planned]
    fleet = _fleet()
    if fleet is not None:
        workers = getattr(options, "workers", None)
        ray_address = getattr(options, "ray_address", None)
        parallel = (workers or 1) > 1 or ray_address is not None
        jobs = [
            fleet.FleetJob(
                trainer=recipe.trainer,
                config=dataclasses.asdict(p.config),
                data_dir=p.home / "data",
                out_dir=p.model_dir,
                seed=p.spec.seed,
                label=label,
            )
            for p, label in zip(planned, labels)
        ]
        fleet.run_fleet(
            jobs,
            workers=workers if parallel else 1,
            ray_address=ray_address,
            engine="auto" if parallel else "inline",
            progress=True,
            desc=f"{what} models",
            max_minutes=max_minutes,
        )
    else:  # the sequential path: one model after the other in this process
        for n, (p, finished, label) in enumerate(zip(planned, done, labels), start=1):
            if finished:
                print(f"{what} models {n}/{len(planned)}: cached ({label}: {p.model_dir})", file=sys.stderr, flush=True)
                continue
            if (
                max_minutes is not None
                and (time.monotonic() - start) / 60 >= max_minutes
                and any(_finished(q.model_dir) for q in planned)
            ):
                break
            t0 = time.monotonic()
            _train_one(trainer, p)
            print(
                f"{what} models {n}/{len(planned)}: trained in {time.monotonic() - t0:.1f} s ({label}: {p.model_dir})",
                file=sys.stderr,
                flush=True,
            )
    for p in fresh:  # prepared in this call but never started (--max-shadow-minutes): leave the cache as it was
        if not p.model_dir.exists():
            shutil.rmtree(p.home, ignore_errors=True)
    for p in planned:  # a finished model needs its fresh start no more (it is rebuilt, identical, if ever needed)
        if p.fresh_from is not None and _finished(p.model_dir):
            shutil.rmtree(p.home / FRESH_START, ignore_errors=True)
    out = [
        TrainedShadow(
            p.spec,
            p.model_dir,
            finished,
            train_rows=len(p.rows_in),
            steps=_ran_steps(p),
            batch_size=getattr(p.config, "batch_size", None),
            utility=_model_utility(p.model_dir),
        )
        for p, finished in zip(planned, done)
        if _finished(p.model_dir)
    ]
    stopped = len(out) < len(planned)
    if (len(out) < len(planned) or stopped) and max_minutes is not None:
        notes.append(
            f"--max-shadow-minutes {max_minutes:g}: stopped after {len(out)} of {len(planned)} {what} models; "
            f"{len(out)} used."
        )
    return out, notes


def _probe_estimate(
    trainer: Any,
    first: _Planned,
    todo: int,
    public: list[dict[str, Any]],
    pool: ShadowPool,
    run: Any,
    cache: Path,
    options: Any,
) -> list[str] | None:
    """The estimate measured on a probe of the first model's recipe (:mod:`dpaudit.attacks.shadow_cost`), or None when
    no probe can stand for the models (a fresh start per model, parallel workers, too few rows, a failed probe)."""
    from dpaudit.attacks import shadow_cost

    workers = getattr(options, "workers", None) or 1
    if first.fresh_from is not None or first.steps is None or workers > 1 or getattr(options, "ray_address", None):
        return None
    home = cache / f".probe-{first.home.name}"
    shadow_cost.remove_probe(home)
    try:
        config, need = shadow_cost.probe_config(first.config, len(first.rows_in))  # a Config may refuse it: no probe
        private_dir(home)
        write_shadow_data(
            home / "data",
            train=first.rows_in[:need],
            heldout=first.rows_out,
            public=public,
            labelled=pool.labels is not None,
            target_manifest=run.manifest,
            source=run,
        )
        probe = shadow_cost.probe_cost(
            trainer,
            config,
            home / "data",
            home / "model",
            seed=first.spec.seed,
            real=first.config,
            real_rows=len(first.rows_in),
        )
    except (UserInputError, ValueError, RuntimeError, OSError):
        probe = None
    finally:
        shadow_cost.remove_probe(home)
    if probe is None:
        return None
    return shadow_cost.probe_lines(probe, first.config, first.steps, todo=todo)


def _prepare(p: _Planned, public: list[dict[str, Any]], pool: ShadowPool, run: Any) -> None:
    """The cache entry's identity and data directory (kept when already written: an interrupted run resumes from its
    checkpoints; a leftover without any is removed, as this cache wrote it)."""
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.training.train_dir import CHECKPOINT_DIR

    if p.model_dir.is_dir() and not (p.model_dir / CHECKPOINT_DIR).is_dir():
        shutil.rmtree(p.model_dir)  # this cache entry's unfinished leftover with nothing to resume: start it over
    private_dir(p.home)
    (p.home / "identity.json").write_text(json.dumps(p.ident, indent=1, sort_keys=True, default=str))
    if p.fresh_from is not None and not (p.home / FRESH_START / "config.json").is_file():
        from dpaudit.scoring.architecture import write_fresh_start

        write_fresh_start(p.fresh_from, p.home / FRESH_START, seed=p.spec.seed)  # atomic: whole or absent
    try:
        load_inject_run(p.home / "data")
    except UserInputError:
        write_shadow_data(
            p.home / "data",
            train=p.rows_in,
            heldout=p.rows_out,
            public=public,
            labelled=pool.labels is not None,
            target_manifest=run.manifest,
            source=run,
        )


def _train_one(trainer: Any, p: _Planned) -> None:
    try:
        trainer.train(p.home / "data", p.model_dir, p.config, seed=p.spec.seed)
    except UserInputError:
        if not p.model_dir.exists():
            raise
        shutil.rmtree(p.model_dir)  # an unusable leftover (not resumable): start this one over
        trainer.train(p.home / "data", p.model_dir, p.config, seed=p.spec.seed)


def _ran_steps(p: _Planned) -> int | None:
    try:
        steps = json.loads((p.model_dir / "manifest.json").read_text(encoding="utf-8")).get("steps")
    except (OSError, ValueError):
        return p.steps
    return steps if isinstance(steps, int) else p.steps


def _model_utility(model_dir: Path) -> tuple[str, float] | None:
    try:
        manifest = json.loads((Path(model_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return heldout_utility(manifest)


# -- what the results say about the models ----------------------------------------------------------


def models_info(
    recipe: TargetRecipe | None,
    models: Sequence[TrainedShadow],
    *,
    role: str,
    data: str,
    notes: Sequence[str],
    origin: str | None = None,
) -> tuple[Any, list[str]]:
    """The :class:`~dpaudit.attacks.results.ShadowModelsInfo` of an attack's models, and its warnings: the
    differences from the target, and a mismatch of mean held-out accuracy beyond :data:`ACCURACY_MARGIN`."""
    from dpaudit.attacks.results import ShadowModel, ShadowModelsInfo
    from dpaudit.scoring.adapters import layout, lora_record

    values = [m.utility[1] for m in models if m.utility is not None]
    names = {m.utility[0] for m in models if m.utility is not None}
    target = recipe.utility if recipe is not None else None
    mean = float(np.mean(values)) if values else None
    mismatch = bool(target is not None and mean is not None and abs(mean - target[1]) > ACCURACY_MARGIN)
    warnings = list(notes)
    lora = recipe.lora if recipe is not None else None
    target_lora = layout(lora) if lora is not None else None
    layouts = [None if r is None else layout(r) for r in (lora_record(m.path) for m in models)]
    if lora is not None and any(x != target_lora for x in layouts):
        odd = sum(x != target_lora for x in layouts)
        warnings.append(
            f"{odd} of the {len(models)} {role} models are not {lora_words(lora)} like the target "
            "(privacy.json details.trained): the attack is calibrated on models unlike the target."
        )
    if mismatch and target is not None and mean is not None:  # (mismatch says both are)
        warnings.insert(
            0,
            f"the {role} models' mean {target[0]} {mean:.1%} differs from the target's {target[1]:.1%} by "
            f"{abs(mean - target[1]) * 100:.1f} points (more than {ACCURACY_MARGIN * 100:.0f}): the attack "
            f"is calibrated on models unlike the target, so its figures may understate (or misstate) "
            "what matched models would show.",
        )
    info = ShadowModelsInfo(
        role=role,
        origin=origin or (recipe.origin if recipe is not None else "--shadow-dirs"),
        trainer=None if recipe is None else recipe.trainer,
        data=data,
        utility=target[0] if target is not None else (next(iter(names)) if len(names) == 1 else None),
        target_heldout_accuracy=None if target is None else target[1],
        mean_heldout_accuracy=mean,
        margin=ACCURACY_MARGIN,
        mismatch=mismatch,
        target_rows=None if recipe is None else recipe.rows,
        target_steps=None if recipe is None else recipe.steps,
        target_batch_size=None if recipe is None else recipe.batch_size,
        models=tuple(
            ShadowModel(
                index=m.spec.index,
                path=str(m.path),
                train_rows=m.train_rows,
                steps=m.steps,
                batch_size=m.batch_size,
                heldout_accuracy=None if m.utility is None else m.utility[1],
                cached=m.cached,
                lora=x,
            )
            for m, x in zip(models, layouts)
        ),
        differences=tuple(notes),
        target_lora=target_lora,
        scored_as_adapters=bool(models) and _shared_base(tuple(str(m.path) for m in models))[0] is not None,
    )
    return info, warnings


# -- user-supplied shadow models (--shadow-dirs) ----------------------------------------------------


def shadow_dir_paths(options: Any) -> list[Path]:
    """The directories of ``--shadow-dirs`` (each value a model directory or a text file listing them, one per
    line), each checked to hold :data:`MEMBERS_FILE`."""
    paths: list[Path] = []
    for value in options.shadow_dirs or ():
        path = Path(value)
        if path.is_file():
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as err:
                raise UserInputError(
                    f"--shadow-dirs {value}: cannot read it ({err}); give model directories or a "
                    "file listing them, one per line."
                ) from None
            paths.extend(Path(line.strip()) for line in lines if line.strip() and not line.startswith("#"))
        else:
            paths.append(path)
    for path in paths:
        if not path.is_dir():
            raise UserInputError(
                f"--shadow-dirs: {path} is not a directory; give shadow model directories (each with "
                f"its {MEMBERS_FILE})."
            )
        if not (path / MEMBERS_FILE).is_file():
            raise UserInputError(
                f"--shadow-dirs: {path} has no {MEMBERS_FILE}; write the JSON list of the texts it "
                'trained on (or "sha256:<hex>" of each text\'s UTF-8) beside its weights.'
            )
        from dpaudit.scoring.source import resolve_model

        resolve_model(path, option="--shadow-dirs")  # weights, tokenizer, no pickle: refused before anything loads
        read_members(path)
    return paths


def read_members(path: Path) -> set[str]:
    """The entries of a shadow directory's :data:`MEMBERS_FILE` (texts or ``sha256:<hex>``)."""
    file = path / MEMBERS_FILE
    try:
        obj = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise UserInputError(
            f"{file}: not a readable JSON list ({err}); write the list of the texts the model trained on."
        ) from None
    if not isinstance(obj, list) or not all(isinstance(x, str) for x in obj):
        raise UserInputError(f'{file}: expected a JSON list of strings (texts, or "sha256:<hex>").')
    return set(obj)


def text_hash(text: str) -> str:
    """The ``sha256:<hex>`` entry of a text in a :data:`MEMBERS_FILE` (:func:`dpaudit.inject_dir.reader.text_hash`, prefixed)."""
    from dpaudit.inject_dir.reader import text_hash as sha256_of_text

    return "sha256:" + sha256_of_text(text)


def user_shadows(options: Any, pool: ShadowPool) -> list[TrainedShadow]:
    """The ``--shadow-dirs`` models, each with its membership over ``pool`` read from its :data:`MEMBERS_FILE`."""
    out = []
    for i, path in enumerate(shadow_dir_paths(options)):
        members = read_members(path)
        member = np.asarray([t in members or text_hash(t) in members for t in pool.texts], dtype=bool)
        model_dir = path
        utility = None
        if (path / "manifest.json").is_file():
            utility = _model_utility(path)
        out.append(
            TrainedShadow(
                ShadowSpec(index=i, member=member, seed=-1),
                model_dir,
                True,
                train_rows=int(member.sum()),
                utility=utility,
            )
        )
    return out


def check_same_tokenizer(target: Any, other: Any, *, option: str) -> None:
    """Refuse a reference model whose tokenizer differs from the target's (token-level scores would not compare)."""
    a, b = target.tokenizer, other.tokenizer
    if a.get_vocab() != b.get_vocab():
        raise UserInputError(
            f"{option} {other.source.path}: its tokenizer differs from the target's ({len(b.get_vocab())} "
            f"vs {len(a.get_vocab())} tokens); a reference model must use the target's tokenizer."
        )


@functools.lru_cache(maxsize=8)
def _shared_base(paths: tuple[str, ...]) -> tuple[Any, str]:
    """:func:`dpaudit.scoring.adapters.shared_base` of these models, once per run (it hashes the base's weights)."""
    from dpaudit.scoring.adapters import shared_base

    return shared_base([Path(p) for p in paths])


def load_scorers(context: Any, models: Sequence[TrainedShadow]) -> list[Any]:
    """Scorers for trained shadows, with the target's batch size and device: LoRA models over one base (a LoRA
    target's) as adapters over one copy of it in memory (:mod:`dpaudit.scoring.adapters`), others one by one."""
    from dpaudit.scoring import load, resolve_model

    base, _ = _shared_base(tuple(str(m.path) for m in models)) if models else (None, "")
    if base is not None:
        from dpaudit.scoring.adapters import load_adapter_scorers

        sources = [resolve_model(m.path, option="shadow model") for m in models]
        scorers = load_adapter_scorers(
            base, sources, batch_size=context.scorer.batch_size, device=context.scorer.device
        )
        check_same_tokenizer(context.scorer, scorers[0], option="shadow model")
        return scorers
    scorers = []
    for m in models:
        s = load(m.path, batch_size=context.scorer.batch_size, device=context.scorer.device, progress=False)
        check_same_tokenizer(context.scorer, s, option="shadow model")
        scorers.append(s)
    return scorers


# -- the public-part shadows of the shadow and rmia attacks (and the ref attack's pool) -------------


def public_pool(run: Any, label_set: Any = None) -> ShadowPool:
    """``public.jsonl``'s rows; with a classifier's ``label_set``, only those whose label the model has
    (a shadow trained like the target would refuse the others, and their loss is undefined)."""
    from dpaudit.inject_dir.reader import PUBLIC

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


def split_public(n_pool: int, target_rows: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint (reference part, population part) indices of the public pool, a seeded permutation of it.

    RMIA's population rows z must have trained no reference model (Zarifzadeh et al. 2024 compare the
    target's likelihood ratio on x with that on fresh population samples). The reference part gets twice
    the target's rows N (so each model trains on N rows, half of it), but at least half and at most three
    quarters of the pool; the population is the rest. Deterministic from the attack's public ``--seed``.
    """
    order = np.random.default_rng([seed, 0x504F50]).permutation(n_pool)
    size = n_pool // 2 if not target_rows else min(max(2 * target_rows, n_pool // 2), n_pool - n_pool // 4)
    return np.sort(order[:size]), np.sort(order[size:])


def public_specs(reference: np.ndarray, n_pool: int, n_in: int, k: int, seed: int) -> list[ShadowSpec]:
    """k models, each IN on an independent random ``n_in`` rows of the reference part (seeded)."""
    specs = []
    for i in range(k):
        rng = np.random.default_rng([seed, 0x5348, i])
        member = np.zeros(n_pool, bool)
        member[rng.permutation(reference)[:n_in]] = True
        specs.append(ShadowSpec(index=i, member=member, seed=seed * 1000 + i))
    return specs


@dataclass(frozen=True)
class PublicShadows:
    """The shadow/reference models of the ``shadow`` and ``rmia`` attacks and their public pool.

    Attributes:
        models, scorers: the models (membership over ``pool``) and their scorers.
        pool: ``public.jsonl``'s rows the model has labels for.
        reference, population: disjoint pool indices: the rows the models were drawn from, and the rows no
            model trained on (RMIA's population z).
        notes: what differs from the target (warnings).
        info: the :class:`~dpaudit.attacks.results.ShadowModelsInfo` (without role-specific wording).
        recipe: the target's recipe (None with ``--shadow-dirs``).
        data: how each model's rows were drawn, in words.
    """

    models: list[TrainedShadow]
    scorers: list[Any]
    pool: ShadowPool
    reference: np.ndarray
    population: np.ndarray
    notes: list[str]
    recipe: TargetRecipe | None
    data: str


def public_shadows(context: Any, attack: str, *, what: str = "shadow") -> PublicShadows:
    """Train or reuse the k public-part models (shared by ``shadow`` and ``rmia``), or read ``--shadow-dirs``."""
    cached = getattr(context, "_public_shadows", None)
    if cached is not None:
        return cached
    options = context.options
    pool = public_pool(context.data, context.scorer.source.label_set())
    if len(pool.texts) < 4:
        raise UserInputError(
            f"--attacks {attack}: public.jsonl has {len(pool.texts)} rows; shadow models need at least 4 "
            "(re-inject with a larger --public-size)."
        )
    if getattr(options, "shadow_dirs", None):
        models = user_shadows(options, pool)
        trained = np.zeros(len(pool.texts), bool)
        for m in models:
            trained |= m.spec.member
        population = np.flatnonzero(~trained)
        notes = (
            []
            if population.size
            else ["every public.jsonl row trained some --shadow-dirs model: RMIA's population rows are not fresh."]
        )
        if not population.size:
            population = np.arange(len(pool.texts))
        result = PublicShadows(
            models,
            load_scorers(context, models),
            pool,
            np.flatnonzero(trained),
            population,
            notes,
            None,
            f"--shadow-dirs ({len(models)} models; membership from their {MEMBERS_FILE})",
        )
        context._public_shadows = result
        return result
    recipe = target_recipe(context.scorer.source, attack, options=options, run=context.data)
    reference, population = split_public(len(pool.texts), recipe.rows, options.seed)
    n_in = min(recipe.rows or reference.size // 2, reference.size // 2)
    specs = public_specs(reference, len(pool.texts), n_in, options.shadow_models, options.seed)
    models, notes = train_shadows(
        source=context.scorer.source,
        run=context.data,
        pool=pool,
        specs=specs,
        attack=attack,
        cache=cache_root(options.shadow_cache),
        options=options,
        max_minutes=options.max_shadow_minutes,
        overrides=options.shadow_overrides,
        what=what,
        recipe=recipe,
    )
    if not models:
        raise UserInputError(
            f"--max-shadow-minutes {options.max_shadow_minutes:g}: no shadow model could be trained in time; raise it."
        )
    data = (
        f"public.jsonl ({len(pool.texts)} rows) split by --seed {options.seed} into a reference part of "
        f"{reference.size} rows and a disjoint population part of {population.size} rows (RMIA's z, never trained "
        f"on); each model trains on {n_in} random rows of the reference part"
        + (f" (the target trained on {recipe.rows})" if recipe.rows else "")
    )
    result = PublicShadows(models, load_scorers(context, models), pool, reference, population, notes, recipe, data)
    context._public_shadows = result
    return result
