"""The model side: build or load a BERT-family or causal Hugging Face model, and its per-example losses.

Any BERT-family model in Hugging Face layout works as a start (``--init-from DIR``, formerly ``--model``:
``AutoModelForMaskedLM`` or ``AutoModelForSequenceClassification``, its ``tokenizer.json``; a dpaudit run's
``model/``); without one, a random init of a
``--preset`` architecture (:mod:`dpaudit.training.presets`) with a WordPiece tokenizer trained on
``public.jsonl`` only (:mod:`dpaudit.training.tokenizer`).

Training runs with dropout off (``model.eval()``): per-example gradients under ``torch.func.vmap``
need a deterministic function of (params, example), and every mode is trained the same way so that
their times and utilities compare. Attention is the "eager" implementation: SDPA has no vmap batching
rule on CPU in torch 2.13 (it falls back to a Python loop over examples).

:func:`per_example_losses` is the one loss of every task: a vector of per-example losses, so the
micro-batch path sums it and the per-example path vmaps it over single examples.

``--task clm``: a GPT-2-shaped ``GPT2LMHeadModel`` of a :data:`~dpaudit.training.presets.CAUSAL_PRESETS`
preset or a Llama-style ``LlamaForCausalLM`` (RMSNorm, rotary positions, SwiGLU) of a
:data:`~dpaudit.training.presets.LLAMA_PRESETS` preset (``bos`` = [CLS], ``eos`` = [SEP], ``pad`` = [PAD], the output
layer tied to the word embeddings), or any ``AutoModelForCausalLM`` directory. Its loss is the mean next-token negative log-likelihood over each example's
tokens after the first (Radford et al. 2019); the attention mask is the causal one alone, built from the
public width: with right padding a real token attends only to real tokens before it, so its loss is the
same at any padding width and the padding rows get an exactly zero output gradient (nothing reads them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from dpaudit.common.errors import UserInputError
from dpaudit.scoring.architecture import _quiet_transformers  # its load report of missing and unexpected keys
from dpaudit.scoring.source import CAUSAL_LM, architecture_kind
from dpaudit.training.presets import CAUSAL_PRESETS, LLAMA_PRESETS, PRESETS
from dpaudit.training.tokenizer import special_token_ids

_LAYER = re.compile(r"^(.*?\.(?:layers?|h)\.\d+)\.")  # BERT's encoder.layer.i, Llama's layers.i, GPT-2's h.i


#: Special tokens by which a tokenizer of another family announces itself (RoBERTa's, GPT-2's and Llama's BPE).
_OTHER_FAMILY_TOKENS = ("<s>", "</s>", "<|endoftext|>", "<pad>", "<mask>")


def special_ids(tokenizer: Tokenizer, *, where: str) -> dict[str, int]:
    """Ids of [PAD] [UNK] [CLS] [SEP] [MASK] (:func:`dpaudit.training.tokenizer.special_token_ids`); a tokenizer
    without one is the user's input error, named by ``where``: one of another family (a BPE whose specials are
    ``<s>`` / ``</s>``, RoBERTa's or GPT-2's) is named as such, with the starts that work."""
    try:
        return special_token_ids(tokenizer)
    except ValueError as err:  # names the missing token
        other = [t for t in _OTHER_FAMILY_TOKENS if tokenizer.token_to_id(t) is not None]
        if other:
            raise UserInputError(
                f"{where}: its tokenizer is of another family than BERT's WordPiece (it has {', '.join(other)}, "
                "not [CLS] [SEP] [MASK]); --task classify and mlm read BERT's special tokens: start from a BERT-family "
                "model with a WordPiece tokenizer.json (bert-base-uncased, MiniLM), or train a causal LM with --task clm."
            ) from None
        raise UserInputError(f"{where}: {err} Use a BERT WordPiece tokenizer.") from None


def build_model(
    task: str,
    *,
    preset: str,
    vocab_size: int,
    max_length: int,
    label_names: list[str] | None,
    seed: int,
    specials: dict[str, int] | None = None,
    zero_rows: Sequence[int] = (),
) -> Any:
    """A randomly initialized BERT of ``preset`` (init seeded by the public ``--seed``); for ``clm`` a
    GPT-2 of the causal ``preset`` whose bos/eos/pad are ``specials``' [CLS]/[SEP]/[PAD].

    ``zero_rows``: word-embedding rows that start at zero, the declared new tokens of new-token canaries, as in
    jax-bert (:func:`trainers.jax_bert.model.init_params` says why: a random start per canary token is score
    spread unrelated to membership)."""
    model = _fresh_model(
        task,
        preset=preset,
        vocab_size=vocab_size,
        max_length=max_length,
        label_names=label_names,
        seed=seed,
        specials=specials,
    )
    if len(zero_rows):
        with torch.no_grad():
            model.get_input_embeddings().weight[torch.as_tensor(list(zero_rows), dtype=torch.long)] = 0.0
    return model


def _fresh_model(
    task: str,
    *,
    preset: str,
    vocab_size: int,
    max_length: int,
    label_names: list[str] | None,
    seed: int,
    specials: dict[str, int] | None,
) -> Any:
    if task == "clm":
        return build_causal_model(
            preset=preset, vocab_size=vocab_size, max_length=max_length, specials=specials or {}, seed=seed
        )
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

    kwargs: dict[str, Any] = dict(
        PRESETS[preset], vocab_size=vocab_size, max_position_embeddings=max(128, max_length), pad_token_id=0
    )
    if task == "classify":
        kwargs.update(
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={n: i for i, n in enumerate(label_names)},
        )
    config = BertConfig(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = (BertForSequenceClassification if task == "classify" else BertForMaskedLM)(config)
    return model.eval()


def build_causal_model(*, preset: str, vocab_size: int, max_length: int, specials: dict[str, int], seed: int) -> Any:
    """A randomly initialized ``GPT2LMHeadModel`` of the causal ``preset`` (docs/scoring.md, convention 1): the word
    embeddings tied to the output layer, dropout 0, eager attention, init seeded by the public ``--seed``; a
    ``LlamaForCausalLM`` for a Llama-style preset (:func:`build_llama_model`)."""
    if preset in LLAMA_PRESETS:
        return build_llama_model(
            preset=preset, vocab_size=vocab_size, max_length=max_length, specials=specials, seed=seed
        )
    from transformers import GPT2Config, GPT2LMHeadModel

    shape = dict(CAUSAL_PRESETS[preset])
    shape["n_positions"] = max(shape["n_positions"], max_length)
    config = GPT2Config(
        **shape,
        vocab_size=vocab_size,
        bos_token_id=specials.get("cls"),
        eos_token_id=specials.get("sep"),
        pad_token_id=specials.get("pad"),
        tie_word_embeddings=True,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config).eval()


def build_llama_model(*, preset: str, vocab_size: int, max_length: int, specials: dict[str, int], seed: int) -> Any:
    """A randomly initialized Llama-style ``LlamaForCausalLM`` of ``preset`` (Touvron et al. 2023: pre-RMSNorm, rotary
    positions, a SwiGLU feed-forward, no biases): the output layer tied to the word embeddings as in GPT-2 (and
    Llama 3.2's small models), no dropout, eager attention, init seeded by the public ``--seed``. Its norms are
    ``LlamaRMSNorm``, which the ghost engine covers (docs/trainers.md, "edp-sgd")."""
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = dict(LLAMA_PRESETS[preset])
    shape["max_position_embeddings"] = max(shape["max_position_embeddings"], max_length)
    config = LlamaConfig(
        **shape,
        vocab_size=vocab_size,
        bos_token_id=specials.get("cls"),
        eos_token_id=specials.get("sep"),
        pad_token_id=specials.get("pad"),
        tie_word_embeddings=True,
        attention_dropout=0.0,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def _first_line(err: BaseException) -> str:
    """An exception's message cut to its first line (library errors span several)."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def load_model(
    path: Path, task: str, *, label_names: list[str] | None, seed: int, option: str = "--init-from"
) -> tuple[Any, Tokenizer, str | None]:
    """A Hugging Face BERT directory (masked LM or sequence classifier) as the run's model, and its tokenizer.

    ``path`` passed the one model directory check first (:func:`dpaudit.training.starting_point.resolve_start`:
    safetensors only, weights that fit its config.json, a tokenizer within the embedding table, finite values).

    ``mlm`` loads it as a masked LM (from a classifier, the encoder with a fresh LM head from the public
    ``--seed``, its decoder tied to the word embeddings).
    ``classify`` reuses its encoder; its classification head only when it is a sequence classifier whose
    ``id2label`` is this run's label set in the same order, else a fresh head initialized from the
    public ``--seed`` (a head of other labels, or of the same labels in another order, would predict the
    wrong classes). A config without ``id2label`` (an encoder such as MiniLM's ``BertModel``, or a classifier that
    names no labels) gives a fresh head likewise. ``mlm`` from an encoder without a masked-LM head (``BertModel``
    weights only): a fresh head (``cls.predictions``) from the public ``--seed``, its decoder tied to the word
    embeddings. Returns the model, the tokenizer and the head's origin: ``"reused"`` or ``"fresh"`` (None for
    ``clm``). ``option`` names the directory in errors (``--init-from DIR``). transformers' load report is
    silenced: the head's origin is what it would say, and the trainer says it in one line.
    """
    if not (path / "config.json").is_file():
        raise UserInputError(f"{option}: no config.json; pass a Hugging Face model directory.")
    if not (path / "tokenizer.json").is_file():
        raise UserInputError(f"{option}: no tokenizer.json; the trainer needs the model's fast tokenizer file.")
    try:
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as err:  # the Rust reader's own error type  # noqa: BLE001
        raise UserInputError(
            f"{option}: tokenizer.json is not a tokenizers file ({_first_line(err)}); "
            "save the model's fast tokenizer there (tokenizer.save_pretrained(dir))."
        ) from None
    if task == "clm" and not _is_causal(path / "config.json"):
        raise UserInputError(
            f"{option}: config.json names no causal LM architecture (*ForCausalLM or *LMHeadModel); "
            "--task clm starts from a causal language model."
        )
    if task != "clm" and _is_causal(path / "config.json"):
        # A causal LM's sequence classifier (GPT2ForSequenceClassification) pools the last non-padding token with its own
        # head ("score") and needs a pad token id: not the BERT-style head, masks and tokenizer this trainer trains.
        raise UserInputError(
            f"{option}: config.json names a causal LM ({_architecture(path / 'config.json')}); --task "
            f"{task} starts from a BERT-family masked LM or sequence classifier: pass one, or train "
            "this causal LM with --task clm."
        )
    torch.manual_seed(seed)
    try:
        with _quiet_transformers():
            model, head = _from_pretrained(path, task, label_names=label_names, seed=seed)
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise UserInputError(f"{option}: cannot load it with transformers ({_first_line(err)}).") from None
    return model.eval(), tokenizer, head


