"""LoRA models scored as adapters over one base in memory: many shadow models, one copy of the base's weights.

A ``--peft lora`` run (docs/trainers.md, "LoRA adapters") trains rank-r adapters over a frozen public base and writes
both the merged model (``model/``) and the adapter alone (``model/adapter/``, peft's layout); its ``privacy.json``
names the adapters and the base (``details.trained``: rank, alpha, targets, the base's path, weight file sha256 and
state sha256). The shadow and reference models of a LoRA target are trained like it, so they are LoRA adapters over the
same base. Loading each one's merged model holds k copies of the base (k x 500 MB for a GPT-2 small, LiRA's 16-64
shadows in tens of GB); here the base is loaded once, each model's adapter (a few MB) is added to it under its own name
(``peft.PeftModel.load_adapter``), and each model's scorer switches to its adapter before it scores
(``set_adapter``): the same function as the merged model, ``W x + (alpha / r) B A x`` instead of ``(W + (alpha / r)
B A) x`` (equal to float rounding; tests/attacks/test_lora_shadows.py compares them).

:func:`lora_record` reads what a run trained; :func:`shared_base` says whether a set of runs are adapters over one
base that is here and unchanged (else the caller loads each merged model, which is always right);
:func:`load_adapter_scorers` builds the scorers.

References:
  Hu, Shen, Wallis et al. 2022, "LoRA: Low-Rank Adaptation of Large Language Models".
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM, ModelSource

__all__ = ["SharedBase", "load_adapter_scorers", "lora_record", "shared_base"]

#: The adapter folder of a ``--peft lora`` run's ``model/``.
ADAPTER_DIR = "adapter"


def lora_record(run_dir: str | Path) -> dict[str, Any] | None:
    """``privacy.json``'s ``details.trained`` of a ``--peft lora`` train run directory, or None (not a LoRA run, no
    ``privacy.json``, or no ``model/adapter/``)."""
    path = Path(run_dir)
    try:
        record = json.loads((path / "privacy.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    trained = (record.get("details") or {}).get("trained") if isinstance(record, dict) else None
    if not isinstance(trained, dict) or trained.get("peft") != "lora":
        return None
    if not (path / "model" / ADAPTER_DIR / "adapter_config.json").is_file():
        return None
    return trained


def layout(trained: dict[str, Any]) -> dict[str, Any]:
    """What makes two LoRA runs the same kind of model: rank, alpha, adapted modules, the modules trained in full and
    the base's state sha256 (``details.trained``'s keys)."""
    base = trained.get("base") or {}
    return {
        "rank": trained.get("rank"),
        "alpha": trained.get("alpha"),
        "targets": sorted(trained.get("targets") or []),
        "adapted_modules": sorted(trained.get("adapted_modules") or []),
        "modules_trained_in_full": sorted(trained.get("modules_trained_in_full") or []),
        "base_state_sha256": base.get("state_sha256"),
    }


@dataclass(frozen=True)
class SharedBase:
    """The one base a set of LoRA runs adapt: its directory (checked) and the state sha256 they record."""

    source: ModelSource
    state_sha256: str


def changed_weights(model_dir: Path, recorded: Any) -> str | None:
    """The first weight file of ``model_dir`` whose sha256 differs now from what ``privacy.json`` recorded (or that is
    gone), in words; None when every one matches. A run's public start (``init_from``) and a LoRA run's base
    (``details.trained.base``) are checked by it alike."""
    from dpaudit.files.run_dirs import sha256_file

    if not isinstance(recorded, dict) or not recorded:
        return "privacy.json records no weight hash"
    for name, digest in sorted(recorded.items()):
        path = model_dir / name
        if not path.is_file():
            return f"{name} is gone"
        if sha256_file(path) != digest:
            return f"{name} no longer has the sha256 privacy.json recorded"
    return None


def _base_dir(given: str, run_dir: Path) -> Path | None:
    path = Path(given)
    if path.is_dir():
        return path
    if not path.is_absolute():  # a relative path given elsewhere: try it beside the run (a sibling folder)
        for parent in run_dir.parents:
            if (parent / path).is_dir():
                return parent / path
    return None


def shared_base(run_dirs: Sequence[str | Path]) -> tuple[SharedBase | None, str]:
    """The base every run in ``run_dirs`` adapts, when all are LoRA runs over the same base (the same state sha256)
    whose weight files are here and still hash to what the runs recorded, and peft is installed to add their adapters
    to it; else None and why, in words."""
    from dpaudit.common.errors import UserInputError
    from dpaudit.scoring import resolve_model

    records = [lora_record(p) for p in run_dirs]
    if not run_dirs or any(r is None for r in records):
        return None, "not every model is a --peft lora run with its adapter"
    if importlib.util.find_spec("peft") is None:  # the merged models need no peft to be scored
        return None, "peft is not installed here: each model's merged weights are loaded"
    states = {(r or {}).get("base", {}).get("state_sha256") for r in records}
    if len(states) != 1 or None in states:
        return None, "the models adapt different bases"
    base = records[0].get("base", {}) if records[0] else {}
    given = base.get("init_from")
    if not isinstance(given, str):
        return None, "the base is a random initialization (no --init-from): each model's merged weights are loaded"
    found = _base_dir(given, Path(run_dirs[0]))
    if found is None:
        return None, f"their base {given} is not found here"
    try:
        source = resolve_model(found, option="--init-from")
    except UserInputError as err:
        return None, f"their base {given} cannot be used ({err})"
    changed = changed_weights(source.model_dir, base.get("weights_sha256"))
    if changed is not None:
        return None, f"their base {given} changed since they trained ({changed})"
    return SharedBase(source=source, state_sha256=str(states.pop())), ""


def _activating(function: Callable[..., Any]) -> Callable[..., Any]:
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._activate_adapter()
        return function(self, *args, **kwargs)

    call.__name__ = function.__name__
    call.__doc__ = function.__doc__
    return call


def _adapter_class(scorer_class: type) -> type:
    """``scorer_class`` whose every public method first switches the shared model to the scorer's adapter."""
    methods = {}
    for name in dir(scorer_class):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(scorer_class, name)
        if isinstance(attr, (property, staticmethod, classmethod)) or not callable(attr):
            continue
        methods[name] = _activating(attr)

    def _activate_adapter(self: Any) -> None:
        state = self._adapter_state
        if state["active"] != self._adapter_name:
            state["peft"].set_adapter(self._adapter_name)
            state["active"] = self._adapter_name

    methods["_activate_adapter"] = _activate_adapter
    return type(f"Adapter{scorer_class.__name__}", (scorer_class,), methods)


