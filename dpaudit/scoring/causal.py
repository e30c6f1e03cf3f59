"""The causal-LM scorer: exact next-token log-likelihoods of a GPT-style model, batched, numpy out.

A causal LM (GPT-2, Llama, dpaudit's own ``--task clm`` models) gives every token its probability given
the tokens before it, so a text's log-likelihood is the sum of those terms: no masking, no seed. The
conventions (docs/scoring.md, "Causal language models") every causal part of dpaudit shares:

- A text is tokenized with ``add_special_tokens=True``. When the tokenizer has a BOS token and the
  result does not start with it, BOS is prepended (:class:`BosFirstTokenizer`), so the text's first
  token is scored too; dpaudit's own WordPiece tokenizer already yields ``[CLS] text [SEP]``. With no
  BOS at all (a byte-level BPE trained without one) the first token is context only, never scored.
- Every token after the first is scored: ``log p(x_t | x_<t)`` for t >= 1 (for dpaudit's model: the
  text's tokens and the closing ``[SEP]``).
- Batches are padded on the right with an attention mask: a token sees only the tokens before it, so
  padding after a text cannot change its scores (a text scores the same alone or beside a longer one).
- A canary's secret score is the sum of ``log p`` over the secret's token positions, every token
  before it as context (the suffix is not scored); its tokens are found with offsets exactly as for the
  masked LM (:mod:`dpaudit.scoring.targets`).

Speed: the vocabulary projection dominates; it runs only on the positions scored, in chunks that keep the
float64 log-softmax small, on the transformer's hidden states (``model.<base_model_prefix>`` then
``get_output_embeddings()``) when a probe at load shows that this equals the model's own logits, else on
the full forward pass (a model that rescales or caps its logits in ``forward``).

References:
  Carlini, Liu, Erlingsson, Kos & Song 2019, "The Secret Sharer" (log-perplexity of the secret given its prefix).
  Carlini et al. 2021, "Extracting Training Data from Large Language Models" (zlib ratio; perplexity).
  Shi et al. 2024, "Detecting Pretraining Data from Large Language Models" (Min-K% Prob).
  Zhang et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language Models"
    (per-token mean and standard deviation of log p under the model's next-token distribution).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.scoring.scorer import EXAMPLE_MAX_LENGTH, ExampleFeatures, Scorer
from dpaudit.scoring.source import CAUSAL_LM, ModelSource
from dpaudit.scoring.targets import (
    CanaryLike,
    SpaceLike,
    alphabet_token_ids,
    check_secret_tokens,
    locate_secrets,
    locate_spans,
)

#: Float64 elements of one chunk of vocabulary logits (positions x vocabulary): 128 MiB.
CHUNK_ELEMENTS = 2**24


class BosFirstTokenizer:
    """A Hugging Face tokenizer whose ``__call__`` (with ``add_special_tokens``, the default) starts every text
    with the BOS token when the tokenizer has one and its own post-processing did not put it first.

    Only ``__call__`` changes (lists out, as the fast tokenizers give without ``return_tensors``): its offsets,
    attention mask and other per-token fields gain the BOS entry too, so :mod:`dpaudit.scoring.targets` finds
    secrets at the positions the scorer scores. Every other attribute is the wrapped tokenizer's.
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.bos_id: int | None = tokenizer.bos_token_id

    def __getattr__(self, name: str) -> Any:
        if name == "_tokenizer":  # not set yet (copy, pickle): no delegation loop
            raise AttributeError(name)
        return getattr(self._tokenizer, name)

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("return_tensors") is not None:
            raise ValueError("BosFirstTokenizer returns lists; convert them to tensors after the call.")
        enc = self._tokenizer(text, *args, **kwargs)
        if self.bos_id is None or not kwargs.get("add_special_tokens", True):
            return enc
        single = isinstance(enc["input_ids"], list) and (not enc["input_ids"] or isinstance(enc["input_ids"][0], int))
        rows = [enc["input_ids"]] if single else enc["input_ids"]
        first = {
            "input_ids": self.bos_id,
            "attention_mask": 1,
            "offset_mapping": (0, 0),
            "token_type_ids": 0,
            "special_tokens_mask": 1,
        }
        for key, value in first.items():
            if key not in enc:
                continue
            column = [enc[key]] if single else enc[key]
            fixed = [[value, *col] if not ids or ids[0] != self.bos_id else col for ids, col in zip(rows, column)]
            enc[key] = fixed[0] if single else fixed
        return enc


