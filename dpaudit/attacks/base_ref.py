"""The target's base as a reference model, with no training: which model it is, and the checks before any work.

A fine-tuned model starts from a public one. dpaudit records that start in ``privacy.json`` (``init_from``: the path as
given and the sha256 of its weights, :attr:`dpaudit.claim.PrivacyRecord.init_from`), so the start, which never saw
the private rows, is a reference model the attacks get for free: two forward passes per text, no shadow training
(Ilic et al. 2026, EZ-MIA, use the pretrained base the same way; Mireshghallah et al. 2022 a reference model trained
on public data). A user names another with ``--reference-model DIR``.

:func:`resolve_base` says which model is the base (``--reference-model``, else ``init_from`` when its weights still
hash to what the run recorded) or why there is none; :func:`base_problem` refuses, in one line and before any model
is loaded, a base whose tokenizer differs from the target's (per-token scores of two tokenizations do not compare),
of another model kind, or, for a classifier, with other labels. :class:`BaseReferenceAttack` is the membership attack
that scores the target against its base: its check runs those, and :func:`base_scorer` loads the base once per run.

References:
  Ilic, Stanojevic & Cvejoski 2026, "Powerful Training-Free Membership Inference Against Autoregressive Language
    Models" (EZ-MIA; arXiv 2601.12104): the pretrained base as the reference model.
  Mireshghallah, Goyal, Uniyal, Berg-Kirkpatrick & Shokri 2022, "Quantifying Privacy Risks of Masked Language Models
    Using Membership Inference Attacks" (the likelihood ratio against a reference model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dpaudit.attacks.mia import MembershipAttack, precheck
from dpaudit.common.errors import UserInputError

#: Keys of ``tokenizer.json`` that change how a text is split into ids (padding and truncation do not).
_TOKENIZER_KEYS = ("added_tokens", "normalizer", "pre_tokenizer", "model", "post_processor", "decoder")
#: Tokenizer files compared byte for byte when a directory has no ``tokenizer.json``.
_VOCAB_FILES = ("vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model")


@dataclass(frozen=True, kw_only=True)
class Base:
    """The reference model of the base attacks.

    Attributes:
        source: the checked :class:`dpaudit.scoring.ModelSource` (None: no usable base; ``why`` says so).
        described: where it comes from, in words (``--reference-model DIR``, ``the public start ... (privacy.json
            init_from)``).
        option: the option a refusal names (``--reference-model`` or ``--init-from``).
        why: why there is no base (None when there is one).
    """

    source: Any = None
    described: str = ""
    option: str = "--reference-model"
    why: str | None = None


def _start_path(init_from: Any) -> Path | None:
    path = init_from.get("path") if isinstance(init_from, dict) else None
    return Path(path) if isinstance(path, str) and path else None


def _signature(path: Path | None) -> tuple[tuple[str, int, int], ...]:
    """(name, size, mtime) of the files of a model directory (and of its ``model/``): a changed directory is resolved
    again."""
    if path is None or not path.is_dir():
        return ()
    files = [p for folder in (path, path / "model") if folder.is_dir() for p in folder.iterdir() if p.is_file()]
    return tuple(sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files))


#: resolve_base's answers in this process (the run asks three times: default selection, check, scoring).
_RESOLVED: dict[Any, Base] = {}


def resolve_base(options: Any, source: Any) -> Base:
    """The target's base: ``--reference-model`` when given, else the public start ``privacy.json`` records
    (``init_from``), used only when its weights still hash to what the run recorded.

    Raises:
        UserInputError: a ``--reference-model`` that is not a model directory (one line, from the model check).
    """
    given = getattr(options, "reference_model", None)
    init_from = getattr(getattr(source, "privacy", None), "init_from", None)
    candidate = Path(given) if given else _start_path(init_from)
    key = (given, str(source.model_dir), json.dumps(init_from, sort_keys=True, default=str), _signature(candidate))
    if key not in _RESOLVED:
        _RESOLVED.clear()  # one target at a time
        _RESOLVED[key] = _resolve(given, source)
    return _RESOLVED[key]


def _resolve(given: str | None, source: Any) -> Base:
    from dpaudit.scoring import resolve_model
    from dpaudit.scoring.adapters import changed_weights

    if given:
        return Base(
            source=resolve_model(given, option="--reference-model"),
            described=f"--reference-model {given}",
            option="--reference-model",
        )
    record = getattr(source, "privacy", None)
    init_from = getattr(record, "init_from", None)
    start = _start_path(init_from)
    if start is None:
        why = (
            "the target records no public start (privacy.json has no init_from: a model trained from scratch)"
            if record is not None
            else "the target is a model trained elsewhere (no privacy.json says where it started)"
        )
        return Base(why=why, option="--reference-model")
    if not start.is_dir() and not start.is_absolute() and (Path(source.path).parent / start.name).is_dir():
        start = Path(source.path).parent / start.name  # a relative path given elsewhere: the target's sibling
    if not start.is_dir():
        return Base(why=f"its public start {start} (privacy.json init_from) is not found here", option="--init-from")
    try:
        checked = resolve_model(start, option="--init-from")
    except UserInputError as err:  # a run directory changed since (its manifest no longer verifies), a damaged model
        return Base(why=f"its public start cannot be used ({err})", option="--init-from")
    changed = changed_weights(
        checked.model_dir, init_from.get("weights_sha256") if isinstance(init_from, dict) else None
    )
    if changed is not None:
        return Base(
            why=f"its public start {start} (privacy.json init_from) changed since the run started from it ({changed})",
            option="--init-from",
        )
    return Base(
        source=checked,
        described=f"the target's public start {start} (privacy.json init_from; weights sha256 verified)",
        option="--init-from",
    )


def _tokenizer_identity(model_dir: Path) -> tuple[str, Any] | None:
    """What decides how ``model_dir``'s tokenizer turns a text into ids: ``tokenizer.json``'s splitting parts, or
    the bytes of its vocabulary files; None when it has neither."""
    path = model_dir / "tokenizer.json"
    if path.is_file():
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return ("unreadable", str(path))
        return ("tokenizer.json", {k: obj.get(k) for k in _TOKENIZER_KEYS} if isinstance(obj, dict) else obj)
    files = {name: (model_dir / name).read_bytes() for name in _VOCAB_FILES if (model_dir / name).is_file()}
    return ("files", files) if files else None


def _vocab_size(identity: tuple[str, Any] | None) -> int | None:
    if identity is None or identity[0] != "tokenizer.json":
        return None
    model = identity[1].get("model") or {}
    vocab = model.get("vocab") if isinstance(model, dict) else None
    added = {t.get("content") for t in identity[1].get("added_tokens") or () if isinstance(t, dict)}
    size = len(vocab) if isinstance(vocab, (dict, list)) else None
    return None if size is None else size + len(added - (set(vocab) if isinstance(vocab, dict) else set()))


def tokenizer_difference(target_dir: Path, base_dir: Path) -> str | None:
    """How the base's tokenizer differs from the target's, in words; None when they split every text alike (the same
    ``tokenizer.json`` vocabulary, added tokens, normalizer, pre-tokenizer, post-processor and decoder, or the same
    vocabulary files)."""
    a, b = _tokenizer_identity(Path(target_dir)), _tokenizer_identity(Path(base_dir))
    if a == b:
        return None
    sizes = _vocab_size(a), _vocab_size(b)
    if a is not None and b is not None and a[0] == b[0] == "tokenizer.json":
        parts = [k for k in _TOKENIZER_KEYS if a[1].get(k) != b[1].get(k)]
        what = ", ".join("vocabulary" if k == "model" else k.replace("_", " ") for k in parts)
        counts = f" ({sizes[1]} vs {sizes[0]} tokens)" if sizes[0] != sizes[1] and None not in sizes else ""
        return f"its tokenizer differs from the target's ({what}{counts})"
    return "its tokenizer files differ from the target's"


def base_problem(base: Base, source: Any) -> str | None:
    """Why ``base`` cannot be the target's reference, in words (None when it can): no base, another model kind, a
    classifier with other labels, another tokenizer."""
    if base.source is None:
        return f"no base to compare the target with: {base.why}"
    other = base.source
    where = f"{base.option} {other.path}"
    if other.kind != source.kind:
        return f"{where} is a {other.kind}, the target a {source.kind}: the base must be a model of the same kind"
    if source.labels is not None and tuple(other.labels or ()) != tuple(source.labels):
        return (
            f"{where} has other labels ({', '.join((other.labels or ())[:4])}...) than the target "
            f"({', '.join(source.labels[:4])}...): a loss ratio needs the same classes"
        )
    differs = tokenizer_difference(source.model_dir, other.model_dir)
    if differs is not None:
        return f"{where}: {differs}; a base must use the target's tokenizer"
    return None


def check_base(name: str, options: Any, source: Any) -> Base:
    """The base of ``--attacks name``, checked before any model is loaded.

    Raises:
        UserInputError: one line: no base known (pass ``--reference-model DIR``), or one that cannot be compared
            with the target (:func:`base_problem`).
    """
    base = resolve_base(options, source)
    problem = base_problem(base, source)
    if problem is None:
        return base
    fix = (
        "pass --reference-model DIR (the model the target was fine-tuned from, with its tokenizer)"
        if base.source is None
        else "pass --reference-model DIR with the target's tokenizer, or drop this attack"
    )
    raise UserInputError(f"--attacks {name}: {problem}; {fix}.")


class BaseReferenceAttack(MembershipAttack):
    """A membership attack that scores the target against its base (:func:`resolve_base`), with no training.

    It joins the default attacks whenever the target's base is known (``default_when_able``), and its check refuses, before
    any model is loaded, a base it cannot compare with (:func:`check_base`)."""

    default_when_able: ClassVar[bool] = True

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """A measurable ``--fpr``, then a base with the target's kind, labels and tokenizer."""
        precheck(options, run)
        check_base(cls.name, options, source)


def base_scorer(context: Any) -> tuple[Any, str]:
    """The base's scorer (loaded once per run, with the target's batch size and device) and its description.

    Raises:
        UserInputError: the loaded tokenizers split the run's texts differently (a last check on what the files
            compared equal).
    """
    cached = getattr(context, "_base_scorer", None)
    if cached is not None:
        return cached
    from dpaudit.scoring import load

    base = check_base("base", context.options, context.scorer.source)
    scorer = load(base.source, batch_size=context.scorer.batch_size, device=context.scorer.device, progress=False)
    a, b = context.scorer.tokenizer, scorer.tokenizer
    if a.get_vocab() != b.get_vocab():
        raise UserInputError(
            f"{base.option} {base.source.path}: its tokenizer differs from the target's ({len(b.get_vocab())} vs "
            f"{len(a.get_vocab())} tokens); a base must use the target's tokenizer."
        )
    context._base_scorer = (scorer, base.described)
    return context._base_scorer