def load_adapter_scorers(
    base: SharedBase,
    sources: Sequence[ModelSource],
    *,
    batch_size: int,
    device: str | None = None,
    progress: bool = False,
) -> list[Any]:
    """One scorer per LoRA run in ``sources`` (checked train run directories over ``base``): the base loaded once,
    each run's adapter added to it by name; each scorer activates its own adapter before any of its methods."""
    import peft
    import torch
    import transformers

    from dpaudit.scoring.scorer import Scorer
    from dpaudit.scoring.threads import apply_torch_threads

    first = sources[0]
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    apply_torch_threads()
    hf_logging = transformers.utils.logging
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(first.model_dir, local_files_only=True)
        if first.kind == CLASSIFIER:  # the runs' head and pooler come from each adapter (trained in full)
            labels = list(first.labels or ())
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                base.source.model_dir,
                num_labels=len(labels),
                id2label=dict(enumerate(labels)),
                label2id={n: i for i, n in enumerate(labels)},
                ignore_mismatched_sizes=True,
                local_files_only=True,
                use_safetensors=True,
            )
        else:
            auto = {MASKED_LM: transformers.AutoModelForMaskedLM, CAUSAL_LM: transformers.AutoModelForCausalLM}
            model = auto[first.kind].from_pretrained(base.source.model_dir, local_files_only=True, use_safetensors=True)
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    names = [f"model{i}" for i in range(len(sources))]
    with warnings.catch_warnings():  # nothing for the user to do about either warning
        # peft asks transformers a deprecated question, and warns that the embeddings an adapter trained in full
        # (and their tied output layer, saved beside them with equal values) are loaded as two tensors: the same
        # function for scoring (docs/trainers.md, "LoRA adapters")
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        wrapped = peft.PeftModel.from_pretrained(
            model, str(first.model_dir / ADAPTER_DIR), adapter_name=names[0], is_trainable=False
        )
        for name, source in zip(names[1:], sources[1:]):
            wrapped.load_adapter(str(source.model_dir / ADAPTER_DIR), adapter_name=name, is_trainable=False)
    wrapped.to(device).eval()
    inner = wrapped.base_model.model  # the model's own class, LoRA layers inside: what a Scorer reads
    state = {"peft": wrapped, "active": names[0]}
    scorer_class: type = Scorer
    if first.kind == CAUSAL_LM:
        from dpaudit.scoring.causal import CausalScorer

        scorer_class = CausalScorer
    adapted = _adapter_class(scorer_class)
    scorers = []
    for name, source in zip(names, sources):
        scorer = adapted(source, inner, tokenizer, batch_size=batch_size, device=device, progress=progress)
        scorer._adapter_state, scorer._adapter_name = state, name
        scorers.append(scorer)
    return scorers