def _from_pretrained(path: Path, task: str, *, label_names: list[str] | None, seed: int) -> tuple[Any, str | None]:
    """The model of ``task`` from ``path`` and its head's origin (:func:`load_model`)."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

    head = None
    if task == "classify":
        head = "reused" if _same_labels(path / "config.json", label_names) else "fresh"
        model = AutoModelForSequenceClassification.from_pretrained(
            str(path),
            num_labels=len(label_names),
            id2label=dict(enumerate(label_names)),
            label2id={n: i for i, n in enumerate(label_names)},
            attn_implementation="eager",
            ignore_mismatched_sizes=True,
            use_safetensors=True,
            local_files_only=True,
        )
        if head == "fresh":  # a head of the same shape but other labels would be kept by the load: redrawn
            torch.manual_seed(seed)
            classifier = model.classifier
            with torch.no_grad():
                classifier.weight.normal_(0.0, float(model.config.initializer_range))
                classifier.bias.zero_()
    else:
        auto = AutoModelForCausalLM if task == "clm" else AutoModelForMaskedLM
        model, info = auto.from_pretrained(
            str(path),
            attn_implementation="eager",
            use_safetensors=True,
            local_files_only=True,
            output_loading_info=True,
        )
        if task == "mlm":  # an encoder without the masked-LM head: the head transformers drew from --seed
            missing = [k for k in info.get("missing_keys", ()) if k.startswith("cls.")]
            head = "fresh" if missing else "reused"
    return model, head


def _is_causal(config_path: Path) -> bool:
    """Whether ``config.json`` names a causal LM (``*ForCausalLM``, ``*LMHeadModel``), as the scorer detects it."""
    try:
        architectures = json.loads(config_path.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False
    return any(architecture_kind(str(a)) == CAUSAL_LM for a in architectures)


def _architecture(config_path: Path) -> str:
    """The first ``architectures`` name of ``config.json`` (for messages)."""
    try:
        return str((json.loads(config_path.read_text(encoding="utf-8")).get("architectures") or ["?"])[0])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, IndexError):
        return "?"


def _same_labels(config_path: Path, label_names: list[str] | None) -> bool:
    """Whether ``config.json`` is a sequence classifier's whose ``id2label`` is ``label_names`` in order."""
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        architectures = config.get("architectures") or []
        id2label = {int(k): str(v) for k, v in (config.get("id2label") or {}).items()}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return False
    classifier = any(str(a).endswith("ForSequenceClassification") for a in architectures)
    return (
        classifier and label_names is not None and [id2label.get(i) for i in range(len(id2label))] == list(label_names)
    )


