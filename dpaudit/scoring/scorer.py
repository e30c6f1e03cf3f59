"""The Scorer: batched forward passes of a Hugging Face masked LM or classifier, numpy out.

The only module of the core that imports torch and transformers (when a model is loaded, never at
``import dpaudit``). Attacks see numpy arrays only.

Speed: HF's ``BertForMaskedLM`` applies the output layer (hidden -> vocabulary) at every position,
which dominates a CPU forward pass. Attacks need logits at the masked positions only, so the
encoder (``model.<base_model_prefix>``) runs on the batch and the head (the model's one other
child, ``cls`` for BERT, ``lm_head`` for RoBERTa) runs on the gathered hidden states. A model whose
head is split over several modules falls back to the full forward pass (same numbers, slower).

References:
  Carlini et al. 2019, "The Secret Sharer" (exposure: all secret positions masked at once here).
  Anil et al. 2021, "Large-Scale Differentially Private BERT", Figure 7 (masked-secret reconstruction).
  Salazar, Liang, Nguyen & Kirchhoff 2020, "Masked Language Model Scoring" (pseudo-log-likelihood).
  Panda, Tang, Nasr, Choquette-Choo & Mittal 2025, "Privacy Auditing of Large Language Models" (new-token canaries).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.common.progress import progress_bar
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM, ModelSource
from dpaudit.scoring.targets import (
    CanaryLike,
    SpaceLike,
    alphabet_token_ids,
    check_secret_tokens,
    locate_secrets,
    locate_spans,
)

#: Masking rate of the fixed, seeded masking used for per-example MLM losses (BERT's rate).
EXAMPLE_MASK_PROB = 0.15
#: Most examples' texts are short; longer ones are truncated to this many tokens for MIA scores.
EXAMPLE_MAX_LENGTH = 128


@dataclass(frozen=True)
class ExampleFeatures:
    """Per-example attack features (higher-level MIAs fit a classifier on :meth:`matrix`).

    Attributes:
        loss: [n] mean negative log-likelihood (masked tokens for an MLM, the label for a classifier).
        entropy: [n] mean entropy of the predicted distribution (nats).
        top_probs: [n, k] sorted (descending) probabilities: for an MLM the top-k vocabulary
            probabilities averaged over masked positions; for a classifier all class probabilities.
    """

    loss: np.ndarray
    entropy: np.ndarray
    top_probs: np.ndarray

    def matrix(self) -> np.ndarray:
        """[n, k + 2] feature matrix: sorted probabilities, loss, entropy."""
        return np.column_stack([self.top_probs, self.loss, self.entropy])


@dataclass(frozen=True)
class TokenPll:
    """Per text: ``ids`` (its token ids, specials included), ``positions`` (the non-special positions scored) and
    ``log_probs`` (log p(x_t | the other tokens) at each of them, that one position masked)."""

    ids: list[list[int]]
    positions: list[list[int]]
    log_probs: list[np.ndarray]


@dataclass(frozen=True)
class VocabFill:
    """Top-1 fill of a masked span over the whole vocabulary (phrase canaries)."""

    text: str
    token_ids: list[int]
    true_log_prob: float


def _segment_mean(values: Any, owner: Any, n: int) -> np.ndarray:
    """Mean of ``values`` rows per owner index (the masked positions of each example), as numpy."""
    import torch

    sums = torch.zeros((n,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device).index_add_(
        0, owner, values
    )
    counts = torch.bincount(owner, minlength=n).to(values.dtype).reshape((-1,) + (1,) * (values.dim() - 1))
    return (sums / counts).cpu().numpy()


def _text_seed(seed: int, text: str) -> np.random.Generator:
    """A generator that depends on the text and the seed only: a text is masked the same way
    whichever batch, order or data set it is scored in, so member and non-member scores compare."""
    digest = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng([seed, digest])


class Scorer:
    """A loaded model and tokenizer. Build with :func:`dpaudit.scoring.load`.

    Attributes:
        source: where the model came from and what kind it is.
        batch_size: examples per forward pass.
        device: ``"cuda"`` when a GPU is present, else ``"cpu"``.
    """

    def __init__(
        self, source: ModelSource, model: Any, tokenizer: Any, *, batch_size: int, device: str, progress: bool = True
    ) -> None:
        import torch

        self.source = source
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.device = device
        self.progress = progress
        self._torch = torch
        # transformers uses a huge sentinel for "no limit" in model_max_length: keep only real limits.
        limits = [
            x
            for x in (
                getattr(model.config, "max_position_embeddings", None),
                getattr(tokenizer, "model_max_length", None),
            )
            if isinstance(x, int) and 0 < x < 1_000_000
        ]
        self.max_length = min(limits, default=512)
        self._encoder, self._head = self._split_head()

    # -- model plumbing ------------------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self.source.kind

    def _split_head(self) -> tuple[Any, Any]:
        if self.kind != MASKED_LM:
            return None, None
        prefix = getattr(self.model, "base_model_prefix", "")
        encoder = getattr(self.model, prefix, None) if prefix else None
        others = [m for name, m in self.model.named_children() if name != prefix and any(True for _ in m.parameters())]
        if encoder is None or len(others) != 1:
            return None, None
        return encoder, others[0]

    def _require(self, kind: str, what: str) -> None:
        if self.kind != kind:
            raise UserInputError(
                f"{what} needs a {kind} model, but {self.source.path} is a {self.kind} "
                f"({self.source.architecture}); pass a {kind} model directory."
            )

    def _batches(self, n: int, desc: str) -> Iterator[slice]:
        starts = range(0, n, self.batch_size)
        for start in progress_bar(starts, desc=desc, unit="batch", enabled=bool(self.progress)):
            yield slice(start, min(start + self.batch_size, n))

    def _pad(self, rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        torch = self._torch
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = 1
        return ids.to(self.device), mask.to(self.device)

    def _masked_logits(self, rows: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]) -> Any:
        """float64 logits [total masked positions, vocab], rows' positions masked and flattened in order."""
        torch = self._torch
        ids, mask = self._pad(rows)
        r = torch.tensor([i for i, ps in enumerate(positions) for _ in ps], dtype=torch.long, device=self.device)
        c = torch.tensor([p for ps in positions for p in ps], dtype=torch.long, device=self.device)
        ids[r, c] = self.tokenizer.mask_token_id
        with torch.inference_mode():
            if self._encoder is not None:
                hidden = self._encoder(input_ids=ids, attention_mask=mask).last_hidden_state[r, c]
                logits = self._head(hidden)
            else:
                logits = self.model(input_ids=ids, attention_mask=mask).logits[r, c]
        return logits.double()

    # -- canaries ------------------------------------------------------------------------------

    def masked_log_probs(self, canaries: Sequence[CanaryLike], space: SpaceLike, *, reveal: int = 0) -> np.ndarray:
        """Log-probabilities over the space's alphabet at each masked secret position.

        All secret tokens after the first ``reveal`` are masked at once (``reveal`` > 0 is the
        partial-reveal view: the first tokens are shown). The log-softmax is taken over the
        alphabet's tokens (the distribution over the space, not over the vocabulary), in float64.

        Returns:
            [n canaries, positions - reveal, len(alphabet)] float64.

        Raises:
            UserInputError: naming a canary whose secret does not tokenize as the space assumes,
                or if the model is not a masked LM.
        """
        self._require(MASKED_LM, "masked-secret scoring")
        if not 0 <= reveal < space.length:
            raise UserInputError(f"--reveal {reveal}: must be from 0 to {space.length - 1} for {space.format} secrets.")
        located = locate_secrets(self.tokenizer, canaries, space, max_length=self.max_length)
        alphabet = alphabet_token_ids(self.tokenizer, space)
        check_secret_tokens(self.tokenizer, canaries, located, space, alphabet)
        torch = self._torch
        cols = torch.as_tensor(alphabet, device=self.device)
        m = space.length - reveal
        out = np.empty((len(located), m, len(alphabet)), dtype=np.float64)
        for sl in self._batches(len(located), "scoring canaries"):
            batch = located[sl]
            logits = self._masked_logits([t.input_ids for t in batch], [t.secret_positions[reveal:] for t in batch])
            out[sl] = torch.log_softmax(logits[:, cols], dim=-1).reshape(len(batch), m, -1).cpu().numpy()
        return out

    def vocab_fills(self, canaries: Sequence[CanaryLike]) -> list[VocabFill]:
        """Top-1 fill of each canary's masked secret over the whole vocabulary (phrase secrets).

        Every secret token is masked at once; the fill is the argmax at each masked position,
        decoded; ``true_log_prob`` is the summed log-probability of the true secret tokens.
        """
        self._require(MASKED_LM, "masked-secret scoring")
        located = locate_spans(self.tokenizer, canaries, max_length=self.max_length)
        torch = self._torch
        fills: list[VocabFill] = []
        for sl in self._batches(len(located), "scoring canaries"):
            batch = located[sl]
            logits = self._masked_logits([t.input_ids for t in batch], [t.secret_positions for t in batch])
            log_probs = torch.log_softmax(logits, dim=-1)
            true = torch.tensor([t.input_ids[p] for t in batch for p in t.secret_positions], device=self.device)
            true_lp = log_probs.gather(1, true[:, None])[:, 0].cpu().numpy()
            best = log_probs.argmax(dim=-1).cpu().numpy()
            k = 0
            for t in batch:
                n = len(t.secret_positions)
                ids = best[k : k + n].tolist()
                text = self.tokenizer.decode(ids).strip()
                text = text[2:] if text.startswith("##") else text  # a fill may start with a WordPiece continuation
                fills.append(VocabFill(text=text, token_ids=ids, true_log_prob=float(true_lp[k : k + n].sum())))
                k += n
        return fills

    def pseudo_log_likelihoods(
        self, canaries: Sequence[CanaryLike], *, whole: bool = False, within: Sequence[int] | None = None
    ) -> np.ndarray:
        """Masked pseudo-log-likelihood of each canary's secret (or, ``whole``, of the whole canary).

        The sum, over the secret's token positions (every non-special position with ``whole``), of the
        log-probability of the true token with that ONE position masked and every other token shown
        (Salazar et al. 2020; Wang & Cho 2019). For a new-token canary the other new tokens are shown too:
        a member's were trained together, a non-member's never (Panda et al. 2025).

        Args:
            canaries: canary records (prefix, secret, suffix).
            whole: score every token of the canary, not only its secret's.
            within: token ids to normalize over: the log-softmax is taken over these ids only (e.g. the
                declared new tokens), so the score compares the true token with the other candidates
                instead of with all words; every scored token must be among them. None: the vocabulary.

        Returns:
            [n] float64, higher = more likely (more member-like).

        Raises:
            UserInputError: naming a canary whose secret shares a token with its context or is too long,
                or whose token is not among ``within``; or the model is not a masked LM.
        """
        self._require(MASKED_LM, "pseudo-log-likelihood scoring")
        torch = self._torch
        located = locate_spans(self.tokenizer, canaries, max_length=self.max_length)
        special = set(self.tokenizer.all_special_ids)
        rows: list[tuple[int, list[int], int]] = []  # (canary, input ids, the one masked position)
        for i, t in enumerate(located):
            positions = [p for p, x in enumerate(t.input_ids) if x not in special] if whole else t.secret_positions
            rows.extend((i, t.input_ids, p) for p in positions)
        cols = None
        if within is not None:
            cols = torch.as_tensor(sorted(set(int(x) for x in within)), dtype=torch.long, device=self.device)
            column = {int(x): j for j, x in enumerate(cols.tolist())}
            missing = next((i for i, ids, p in rows if ids[p] not in column), None)
            if missing is not None:
                raise UserInputError(
                    f"canary {canaries[missing].id}: a scored token is not among the candidate tokens; "
                    "score it over the whole vocabulary."
                )
        out = np.zeros(len(located), dtype=np.float64)
        for sl in self._batches(len(rows), "pseudo-log-likelihoods"):
            batch = rows[sl]
            logits = self._masked_logits([ids for _, ids, _ in batch], [[p] for _, _, p in batch])
            true = [ids[p] for _, ids, p in batch]
            if cols is not None:
                logits, true = logits[:, cols], [column[x] for x in true]
            log_probs = torch.log_softmax(logits, dim=-1)
            picked = log_probs.gather(1, torch.tensor(true, device=self.device)[:, None])[:, 0].cpu().numpy()
            np.add.at(out, [i for i, _, _ in batch], picked)
        return out

    def text_pseudo_log_likelihoods(self, texts: Sequence[str], *, max_length: int | None = None) -> TokenPll:
        """Per text, the pseudo-log-likelihood of each of its tokens (Salazar et al. 2020): log p(x_t | every other
        token), with that one position masked, at every non-special position of the text cut to ``max_length``
        tokens (default :data:`EXAMPLE_MAX_LENGTH`); their sum is the text's PLL. One forward pass per token.

        Returns:
            :class:`TokenPll`: each text's token ids, the positions scored and their log-probabilities (float64).
        """
        self._require(MASKED_LM, "pseudo-log-likelihood scoring")
        torch = self._torch
        limit = min(self.max_length, max_length or EXAMPLE_MAX_LENGTH)
        rows = [list(r) for r in self.tokenizer(list(texts), truncation=True, max_length=limit)["input_ids"]]
        special = set(self.tokenizer.all_special_ids)
        positions = [[p for p, x in enumerate(r) if x not in special] for r in rows]
        jobs = [(i, p) for i, ps in enumerate(positions) for p in ps]  # text by text, position by position
        picked: list[np.ndarray] = []
        for sl in self._batches(len(jobs), "pseudo-log-likelihoods"):
            batch = jobs[sl]
            logits = self._masked_logits([rows[i] for i, _ in batch], [[p] for _, p in batch])
            true = torch.tensor([rows[i][p] for i, p in batch], device=self.device)
            picked.append(torch.log_softmax(logits, dim=-1).gather(1, true[:, None])[:, 0].cpu().numpy())
        flat = np.concatenate(picked).astype(np.float64) if picked else np.zeros(0, dtype=np.float64)
        bounds = np.cumsum([len(ps) for ps in positions])[:-1]
        out = np.split(flat, bounds) if positions else []  # in jobs' order: one array per text
        return TokenPll(ids=rows, positions=positions, log_probs=out)

    # -- examples (membership inference) -------------------------------------------------------

    def _example_masks(self, rows: Sequence[Sequence[int]], texts: Sequence[str], seed: int) -> list[list[int]]:
        special = set(self.tokenizer.all_special_ids)
        out: list[list[int]] = []
        for ids, text in zip(rows, texts):
            candidates = np.asarray([i for i, t in enumerate(ids) if t not in special], dtype=np.int64)
            if candidates.size == 0:
                out.append([])
                continue
            rng = _text_seed(seed, text)
            chosen = candidates[rng.random(candidates.size) < EXAMPLE_MASK_PROB]
            if chosen.size == 0:
                chosen = candidates[[int(rng.integers(candidates.size))]]
            out.append(chosen.tolist())
        return out

    def _mlm_stats(self, texts: Sequence[str], seed: int, top_k: int) -> ExampleFeatures:
        torch = self._torch
        n = len(texts)
        loss, entropy = np.full(n, np.nan), np.full(n, np.nan)
        top = np.zeros((n, top_k))
        limit = min(self.max_length, EXAMPLE_MAX_LENGTH)
        for sl in self._batches(n, "scoring examples"):
            chunk = list(texts[sl])
            rows = self.tokenizer(chunk, truncation=True, max_length=limit)["input_ids"]
            masks = self._example_masks(rows, chunk, seed)
            keep = [i for i, m in enumerate(masks) if m]
            if not keep:
                continue
            logits = self._masked_logits([rows[i] for i in keep], [masks[i] for i in keep])
            log_probs = torch.log_softmax(logits, dim=-1)
            true = torch.tensor([rows[i][p] for i in keep for p in masks[i]], device=self.device)
            nll = -log_probs.gather(1, true[:, None])[:, 0]
            ent = -(log_probs.exp() * log_probs).sum(-1)
            probs = log_probs.exp().topk(min(top_k, log_probs.shape[-1]), dim=-1).values
            owner = torch.tensor([j for j, i in enumerate(keep) for _ in masks[i]], device=self.device)
            idx = np.asarray(keep) + sl.start
            loss[idx] = _segment_mean(nll, owner, len(keep))
            entropy[idx] = _segment_mean(ent, owner, len(keep))
            top[idx, : probs.shape[-1]] = _segment_mean(probs, owner, len(keep))
        return ExampleFeatures(loss=loss, entropy=entropy, top_probs=top)

    def _classifier_stats(self, texts: Sequence[str], labels: Sequence[int] | None) -> tuple[np.ndarray, np.ndarray]:
        torch = self._torch
        probs = []
        limit = min(self.max_length, EXAMPLE_MAX_LENGTH)
        for sl in self._batches(len(texts), "scoring examples"):
            rows = self.tokenizer(list(texts[sl]), truncation=True, max_length=limit)["input_ids"]
            ids, mask = self._pad(rows)
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=mask).logits.double()
            probs.append(torch.log_softmax(logits, dim=-1).cpu().numpy())
        log_probs = np.concatenate(probs) if probs else np.zeros((0, 0))
        if labels is None:
            return log_probs, np.full(len(texts), np.nan)
        y = np.asarray(labels, dtype=np.int64)
        if y.shape != (len(texts),) or (y.size and (y.min() < 0 or y.max() >= log_probs.shape[1])):
            raise UserInputError(f"labels must be {len(texts)} class indices in [0, {log_probs.shape[1]}).")
        return log_probs, -log_probs[np.arange(len(texts)), y]

    def class_probs(self, texts: Sequence[str]) -> np.ndarray:
        """[n, classes] softmax probabilities of a sequence classifier."""
        self._require(CLASSIFIER, "class probabilities")
        return np.exp(self._classifier_stats(texts, None)[0])

    def example_losses(self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0) -> np.ndarray:
        """[n] per-example loss: MLM loss under a fixed seeded masking, or classifier cross-entropy.

        The MLM masking of a text depends only on (seed, text), so member and non-member losses
        are computed under comparable masks. Classifiers need ``labels`` (class indices).
        """
        if self.kind == CLASSIFIER:
            if labels is None:
                raise UserInputError("example losses of a classifier need the examples' labels.")
            return self._classifier_stats(texts, labels)[1]
        return self._mlm_stats(texts, seed, 1).loss

    def prediction_hits(
        self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per text, what the model is asked to predict and whether its top prediction is right: the held-out
        accuracy of a model trained elsewhere (``dpaudit attack`` measures it; a dpaudit run logs its own).

        A classifier predicts each text's label (``labels``, class ids: one target per text); a masked LM the
        tokens :meth:`example_losses` masks (the same seeded masking, so the figure is over the positions the loss
        attack scores). The trivial baseline is computed from the same targets
        (:mod:`dpaudit.training.baselines`).

        Returns:
            (targets, hits): per text, int64 target ids and bool hits of equal length (empty: nothing to predict).
        """
        if self.kind == CLASSIFIER:
            if labels is None:
                raise UserInputError("held-out predictions of a classifier need the examples' labels.")
            log_probs, _ = self._classifier_stats(texts, labels)
            y = np.asarray(labels, dtype=np.int64)
            best = log_probs.argmax(-1) if len(y) else np.zeros(0, np.int64)
            return [y[i : i + 1] for i in range(len(y))], [best[i : i + 1] == y[i : i + 1] for i in range(len(y))]
        self._require(MASKED_LM, "held-out predictions")
        n = len(texts)
        targets = [np.zeros(0, np.int64) for _ in range(n)]
        hits = [np.zeros(0, bool) for _ in range(n)]
        limit = min(self.max_length, EXAMPLE_MAX_LENGTH)
        for sl in self._batches(n, "held-out predictions"):
            chunk = list(texts[sl])
            rows = self.tokenizer(chunk, truncation=True, max_length=limit)["input_ids"]
            masks = self._example_masks(rows, chunk, seed)
            keep = [i for i, m in enumerate(masks) if m]
            if not keep:
                continue
            best = self._masked_logits([rows[i] for i in keep], [masks[i] for i in keep]).argmax(-1).cpu().numpy()
            k = 0
            for i in keep:
                true = np.asarray([rows[i][p] for p in masks[i]], dtype=np.int64)
                targets[sl.start + i], hits[sl.start + i] = true, best[k : k + true.size] == true
                k += true.size
        return targets, hits

    def example_features(
        self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0, top_k: int = 10
    ) -> ExampleFeatures:
        """Per-example MIA features (see :class:`ExampleFeatures`)."""
        if self.kind == CLASSIFIER:
            log_probs, loss = self._classifier_stats(texts, labels)
            probs = np.exp(log_probs)
            entropy = -(probs * log_probs).sum(-1)
            return ExampleFeatures(loss=loss, entropy=entropy, top_probs=-np.sort(-probs, axis=-1))
        return self._mlm_stats(texts, seed, top_k)


def build_scorer(
    source: ModelSource,
    *,
    batch_size: int = 32,
    device: str | None = None,
    progress: bool = True,
    scorer_class: type[Scorer] = Scorer,
) -> Scorer:
    """Load the model and tokenizer of a checked :class:`ModelSource` (local files, safetensors only).

    The ``AutoModelFor...`` class follows the source's kind (masked LM, classifier, causal LM); ``scorer_class``
    wraps them (:func:`dpaudit.scoring.load` passes :class:`dpaudit.scoring.causal.CausalScorer` for a causal LM).
    """
    import torch
    import transformers

    from dpaudit.scoring.threads import apply_torch_threads

    auto = {MASKED_LM: transformers.AutoModelForMaskedLM, CAUSAL_LM: transformers.AutoModelForCausalLM}.get(
        source.kind, transformers.AutoModelForSequenceClassification
    )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    apply_torch_threads()  # the cores actually free, unless OMP_NUM_THREADS / DPAUDIT_THREADS says
    hf_logging = transformers.utils.logging
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load would drown the attack's own output
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source.model_dir, local_files_only=True)
        model = auto.from_pretrained(source.model_dir, local_files_only=True, use_safetensors=True)
    except (OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserInputError(f"--model {source.model_dir}: transformers cannot load it ({first}).") from None
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    if source.kind == MASKED_LM and tokenizer.mask_token_id is None:
        raise UserInputError(f"--model {source.model_dir}: the tokenizer has no mask token; a masked LM needs one.")
    model.to(device).eval()
    return scorer_class(source, model, tokenizer, batch_size=batch_size, device=device, progress=progress)
