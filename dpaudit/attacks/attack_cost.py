"""What the scoring attacks will cost, estimated before they start: their forward passes, priced on this model.

An attack on a model of a real size (GPT-2 small, BERT base) spends nearly all its time in the model's forward passes,
and how many it runs follows from the data and the options alone:

- exposure on a causal LM, exact (|R| up to ``--exposure-limit``): the canary's context once, then a prefix tree over
  the alphabet's tokens, sum_{k=1}^{L-1} |A|^k tree nodes of one token each on top of their parent's key/value cache,
  ``NODE_BATCH`` nodes per pass (:func:`dpaudit.scoring.causal_secrets.prefix_tree_scores`); sampled: the context,
  then the secret and ``--exposure-samples`` candidates of L tokens on its cache (:func:`candidate_scores`); a secret
  whose symbols are not single tokens: every candidate's whole text;
- extraction: greedy decoding and a beam search of ``--beam-width``, each step running every live beam's whole text
  (no cache) in passes of ``--batch-size`` rows (:func:`dpaudit.scoring.causal_secrets.beam_decode`);
- the membership scores of a text (loss, zlib, Min-K%, Min-K%++ on a causal LM; loss on a masked LM or classifier):
  one pass over each text of each membership task, cut to 128 tokens, ``--batch-size`` texts per pass (sorted by
  length on a causal LM, in the task's order otherwise, each pass padded to its longest text); each attack scores them
  again;
- exposure and reconstruction on a masked LM: one pass over each canary, every secret token masked; the two read the
  same passes (:func:`shared_passes`), which run once.

A pass of ``n`` tokens is priced ``per_call + n x per_token``, both measured on the model the attacks use, once the run
has loaded it and just before the first attack starts (:func:`measure_forward_cost`: a full batch of texts at the
tasks' length, and a pass of one token; a masked LM's encoder alone, :func:`forward_model`), so the estimate holds the
model's size, the device and the machine's load of the moment. Everything else (loading the model,
bootstrap intervals, the report) is left out: on a model of 100M parameters it is seconds; on a tiny model it is most
of the run, and the estimate says only what the passes cost. Shadow and reference models are priced when they start
(:mod:`dpaudit.attacks.shadow_cost`); the other attacks (the canary attack's one-run audit, the blind baseline, the
attacks against the base) are named as not estimated. ``benchmarks/bench_attack_cost.py`` measures the attacks at the
presets' sizes against this estimate.
"""

from __future__ import annotations

import copy
import functools
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpaudit.common.cost_model import format_minutes

__all__ = [
    "AttackWork",
    "ForwardCost",
    "announce",
    "attack_work",
    "estimate_lines",
    "forward_model",
    "measure_forward_cost",
    "price_rows",
    "shared_passes",
    "tree_work",
]

#: The membership attacks whose score is one pass over each text of each task (:mod:`dpaudit.attacks.causal_mia`,
#: :mod:`dpaudit.attacks.loss`).
TEXT_SCORES = frozenset({"loss", "zlib", "min-k", "min-k++"})
#: The clock the forward passes are priced on: wall seconds (a test prices them in CPU seconds, which the load of a
#: shared machine moves less).
CLOCK = time.perf_counter
#: The options the estimate reads (:func:`attack_work`).
OPTIONS = ("batch_size", "beam_width", "exposure_limit", "exposure_samples")
#: Tokens of a membership text (``dpaudit.scoring.scorer.EXAMPLE_MAX_LENGTH``).
TEXT_TOKENS = 128
#: Rows of the batch the price of a token is measured on (fewer when ``--batch-size`` is smaller), by the model's
#: kind: the passes the attacks run, as far as one batch can stand for them. A masked LM's and a classifier's passes
#: are full batches of texts (32 rows by default): priced at 32 rows (BERT-base at 8 rows of 16 tokens, two torch
#: threads at load 6 on 2 cores: 0.69 ms a token against the 2.8 ms its loss passes took; 16 rows: 2.1 ms). A causal
#: LM's are mostly small (extraction's few beams, exposure's candidates on a cache): priced at 8 rows (at 32 rows, two
#: threads at load 9, extraction read 5.6-6.1x its estimate on GPT-2 small and Llama-100M). With one thread (what
#: ``dpaudit attack`` takes on a loaded 2-core machine) a token of Llama-100M cost 2.1 ms at 8 x 16 and 1.8 ms at
#: 32 x 28 (``benchmarks/bench_attack_cost.py`` for the estimate against the attacks).
ROWS = {"causal-lm": 8}
#: ... and for the other kinds.
ROWS_DEFAULT = 32