def layer_groups(names: list[str]) -> tuple[list[str], list[int]]:
    """Group parameters by layer for per-layer clipping: ``encoder.layer.i`` (GPT-2: ``transformer.h.i``), else
    the first two module names (``bert.embeddings``, ``bert.pooler``, ``classifier``, ``cls.predictions``;
    ``transformer.wte``, ``transformer.wpe``, ``transformer.ln_f``).

    Returns (group names, group index of each parameter).
    """
    group_names: list[str] = []
    index: dict[str, int] = {}
    of_param = []
    for name in names:
        match = _LAYER.match(name)
        module = name.rsplit(".", 1)[0] if "." in name else name  # drop "weight" / "bias"
        group = match.group(1) if match else ".".join(module.split(".")[:2])
        if group not in index:
            index[group] = len(group_names)
            group_names.append(group)
        of_param.append(index[group])
    return group_names, of_param


def _encoder(model: Any) -> Any:
    return getattr(model, model.base_model_prefix)


def per_example_losses(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss [B], correct predictions [B]) of a classification, MLM or causal-LM batch.

    Classification: cross-entropy of the label. MLM: mean cross-entropy over the example's masked
    positions, with the output layer applied to the gathered hidden states of those positions only (times the
    row's ``draw_weight`` 1 / K under ``--mask-draws`` K, so an example's K rows sum to its mean).
    CLM (a batch with ``next_weights``): :func:`causal_losses`.
    """
    if "next_weights" in batch:
        return causal_losses(model, batch)
    if "labels" in batch:
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["mask4"]).logits
        loss = F.cross_entropy(logits, batch["labels"], reduction="none")
        return loss, (logits.argmax(-1) == batch["labels"]).float()
    hidden = _encoder(model)(input_ids=batch["input_ids"], attention_mask=batch["mask4"]).last_hidden_state
    positions = batch["positions"]
    gathered = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    scores = model.cls(gathered)
    ce = F.cross_entropy(scores.flatten(0, 1), batch["targets"].flatten(), reduction="none").view(positions.shape)
    weights = batch["weights"]
    count = weights.sum(1).clamp(min=1.0)
    correct = ((scores.argmax(-1) == batch["targets"]).float() * weights).sum(1)
    loss, correct = (ce * weights).sum(1) / count, correct / count
    if "draw_weight" in batch:  # --mask-draws K: each of an example's K maskings weighs 1 / K
        return loss * batch["draw_weight"], correct * batch["draw_weight"]
    return loss, correct


def causal_mask(width: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> torch.Tensor:
    """The additive causal mask [1, 1, T, T] (0 on and below the diagonal, finfo.min above): a function of the
    public width only. A prepared 4D mask reaches the attention as it is (transformers' mask builder, whose 2D
    path calls data-dependent ops that ``torch.func.vmap`` rejects, is skipped)."""
    return torch.full((width, width), torch.finfo(dtype).min, dtype=dtype, device=device).triu(1)[None, None]


def causal_losses(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean next-token NLL [B], next-token accuracy [B]) of a causal-LM batch: position t predicts token
    t + 1, over the positions ``next_weights[:, 1:]`` marks (each example's real tokens after the first).

    Only the example's own tokens enter its loss (causal attention, right padding), so one example's
    gradient depends on that example alone, whatever its batch.
    """
    ids = batch["input_ids"]
    logits = model(input_ids=ids, attention_mask=causal_mask(ids.shape[1], device=ids.device)).logits[:, :-1]
    targets, weights = ids[:, 1:], batch["next_weights"][:, 1:]
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
    count = weights.sum(1).clamp(min=1.0)
    correct = ((logits.argmax(-1) == targets).float() * weights).sum(1)
    return (ce * weights).sum(1) / count, correct / count
