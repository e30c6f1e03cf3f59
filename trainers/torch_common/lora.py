"""LoRA adapters through the ``peft`` library: the only trained parameters of a ``--peft lora`` run.

LoRA (Hu et al. 2022, "LoRA: Low-Rank Adaptation of Large Language Models") freezes the base model and trains,
beside each targeted weight ``W``, a rank-``r`` update ``(alpha / r) B A`` (``A`` random, ``B`` zero at the start,
so the adapted model starts as the base). Yu et al. 2022 ("Differentially private fine-tuning of language
models") showed that DP-SGD over those few parameters keeps most of the non-private utility: the noise grows
with the number of trained coordinates, the signal does not. Here the adapters are injected with
``peft.get_peft_model`` and the engines see the HF model inside it (``peft_model.base_model.model``, the
model's own class and parameter names, e.g. ``bert.encoder.layer.0.attention.self.query.lora_A.default.weight``):
only the parameters with ``requires_grad`` are clipped, noised and updated, and peft's ``lora_A`` / ``lora_B``
are ``nn.Linear`` modules, which the ghost clipping engine covers (docs/trainers.md, "LoRA adapters").

Classification also trains its head and the pooler (peft's ``modules_to_save``): the head is new for the
run's labels, and a masked-LM start has no trained pooler (transformers draws one at random); saving both
with the adapter makes the adapter directory, over the start, the model that was trained.

``--lora-modules-to-save`` names more modules trained in full beside the adapters (peft's ``modules_to_save``):
the token embeddings above all. A start whose tokenizer was trained on other text than the private rows' holds
the private rows' word pieces with embeddings public training barely moved, which no adapter on a linear layer
reaches (docs/trainers.md, "LoRA adapters"). A module whose weight the model ties to another one (GPT-2's ``wte``
and ``lm_head``, BERT's ``word_embeddings`` and ``cls.predictions.decoder``) has both wrapped and their trained
copies made one tensor again, as in the base, so the run trains, clips, merges and exports the model it says
(peft keeps a tie only for modules it knows by name, ``embed_tokens`` and ``lm_head``; a copy trained apart from
its tied twin would train one model and, reloaded with the config's tie, export another).

Export (:func:`dpaudit.trainers.torch_common.hf_export.save_hf`): ``model/`` holds the merged model
(``merge_and_unload`` of a copy: what every scorer reads) and ``model/adapter/`` the adapter alone in peft's
``save_pretrained`` layout (``PeftModel.from_pretrained(base, dir)`` reads it back).
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpaudit.common.errors import UserInputError

if TYPE_CHECKING:  # torch is imported where it is used: the trainers' Config imports this module for its checks
    import torch

__all__ = ["MISSING_PEFT", "LoraAdapters", "apply_lora", "peft_installed", "state_sha256"]

#: The one line a run with --peft lora prints when peft is not installed.
MISSING_PEFT = "--peft lora needs the peft library, which is not installed: pip install 'dpaudit[peft]'."

#: Classification modules trained beside the adapters (see the module docstring for why).
_HEAD_MODULES = ("classifier", "pre_classifier", "pooler")


def peft_installed() -> bool:
    """Whether ``import peft`` would find the library (nothing is imported)."""
    return importlib.util.find_spec("peft") is not None


def state_sha256(model: torch.nn.Module) -> str:
    """sha256 over the model's state (each tensor's name, dtype, shape and bytes, in name order): the base's
    identity whatever directory or seed it came from (tied tensors count under each name)."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class LoraAdapters:
    """A model with LoRA adapters injected: ``model`` is the HF model the engines train (only adapter and head
    parameters require a gradient), ``peft_model`` its peft wrapper (for export)."""

    peft_model: Any
    model: Any
    rank: int
    alpha: float
    targets: list[str]
    adapted: list[str]
    #: Modules trained in full beside the adapters: a classifier's head and pooler, ``--lora-modules-to-save``'s
    #: modules and their tied twins.
    trained_in_full: list[str]
    base_sha256: str

    def record(self, base: dict[str, Any]) -> dict[str, Any]:
        """``privacy.json``'s ``details.trained``: what the noise covers and what was frozen."""
        names = [n for n, p in self.model.named_parameters() if p.requires_grad]
        return {
            "parameters": "LoRA adapters (peft)"
            + (f" and modules trained in full ({', '.join(self.trained_in_full)})" if self.trained_in_full else ""),
            "peft": "lora",
            "rank": self.rank,
            "alpha": self.alpha,
            "scaling": self.alpha / self.rank,
            "targets": list(self.targets),
            "adapted_modules": list(self.adapted),
            "modules_trained_in_full": list(self.trained_in_full),
            "trained_tensors": len(names),
            "trained_parameters": int(sum(p.numel() for p in self.model.parameters() if p.requires_grad)),
            "frozen_parameters": int(sum(p.numel() for p in self.model.parameters() if not p.requires_grad)),
            "base": {**base, "state_sha256": self.base_sha256},
        }

    def merged(self) -> Any:
        """A merged copy of the model (``W + (alpha / r) B A``, the heads' trained copies in place), in the
        base's own class: the trained model as any reader of Hugging Face directories loads it."""
        return copy.deepcopy(self.peft_model).merge_and_unload()


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def apply_lora(
    model: torch.nn.Module,
    *,
    task: str,
    rank: int,
    alpha: float,
    targets: Sequence[str] | None,
    seed: int,
    base_name: str | None = None,
    modules_to_save: Sequence[str] = (),
) -> LoraAdapters:
    """Inject rank-``rank`` LoRA adapters into the modules named ``targets`` (last name component, e.g.
    ``query``; None: peft's default for the model type) and freeze everything else (classification: the head
    and pooler stay trained; ``modules_to_save``: these modules too, by last name component, every module of
    that name, a tied twin with them). The adapters' ``A`` is drawn from the public ``seed``; ``B`` starts at
    zero.

    Raises:
        UserInputError: peft is missing (:data:`MISSING_PEFT`), or a target names no module of the model, or
            the model type has no default targets, or a module to save names no module with parameters or is
            also a target.
    """
    try:
        import peft
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
    except ImportError:
        raise UserInputError(MISSING_PEFT) from None
    import torch
    from transformers.pytorch_utils import Conv1D

    model_type = str(getattr(model.config, "model_type", "?"))
    chosen = list(targets) if targets else list(defaults.get(model_type) or [])
    modules = dict(model.named_modules())
    adaptable = sorted({_leaf(n) for n, m in modules.items() if isinstance(m, torch.nn.Linear | Conv1D) and n})
    if not chosen:
        raise UserInputError(
            f"--lora-targets: peft has no default target modules for model type {model_type}; name its Linear "
            f"modules to adapt, e.g. --lora-targets {','.join(adaptable[:2])} (it has {', '.join(adaptable)})."
        )
    missing = [t for t in chosen if t not in adaptable]
    if missing:
        raise UserInputError(
            f"--lora-targets {','.join(chosen)}: no Linear module of this {model_type} model is named "
            f"{', '.join(missing)}; choose among {', '.join(adaptable)}."
        )
    adapted = [n for n, m in modules.items() if n and _leaf(n) in chosen and isinstance(m, torch.nn.Linear | Conv1D)]
    conv1d = any(isinstance(modules[n], Conv1D) for n in adapted)  # GPT-2 stores its weights transposed
    heads = [h for h in _HEAD_MODULES if task == "classify" and any(_leaf(n) == h for n in modules)]
    saved = _modules_to_save(model, modules_to_save, chosen, model_type)
    twins = _tied_twins(model, saved)
    base_sha256 = state_sha256(model)
    lora_config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=chosen,
        lora_dropout=0.0,  # training runs with dropout off (trainers.torch_common.model says why)
        bias="none",
        fan_in_fan_out=conv1d,
        modules_to_save=[*heads, *saved, *twins] or None,
    )
    torch.manual_seed(seed)  # lora_A's init: public
    with warnings.catch_warnings():
        # peft asks transformers a deprecated question, and warns of a tied module it will not tie: tied here
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")
        peft_model = peft.get_peft_model(model, lora_config)
    peft_model.peft_config["default"].base_model_name_or_path = base_name
    inner = peft_model.base_model.model
    _retie(inner)
    inner.eval()
    return LoraAdapters(
        peft_model=peft_model,
        model=inner,
        rank=rank,
        alpha=float(alpha),
        targets=sorted(chosen),
        adapted=adapted,
        trained_in_full=heads + sorted({*saved, *twins}),
        base_sha256=base_sha256,
    )