@dataclass(frozen=True)
class ForwardCost:
    """Seconds of one forward pass of ``n`` tokens: ``per_call + n x per_token``.

    Attributes:
        per_call: a pass of one token (the fixed cost of a call: Python, kernel launches, the vocabulary projection of
            one position).
        per_token: each further token, from a full batch of ``rows`` x ``length``.
        rows, length: the measured batch.
    """

    per_call: float
    per_token: float
    rows: int
    length: int

    def seconds(self, calls: int, tokens: int) -> float:
        return calls * self.per_call + tokens * self.per_token


@dataclass(frozen=True)
class AttackWork:
    """The forward passes one attack will run: ``calls`` passes of ``tokens`` tokens in all; ``what`` in words."""

    attack: str
    calls: int
    tokens: int
    what: str


def tree_work(alphabet: int, length: int, node_batch: int) -> tuple[int, int]:
    """(passes, tokens) of :func:`dpaudit.scoring.causal_secrets.prefix_tree_scores` below the context: the passes of
    its depth-first expansion, counted chunk by chunk as it runs them (``node_batch // |A|`` parents per pass)."""
    per = max(1, node_batch // alphabet)

    @functools.lru_cache(maxsize=None)
    def expand(parents: int, remaining: int) -> tuple[int, int]:
        if remaining == 0:
            return 0, 0
        calls, tokens = 0, 0
        full, rest = divmod(parents, per)
        for count, times in ((per, full), (rest, 1 if rest else 0)):
            if times:
                below = expand(count * alphabet, remaining - 1)
                calls += times * (1 + below[0])
                tokens += times * (count * alphabet + below[1])
        return calls, tokens

    return expand(1, length - 1)


def _batched(lengths: Sequence[int], batch: int, *, by_length: bool = True) -> tuple[int, int]:
    """(passes, tokens) of rows of these lengths, ``batch`` per pass, each pass padded to its longest row; sorted by
    length first (as the text scorers batch them) or, without ``by_length``, in the order given (beam decoding)."""
    ordered = sorted(lengths) if by_length else list(lengths)
    chunks = [ordered[i : i + batch] for i in range(0, len(ordered), batch)]
    return len(chunks), sum(len(c) * max(c) for c in chunks)


def attack_work(
    name: str,
    *,
    kind: str,
    canaries: Sequence[tuple[int, int]],
    canary_tokens: Sequence[int],
    space: tuple[int, int, int] | None,
    single_tokens: bool,
    texts: Sequence[Sequence[int]],
    options: Mapping[str, Any],
    node_batch: int,
) -> AttackWork | None:
    """The forward passes of attack ``name`` (module docstring); None for an attack not estimated here.

    Args:
        kind: the model's kind (``"causal-lm"``, ``"masked-lm"``, ``"classifier"``).
        canaries: each canary's (context tokens, secret tokens) on a causal LM.
        canary_tokens: each canary's whole text in tokens.
        space: the secret space's (|A|, L, |R|), or None for phrases.
        single_tokens: every symbol of the space is one token in context (the exact methods apply).
        texts: the tokens of every text the membership tasks score (each already cut to :data:`TEXT_TOKENS`), task
            by task in the task's order: a causal LM's scorer sorts a task's texts by length before batching them,
            a masked LM's and a classifier's batch them in that order.
        options: ``batch_size``, ``beam_width``, ``exposure_limit``, ``exposure_samples``.
        node_batch: tree nodes per pass (``dpaudit.scoring.causal_secrets.NODE_BATCH``).
    """
    batch = int(options["batch_size"])
    n = len(canaries) if kind == "causal-lm" else len(canary_tokens)
    if name in TEXT_SCORES:
        counted = [_batched(t, batch, by_length=kind == "causal-lm") for t in texts if t]
        calls, tokens = sum(c for c, _ in counted), sum(t for _, t in counted)
        return AttackWork(name, calls, tokens, f"{sum(map(len, texts)):,} texts")
    if kind != "causal-lm" and name in ("exposure", "reconstruction"):
        calls, tokens = _batched(canary_tokens, batch, by_length=False)
        return AttackWork(name, calls, tokens, f"{n:,} canaries, one pass each")
    if kind != "causal-lm" or not canaries:
        return None
    contexts = sum(c for c, _ in canaries)
    if name == "exposure":
        if space is not None and single_tokens and space[2] <= int(options["exposure_limit"]):
            calls, tokens = tree_work(space[0], space[1], node_batch)
            return AttackWork(
                name, n * (1 + calls), contexts + n * tokens, f"{n:,} canaries, every one of |R| = {space[2]:,} scored"
            )
        m = int(options["exposure_samples"]) + 1
        if space is not None and single_tokens:
            calls = n * (1 + math.ceil(m / node_batch))
            return AttackWork(
                name, calls, contexts + n * m * space[1], f"{n:,} canaries, {m - 1:,} sampled candidates each"
            )
        calls, tokens = _batched([t for t in canary_tokens for _ in range(m)], batch)
        return AttackWork(name, calls, tokens, f"{n:,} canaries, {m - 1:,} sampled candidates each (whole texts)")
    if name == "extraction":
        calls, tokens = 0, 0
        for width in (1, int(options["beam_width"])):
            steps = max((s for _, s in canaries), default=0)
            for step in range(steps):
                beams = min(width, (space[0] if space is not None and single_tokens else 10**9) ** step)
                rows = [c + step for c, s in canaries if step < s for _ in range(beams)]
                c, t = _batched(rows, batch, by_length=False)
                calls, tokens = calls + c, tokens + t
        return AttackWork(name, calls, tokens, f"{n:,} canaries, greedy and {int(options['beam_width'])} beams")
    return None


def measure_forward_cost(
    model: Any, *, device: str, rows: int, length: int, vocab: int, repeats: int = 3
) -> ForwardCost:
    """Time the model's forward pass on random tokens: a batch of ``rows`` x ``length``, the fastest of ``repeats``
    after a warm-up (the least disturbed by other work on a shared machine), and a pass of one token on top of a
    key/value cache (the prefix tree's and the sampled candidates' passes), the fastest of ``repeats + 3`` (it is
    cheap, and one slow repeat of it, subtracted from the batch's time, would take most of the price of a token: on
    BERT-base at load 6 on 2 cores a one-token pass measured 400 ms, 90 ms, 35 ms)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    full = torch.randint(0, vocab, (rows, length), generator=gen).to(device)

    def timed(call: Callable[[], Any], times: int = repeats) -> float:
        best = math.inf
        with torch.inference_mode():
            call()
            for _ in range(times):
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                start = CLOCK()
                call()
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                best = min(best, CLOCK() - start)
        return best

    with torch.inference_mode():  # a masked LM's or a classifier's output has no cache: a pass of one token alone
        cache = getattr(model(input_ids=full[:1], use_cache=True), "past_key_values", None)
    one = full[:1, :1]
    if cache is not None:
        per_call = timed(
            lambda: model(input_ids=one, past_key_values=copy.deepcopy(cache), use_cache=True), repeats + 3
        )
        per_call -= timed(lambda: copy.deepcopy(cache), repeats + 3)
    else:
        per_call = timed(lambda: model(input_ids=one, attention_mask=torch.ones_like(one)), repeats + 3)
    per_token = max(timed(lambda: model(input_ids=full, attention_mask=torch.ones_like(full))) - per_call, 0.0)
    return ForwardCost(per_call=max(per_call, 0.0), per_token=per_token / (rows * length - 1), rows=rows, length=length)


def estimate_lines(works: Sequence[AttackWork], cost: ForwardCost, skipped: Sequence[str]) -> list[str]:
    """The estimate as ``dpaudit attack`` prints it: a head line with the measured prices, one line per attack, the
    total, and the attacks left out."""
    lines = [
        f"estimate before the attacks start (their forward passes only, priced on this model just now: "
        f"{cost.per_token * 1e3:.3g} ms per token, {cost.per_call * 1e3:.3g} ms per pass):"
    ]
    total = 0.0
    for w in works:
        seconds = cost.seconds(w.calls, w.tokens)
        total += seconds
        lines.append(
            f"  {w.attack}: {w.what}: {w.tokens:,} tokens in {w.calls:,} pass{'' if w.calls == 1 else 'es'}, "
            f"about {format_minutes(seconds)}"
        )
    lines.append(f"  total: about {format_minutes(total)}")
    if skipped:
        lines.append(f"  not estimated here: {', '.join(skipped)}")
    return lines


def _token_lengths(tokenizer: Any, texts: Sequence[str], limit: int) -> list[int]:
    if not texts:
        return []
    ids = tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False)["input_ids"]
    return [min(len(r), limit) for r in ids]


def announce(context: Any, classes: Sequence[Any], echo: Callable[[str], None]) -> list[float] | None:
    """Print the estimate of ``dpaudit attack`` (``echo``, one call per line) before the attacks start; returns each
    estimated attack's seconds (in the printed order), or None when nothing was estimated.

    Called by the run (:func:`dpaudit.attacks.run.attack`'s ``before_attacks``) once its checks have passed and the
    model is loaded, with the attacks' context (:class:`~dpaudit.attacks.base.AttackContext`: the loaded model, the
    canaries, the options) and the attack classes that will run: the estimate is priced on the model the attacks
    then use (never a second copy of it), and a rerun that finds the attack finished runs nothing and prints nothing.

    Never raises: what the attacks themselves will refuse (a secret the tokenizer splits) makes no estimate, and the
    attack then says what is wrong, in one line.
    """
    try:
        return _announce(context, classes, echo)
    except Exception:  # noqa: BLE001 - an estimate is never worth a failed run; the run reports bad input itself
        return None


def shared_passes(works: Sequence[AttackWork], kind: str, phrases: bool) -> list[AttackWork]:
    """The works with the passes that one attack's run leaves for the next counted once: on a masked LM, exposure
    and reconstruction of a ``digits:N``/``words:N`` space read the same masked-secret log-probabilities
    (:attr:`dpaudit.attacks.base.AttackContext.masked_log_probs`, computed on first use), so the second of them
    runs no pass."""
    if kind == "causal-lm" or phrases:
        return list(works)
    out: list[AttackWork] = []
    first = None
    for w in works:
        if w.attack in ("exposure", "reconstruction"):
            if first is not None:
                w = AttackWork(w.attack, 0, 0, f"{w.what.split(',')[0]}, {first}'s passes")
            first = first or w.attack
        out.append(w)
    return out


def _announce(context: Any, classes: Sequence[Any], echo: Callable[[str], None]) -> list[float] | None:
    from dpaudit.attacks.mia import canary_task, example_options, example_task
    from dpaudit.attacks.registry import prop
    from dpaudit.common.errors import UserInputError
    from dpaudit.scoring import causal_secrets as cs

    scorer, run, options, space = context.scorer, context.data, context.options, context.space
    source = scorer.source
    tokenizer = scorer.tokenizer
    canaries: list[Any] = list(context.canaries)  # (records the scoring protocols read)
    whole = [c.prefix + c.secret + c.suffix for c in canaries]
    canary_tokens = _token_lengths(tokenizer, whole, scorer.max_length)
    located: list[tuple[int, int]] = []
    single = False
    triple = None
    if space is not None and getattr(space, "alphabet", None) is not None:
        triple = (len(space.alphabet), int(space.length), int(space.size))
    if source.kind != "causal-lm" and canaries and triple is not None:
        from dpaudit.scoring.targets import locate_secrets

        # the masked-LM attacks locate each secret first: a secret the tokenizer splits is refused (one line), so
        # it gets no estimate printed above the refusal
        locate_secrets(tokenizer, canaries, space, max_length=scorer.max_length)
    if source.kind == "causal-lm" and canaries:
        secrets = None
        if triple is not None:
            try:
                secrets, _ = cs.alphabet_secrets(tokenizer, canaries, space, max_length=scorer.max_length)
                single = True
            except UserInputError:
                secrets = None
        if secrets is None:
            secrets = cs.span_secrets(tokenizer, canaries, max_length=scorer.max_length)
        located = [(len(s.context), len(s.secret)) for s in secrets]
    texts: list[list[int]] = []
    if any(c.name in TEXT_SCORES for c in classes):
        label_set = source.label_set()
        tasks = [example_task(run, label_set=label_set, **example_options(options))]
        task = canary_task(run, label_set=label_set)
        tasks += [task] if task is not None else []
        texts = [_token_lengths(tokenizer, list(t.texts), TEXT_TOKENS) for t in tasks]
    works, skipped = [], []
    for cls in classes:
        if prop(cls, "baseline"):
            continue  # the blind baseline never runs the model
        work = attack_work(
            cls.name,
            kind=source.kind,
            canaries=located,
            canary_tokens=canary_tokens,
            space=triple,
            single_tokens=single,
            texts=texts,
            options={key: getattr(options, key) for key in OPTIONS},
            node_batch=cs.NODE_BATCH,
        )
        (works.append(work) if work is not None else skipped.append(cls.name))
    if not works:
        return None
    works = shared_passes(works, source.kind, phrases=triple is None)
    lengths = [n for t in texts for n in t]
    length = max(8, min(TEXT_TOKENS, statistics.median_high(lengths or canary_tokens or [32])))
    cost = measure_forward_cost(
        forward_model(scorer),
        device=scorer.device,
        rows=price_rows(source.kind, options.batch_size),
        length=min(length, scorer.max_length),
        vocab=int(getattr(scorer.model.config, "vocab_size", 100)),
    )
    for line in estimate_lines(works, cost, skipped):
        echo(line)
    return [cost.seconds(w.calls, w.tokens) for w in works]


def price_rows(kind: str, batch_size: int) -> int:
    """Rows of the batch a token is priced on (:data:`ROWS`)."""
    return max(1, min(ROWS.get(kind, ROWS_DEFAULT), batch_size))


def forward_model(scorer: Any) -> Any:
    """The module whose passes the attacks run: a masked LM's encoder alone where the scorer runs the output layer on
    the masked positions only (:meth:`dpaudit.scoring.Scorer._masked_logits`; on BERT-base the output layer over
    every position is a fifth of the pass), else the whole model."""
    encoder = getattr(scorer, "_encoder", None)
    return scorer.model if encoder is None else encoder