@dataclass(frozen=True)
class TokenStatistics:
    """Per scored token of each text (Zhang et al. 2024): ``log_probs`` = log p(x_t | x_<t); ``mean`` = mu_t =
    E_{z ~ p(. | x_<t)}[log p(z | x_<t)] (minus the entropy); ``std`` = sigma_t, the standard deviation of
    log p(z | x_<t) under the same distribution. One float64 array per text, aligned."""

    log_probs: list[np.ndarray]
    mean: list[np.ndarray]
    std: list[np.ndarray]


@dataclass(frozen=True)
class TokenTable:
    """Per text: ``ids``, its token ids (BOS first when the tokenizer has one, cut); at each scored token t >= 1 (the
    arrays' entry t - 1), ``log_probs`` = log p(x_t | x_<t), ``mean`` and ``std`` = mu_t and sigma_t
    (:class:`TokenStatistics`), ``top1`` = x_t is the model's most likely next token (a wrong top-1 is an error
    position, Ilic et al. 2026)."""

    ids: list[list[int]]
    log_probs: list[np.ndarray]
    mean: list[np.ndarray]
    std: list[np.ndarray]
    top1: list[np.ndarray]


class CausalScorer(Scorer):
    """A loaded causal LM and its tokenizer (:class:`BosFirstTokenizer`). Build with :func:`dpaudit.scoring.load`.

    The masked-LM and classifier methods of :class:`Scorer` refuse it in one line; :meth:`example_losses` and
    :meth:`example_features` give the membership attacks (loss, shadow, ref, LiRA, RMIA) what they need.
    """

    def __init__(
        self, source: ModelSource, model: Any, tokenizer: Any, *, batch_size: int, device: str, progress: bool = True
    ) -> None:
        super().__init__(
            source, model, BosFirstTokenizer(tokenizer), batch_size=batch_size, device=device, progress=progress
        )

    # -- model plumbing ------------------------------------------------------------------------

    @property
    def _vocab(self) -> int:
        """The output layer's width (the config's ``vocab_size``; the embedding table's rows without one)."""
        size = getattr(self.model.config, "vocab_size", None)
        return (
            int(size) if isinstance(size, int) and size > 0 else int(self.model.get_input_embeddings().num_embeddings)
        )

    def _split_head(self) -> tuple[Any, Any]:
        """(transformer, output layer) when their composition is the model's logits on a probe, else (None, None)."""
        if self.kind != CAUSAL_LM:
            return super()._split_head()
        torch = self._torch
        prefix = getattr(self.model, "base_model_prefix", "")
        base = getattr(self.model, prefix, None) if prefix else None
        head = self.model.get_output_embeddings()
        if base is None or head is None:
            return None, None
        probe = torch.tensor([[i % self._vocab for i in (0, 1, 2, 3)]], dtype=torch.long, device=self.device)
        mask = torch.ones_like(probe)
        try:
            with torch.inference_mode():
                full = self.model(input_ids=probe, attention_mask=mask).logits
                split = head(base(input_ids=probe, attention_mask=mask).last_hidden_state)
        except Exception:  # noqa: BLE001 - a base model with another signature: the full forward pass is exact
            return None, None
        same = full.shape == split.shape and bool(torch.allclose(full.float(), split.float(), rtol=1e-4, atol=1e-4))
        return (base, head) if same else (None, None)

    def _encode(self, texts: Sequence[str], limit: int) -> list[list[int]]:
        """Token ids of each text (BOS first when the tokenizer has one), cut to ``limit`` tokens."""
        # verbose=False: no "longer than the model's maximum" warning for a text cut to ``limit`` right here.
        rows = self.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
        return [list(r[:limit]) for r in rows]

    def _scan(
        self,
        rows: Sequence[Sequence[int]],
        positions: Sequence[Sequence[int]],
        *,
        stats: bool = False,
        top_k: int = 0,
        hits: bool = False,
        desc: str = "scoring texts",
    ) -> dict[str, list[np.ndarray]]:
        """Per row, at each of its ``positions`` t (>= 1): log p(row[t] | row[:t]) (``"log_probs"``), and with
        ``stats`` mu_t and sigma_t (``"mean"``, ``"std"``), with ``top_k`` the k largest next-token
        probabilities (``"top"``, [len(positions), k]), with ``hits`` whether row[t] is the most likely next token
        (``"hit"``: the argmax, the first of equal maxima). Rows are batched by length (padding right)."""
        torch = self._torch
        n = len(rows)
        keys = (
            ["log_probs"] + (["mean", "std"] if stats else []) + (["top"] if top_k else []) + (["hit"] if hits else [])
        )
        out: dict[str, list[Any]] = {key: [None] * n for key in keys}
        order = sorted(range(n), key=lambda i: len(rows[i]))
        for sl in self._batches(n, desc):
            batch = order[sl]
            need = [max(positions[i], default=0) + 1 for i in batch]  # tokens after the last scored one are not needed
            ids, mask = self._pad([list(rows[i][:k]) for i, k in zip(batch, need)])
            r = torch.tensor(
                [j for j, i in enumerate(batch) for _ in positions[i]], dtype=torch.long, device=self.device
            )
            c = torch.tensor([t for i in batch for t in positions[i]], dtype=torch.long, device=self.device)
            parts: dict[str, list[Any]] = {key: [] for key in keys}
            if r.numel():
                with torch.inference_mode():
                    if self._encoder is not None:
                        hidden = self._encoder(input_ids=ids, attention_mask=mask).last_hidden_state[r, c - 1]
                        logits_of = self._head
                    else:
                        hidden = self.model(input_ids=ids, attention_mask=mask).logits[r, c - 1]
                        logits_of = None
                    target = ids[r, c]
                    step = max(1, CHUNK_ELEMENTS // self._vocab)
                    for start in range(0, hidden.shape[0], step):
                        h = hidden[start : start + step]
                        log_p = torch.log_softmax((h if logits_of is None else logits_of(h)).double(), dim=-1)
                        parts["log_probs"].append(log_p.gather(1, target[start : start + step, None])[:, 0])
                        if stats:
                            p = log_p.exp()
                            mu = (p * log_p).sum(-1)
                            parts["mean"].append(mu)
                            parts["std"].append((p * (log_p - mu[:, None]) ** 2).sum(-1).sqrt())
                        if top_k:
                            parts["top"].append(log_p.topk(min(top_k, log_p.shape[-1]), dim=-1).values.exp())
                        if hits:
                            parts["hit"].append(log_p.argmax(dim=-1) == target[start : start + step])
            flat = {key: torch.cat(v).cpu().numpy() if v else np.zeros((0,)) for key, v in parts.items()}
            k = 0
            for i in batch:
                m = len(positions[i])
                for key in keys:
                    out[key][i] = flat[key][k : k + m] if m else np.zeros((0,) + flat[key].shape[1:])
                k += m
        return out

    @staticmethod
    def _after_first(rows: Sequence[Sequence[int]]) -> list[list[int]]:
        return [list(range(1, len(r))) for r in rows]

    # -- texts ---------------------------------------------------------------------------------

    def token_log_probs(self, texts: Sequence[str], *, max_length: int | None = None) -> list[np.ndarray]:
        """Per text, log p(x_t | x_<t) of every token after the first, float64 (module docstring).

        ``max_length``: cut each text to this many tokens, BOS included (default: the model's limit).
        """
        self._require(CAUSAL_LM, "causal token scoring")
        rows = self._encode(texts, min(self.max_length, max_length or self.max_length))
        return self._scan(rows, self._after_first(rows))["log_probs"]

    def token_statistics(self, texts: Sequence[str], *, max_length: int | None = None) -> TokenStatistics:
        """Per text and scored token: log p, and mu, sigma of log p(z) for z ~ p(. | x_<t) (:class:`TokenStatistics`)."""
        self._require(CAUSAL_LM, "causal token scoring")
        rows = self._encode(texts, min(self.max_length, max_length or self.max_length))
        out = self._scan(rows, self._after_first(rows), stats=True)
        return TokenStatistics(log_probs=out["log_probs"], mean=out["mean"], std=out["std"])

    def token_table(self, texts: Sequence[str], *, max_length: int | None = None) -> TokenTable:
        """Per text: its token ids and, at each scored token, log p, mu, sigma and whether it is the model's top-1
        prediction (:class:`TokenTable`); the texts cut as :meth:`token_log_probs` cuts them."""
        self._require(CAUSAL_LM, "causal token scoring")
        rows = self._encode(texts, min(self.max_length, max_length or self.max_length))
        out = self._scan(rows, self._after_first(rows), stats=True, hits=True)
        return TokenTable(
            ids=[list(r) for r in rows],
            log_probs=out["log_probs"],
            mean=out["mean"],
            std=out["std"],
            top1=[np.asarray(h, dtype=bool) for h in out["hit"]],
        )

    # -- canaries ------------------------------------------------------------------------------

    def _locate(self, canaries: Sequence[CanaryLike], space: SpaceLike | None) -> list[Any]:
        if space is None:
            located = locate_spans(self.tokenizer, canaries, max_length=self.max_length)
        else:
            located = locate_secrets(self.tokenizer, canaries, space, max_length=self.max_length)
            check_secret_tokens(self.tokenizer, canaries, located, space, alphabet_token_ids(self.tokenizer, space))
        for c, t in zip(canaries, located):
            if t.secret_positions[0] == 0:
                raise UserInputError(
                    f"canary {c.id}: its secret is the text's first token and this tokenizer has no BOS "
                    "token, so nothing precedes it to score it from; give the canaries a prefix."
                )
        return located

    def secret_token_log_probs(
        self, canaries: Sequence[CanaryLike], space: SpaceLike | None = None
    ) -> list[np.ndarray]:
        """Per canary, log p(secret token i | every token before it) at each of the secret's positions, float64.

        ``space`` (digits:N, words:N): also check that the secret is one alphabet token per position, as the
        exact exposure rank assumes; None (phrases): the secret is whatever tokens cover it.

        Raises:
            UserInputError: naming a canary whose secret shares a token with its context, does not tokenize as the
                space assumes, is too long for the model, or has no token before it.
        """
        self._require(CAUSAL_LM, "causal secret scoring")
        located = self._locate(canaries, space)
        return self._scan(
            [t.input_ids for t in located], [t.secret_positions for t in located], desc="scoring canaries"
        )["log_probs"]

    def secret_log_likelihoods(self, canaries: Sequence[CanaryLike], space: SpaceLike | None = None) -> np.ndarray:
        """[n] log-likelihood of each canary's secret given its prefix (the sum of :meth:`secret_token_log_probs`);
        higher = more likely. The suffix is not scored (docs/scoring.md, convention 3)."""
        return np.asarray([float(x.sum()) for x in self.secret_token_log_probs(canaries, space)], dtype=np.float64)

    # -- examples (membership inference) -------------------------------------------------------

    def example_losses(self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0) -> np.ndarray:
        """[n] mean negative log-likelihood of each text's scored tokens (its first :data:`EXAMPLE_MAX_LENGTH`
        tokens); NaN for a text with no scored token. ``labels`` and ``seed`` are unused (no label, no masking)."""
        self._require(CAUSAL_LM, "causal example losses")
        logs = self.token_log_probs(texts, max_length=EXAMPLE_MAX_LENGTH)
        return np.asarray([-float(x.mean()) if x.size else np.nan for x in logs], dtype=np.float64)

    def prediction_hits(
        self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per text, its tokens after the first (its first :data:`EXAMPLE_MAX_LENGTH`, as :meth:`example_losses`
        scores them) and whether the model's most likely next token was each (:meth:`Scorer.prediction_hits`);
        ``labels`` and ``seed`` are unused."""
        self._require(CAUSAL_LM, "held-out predictions")
        rows = self._encode(texts, min(self.max_length, EXAMPLE_MAX_LENGTH))
        positions = self._after_first(rows)
        out = self._scan(rows, positions, top_k=1, desc="held-out predictions")
        targets = [np.asarray([row[t] for t in pos], dtype=np.int64) for row, pos in zip(rows, positions)]
        # the target is the top prediction when its probability is the largest one (ties count: measure zero)
        hits = [
            lp >= np.log(top[:, 0]) - 1e-9 if lp.size else np.zeros(0, bool)
            for lp, top in zip(out["log_probs"], out["top"])
        ]
        return targets, hits

    def example_features(
        self, texts: Sequence[str], labels: Sequence[int] | None = None, *, seed: int = 0, top_k: int = 10
    ) -> ExampleFeatures:
        """Per-text MIA features, each averaged over the scored positions: the mean NLL, the mean entropy of the
        next-token distribution, and its ``top_k`` largest probabilities (as the masked LM's, over positions)."""
        self._require(CAUSAL_LM, "causal example features")
        rows = self._encode(texts, min(self.max_length, EXAMPLE_MAX_LENGTH))
        out = self._scan(rows, self._after_first(rows), stats=True, top_k=top_k)
        n = len(rows)
        loss, entropy, top = np.full(n, np.nan), np.full(n, np.nan), np.zeros((n, top_k))
        for i in range(n):
            if out["log_probs"][i].size:
                loss[i], entropy[i] = -out["log_probs"][i].mean(), -out["mean"][i].mean()
                if top_k:
                    mean_top = out["top"][i].mean(0)
                    top[i, : mean_top.size] = mean_top
        return ExampleFeatures(loss=loss, entropy=entropy, top_probs=top)