def _modules_to_save(
    model: torch.nn.Module, names: Sequence[str], targets: Sequence[str], model_type: str
) -> list[str]:
    """``names`` checked against the model: each the last name component of a module holding parameters of its own,
    and none an adapted target (a module is adapted or trained in full, not both)."""
    holders = sorted({_leaf(n) for n, m in model.named_modules() if n and any(True for _ in m.parameters(False))})
    unknown = [n for n in names if n not in holders]
    if unknown:
        raise UserInputError(
            f"--lora-modules-to-save {','.join(names)}: no module of this {model_type} model with parameters is "
            f"named {', '.join(unknown)}; choose among {', '.join(holders)}."
        )
    both = sorted(set(names) & set(targets))
    if both:
        raise UserInputError(
            f"--lora-modules-to-save {','.join(names)}: {', '.join(both)} is also in --lora-targets; a module is "
            "adapted or trained in full, not both: remove it from one of them."
        )
    return list(names)


def _tied_twins(model: torch.nn.Module, saved: Sequence[str]) -> list[str]:
    """The full names of the modules without children of their own, not named in ``saved``, that share a parameter
    with a module named there (a language model's output embeddings, tied to its input embeddings): wrapped with
    them so the tie can be kept (:func:`_retie`)."""
    owners: dict[int, list[str]] = {}
    for name, module in model.named_modules():
        for param in module.parameters(recurse=False):
            owners.setdefault(id(param), []).append(name)
    modules = dict(model.named_modules())
    twins = {
        other
        for names in owners.values()
        if any(n and _leaf(n) in saved for n in names)
        for other in names
        if other and _leaf(other) not in saved and not any(True for _ in modules[other].children())
    }
    return sorted(twins)


