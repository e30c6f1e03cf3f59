"""Token-level leakage: which tokens of a member moved most from the base to the target.

A membership score says that a text leaks; its tokens say what leaks (a name, a number, a canary's secret). Tao &
Shokri (2025, InfoRMIA) localize memorization to tokens; here every token t of every candidate of the base-ratio
attack (:mod:`dpaudit.attacks.base_mia`) has its log-likelihood ratio d_t = log p_target(x_t) - log p_base(x_t), in
nats, written to :data:`TOKENS_FILE` (a row per candidate: task, id, member, its tokens, their d_t and, for a
canary, which tokens are its secret). :func:`token_leaks` keeps a small summary for ``results.json`` and the
report: the tokens with the largest d_t in the top-scoring members of each task (their row ids, not their texts),
and, per insertion count, the mean d_t of the canaries' secret tokens beside their other tokens' (controls: never
inserted, the baseline).

The attack directory is private (docs/threat-model.md): the tokens are pieces of private rows.

References:
  Tao & Shokri 2025, "(Token-Level) InfoRMIA: Stronger Membership Inference and Memorization Assessment for LLMs"
    (arXiv 2510.05582): token-level membership signals localize what a model memorized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpaudit.attacks.results import LeakingMember, LeakingToken, SecretTokenShift, TokenLeaks

#: The per-token file of the base-ratio attack, in the attack directory.
TOKENS_FILE = "scores/tokens.jsonl"
#: Members per task in the summary, and tokens per member.
TOP_MEMBERS, TOP_TOKENS = 5, 3


def secret_flags(tokenizer: Any, text: str, start: int, end: int, n_ids: int) -> list[bool]:
    """Per token of ``text`` (its first ``n_ids``, as the scorer cut it), whether it covers part of the characters
    [start, end) (a canary's secret)."""
    offsets = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True, verbose=False)["offset_mapping"]
    return [bool(e > s and s < end and e > start) for s, e in list(offsets)[:n_ids]]


def _secret_spans(context: Any) -> dict[str, tuple[int, int]]:
    return {c.id: (len(c.prefix), len(c.prefix) + len(c.secret)) for c in context.canaries}


def _pieces(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token as the text it decodes to (a BPE piece's leading-space marker becomes a space)."""
    return [str(tokenizer.decode([int(i)])) for i in ids]


def token_rows(context: Any, tasks: Sequence[Any], shifts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """:data:`TOKENS_FILE`'s rows: per candidate of each task, its scored tokens and their d_t (and, for a canary,
    whether each is a secret token)."""
    tokenizer = context.scorer.tokenizer
    spans = _secret_spans(context)
    rows = []
    for task in tasks:
        view = shifts[task.name]
        ratios = view.ratios()
        for i, (cid, member) in enumerate(zip(task.ids, task.member.tolist())):
            ids, positions = view.ids[i], view.positions[i]
            pieces = _pieces(tokenizer, [ids[p] for p in positions])
            row: dict[str, Any] = {
                "task": task.name,
                "id": cid,
                "member": bool(member),
                "tokens": pieces,
                "llr": [round(float(x), 6) for x in ratios[i]],
            }
            if cid in spans:
                flags = secret_flags(tokenizer, task.texts[i], *spans[cid], len(ids))
                row["secret"] = [flags[p] for p in positions]
            rows.append(row)
    return rows


def token_leaks(
    context: Any, tasks: Sequence[Any], scores: Sequence[np.ndarray], shifts: Mapping[str, Any]
) -> TokenLeaks:
    """The summary kept in the base-ratio result: per task, the :data:`TOP_TOKENS` tokens of largest d_t in each of
    the :data:`TOP_MEMBERS` top-scoring members (secret tokens marked); per canary insertion count, the mean d_t of
    the secret tokens and of the others."""
    tokenizer = context.scorer.tokenizer
    spans = _secret_spans(context)
    top: list[LeakingMember] = []
    secrets: list[SecretTokenShift] = []
    for task, score in zip(tasks, scores):
        view = shifts[task.name]
        ratios = view.ratios()
        ranked = np.argsort(-np.nan_to_num(np.asarray(score, dtype=np.float64), nan=-np.inf), kind="stable")
        for i in [int(i) for i in ranked if task.member[i]][:TOP_MEMBERS]:
            cid = task.ids[i]
            positions = view.positions[i]
            flags = (
                secret_flags(tokenizer, task.texts[i], *spans[cid], len(view.ids[i]))
                if cid in spans
                else [False] * len(view.ids[i])
            )
            best = [int(j) for j in np.argsort(-ratios[i], kind="stable")[:TOP_TOKENS]]
            pieces = _pieces(tokenizer, [view.ids[i][positions[j]] for j in best])
            tokens = tuple(
                LeakingToken(token=piece, llr=float(ratios[i][j]), secret=bool(flags[positions[j]]))
                for piece, j in zip(pieces, best)
            )
            top.append(LeakingMember(task=task.name, id=cid, score=float(score[i]), tokens=tokens))
        if task.frequencies is None:
            continue
        by_frequency: dict[int, tuple[list[float], list[float]]] = {}
        for i, cid in enumerate(task.ids):
            if cid not in spans:
                continue
            flags = secret_flags(tokenizer, task.texts[i], *spans[cid], len(view.ids[i]))
            mask = np.asarray([flags[p] for p in view.positions[i]], dtype=bool)
            inside, outside = by_frequency.setdefault(int(task.frequencies[i]), ([], []))
            inside.extend(ratios[i][mask].tolist())
            outside.extend(ratios[i][~mask].tolist())
        for f, (inside, outside) in sorted(by_frequency.items()):
            secrets.append(
                SecretTokenShift(
                    task=task.name,
                    frequency=f,
                    canaries=int(np.sum(task.frequencies == f)),
                    secret_tokens=len(inside),
                    mean_secret_llr=float(np.mean(inside)) if inside else None,
                    mean_other_llr=float(np.mean(outside)) if outside else None,
                )
            )
    return TokenLeaks(file=TOKENS_FILE, top_members=tuple(top), secrets=tuple(secrets))


def leak_lines(leaks: TokenLeaks, *, members: int = 3) -> list[str]:
    """The summary in words, for the terminal: per task, its first ``members`` top members' most leaking tokens
    (``*`` marks a canary's secret token), then the canaries' secret tokens beside their other tokens by insertion
    count."""
    lines = []
    shown: dict[str, int] = {}
    for member in leaks.top_members:
        if shown.get(member.task, 0) >= members:
            continue
        shown[member.task] = shown.get(member.task, 0) + 1
        tokens = ", ".join(
            f"{t.token.strip() or repr(t.token)}{'*' if t.secret else ''} {t.llr:+.2f}" for t in member.tokens
        )
        lines.append(f"{member.task} {member.id} (score {member.score:.2f}): {tokens}")
    for row in leaks.secrets:
        secret = "-" if row.mean_secret_llr is None else f"{row.mean_secret_llr:+.2f}"
        other = "-" if row.mean_other_llr is None else f"{row.mean_other_llr:+.2f}"
        what = "controls" if row.frequency == 0 else f"inserted {row.frequency}x"
        lines.append(
            f"{row.task} {what} ({row.canaries} canaries): secret tokens {secret} nats on average, other tokens {other}"
        )
    return lines