def _retie(model: torch.nn.Module) -> None:
    """Keep the base's ties between the modules peft trains in full (each wrapped with its own copy): copies of one
    tied parameter become one trained tensor (its gradient the sum over its uses, as in full training), and a copy
    of a parameter also held by a module that is not trained in full is the frozen original again (a BERT decoder's
    bias, tied to its prediction head's), so what trains, merges and exports is the model the config's ties load."""
    from peft.utils import ModulesToSaveWrapper

    wrapped = {n: m for n, m in model.named_modules() if isinstance(m, ModulesToSaveWrapper)}
    inside = tuple(f"{n}.modules_to_save." for n in wrapped)
    originals = {f"{n}.original_module" for n in wrapped}
    owners: dict[int, set[str]] = {}
    for name, module in model.named_modules():
        if not name.startswith(inside):
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), set()).add(name)
    trained: dict[int, torch.nn.Parameter] = {}
    for wrapper in wrapped.values():
        copy = wrapper.modules_to_save["default"]
        for param_name, original in list(wrapper.original_module.named_parameters(recurse=False)):
            holders = owners.get(id(original), set())
            if len(holders) < 2:
                continue  # not tied
            if holders - originals:
                setattr(copy, param_name, original)  # tied to a module not trained in full: frozen, as it was
            else:
                setattr(copy, param_name, trained.setdefault(id(original), getattr(copy, param_name)))
