"""The BERT WordPiece tokenizer, learned from public text only.

Two choices matter for auditing:

- It is trained on ``public.jsonl`` only (the trainer's job): a vocabulary learned from the
  canary-bearing training set would leak frequent secrets through merged tokens.
- Every digit is its own token (``pre_tokenizers.Digits(individual_digits=True)``, and the ten
  digits are always in the vocabulary), so a ``digits:N`` secret is exactly N masked tokens and its
  rank can be computed exactly over 10^N candidates.

Special tokens have fixed ids: ``[PAD]`` = 0, ``[UNK]`` = 1, ``[CLS]`` = 2, ``[SEP]`` = 3, ``[MASK]`` = 4.

Declared new tokens (``new_tokens``): the canary tokens an inject manifest declares for new-token canaries
(``dpaudit inject --design new-tokens``, after Panda et al. 2025). Their SET, members' and non-members'
alike, is public design information fixed before the coin flips, so adding them does not make the
vocabulary depend on private data; they get the ids after the learned vocabulary, in the order given,
and each is one whole word of the vocabulary, so a canary's tokens are never ``[UNK]`` or split. With
no new tokens the tokenizer is byte-identical to one trained without the argument.

Why the vocabulary is learned here and not by ``tokenizers.trainers.WordPieceTrainer``: that trainer
breaks ties between equally frequent merges (and orders the alphabet) by Rust hash-map order, which
is seeded per process, so two runs on the same corpus give different vocabularies (observed with
tokenizers 0.23: "quick" in one run, "quic" + "##k" in the next). Resumable, reproducible runs need
the same vocabulary every time, so :func:`train_wordpiece` runs the same algorithm (BPE merges over
``##``-prefixed continuation symbols, weighted by word counts, stopping at ``vocab_size`` or
``min_frequency``; ties go to the pair of older symbols) with every order fixed by the corpus alone.
On the text of the papers this toolkit implements it encodes held-out text into as many tokens as the Rust trainer. Normalization, pre-tokenization, the
WordPiece model, the post-processor and serialization are all the ``tokenizers`` library's.
"""

from __future__ import annotations

import heapq
import string
from collections import Counter
from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

#: Special tokens in id order.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_PREFIX = "##"
# Always in the vocabulary: digits (each its own token), lowercase letters (word-initial and
# continuation forms, so any lowercase ASCII word tokenizes without [UNK]) and ASCII punctuation.
_INITIAL_ALPHABET = tuple(string.digits + string.ascii_lowercase + string.punctuation)
_CONTINUATION_ALPHABET = tuple(_PREFIX + c for c in string.ascii_lowercase)


def _normalizer() -> normalizers.Normalizer:
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Digits(individual_digits=True)])


def _count_words(texts: Iterable[str]) -> Counter[str]:
    normalizer, pre_tokenizer = _normalizer(), _pre_tokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _merged(left: str, right: str) -> str:
    return left + right[len(_PREFIX) :]


def _learn_vocab(word_counts: Counter[str], *, vocab_size: int, min_frequency: int) -> list[str]:
    """Deterministic WordPiece vocabulary: specials, alphabet, then BPE merges in order."""
    words = sorted(word_counts)  # fixed order, independent of the corpus order
    counts = [word_counts[w] for w in words]
    symbols = [[w[0], *(_PREFIX + c for c in w[1:])] for w in words]

    symbol_counts: Counter[str] = Counter()
    for syms, count in zip(symbols, counts, strict=True):
        for s in syms:
            symbol_counts[s] += count
    for symbol in list(symbol_counts):  # a character seen inside words can also start one
        if symbol.startswith(_PREFIX):
            symbol_counts[symbol[len(_PREFIX) :]] += 0
    # The alphabet: the guaranteed symbols, then the corpus's other symbols, most frequent first,
    # while they fit; ids in order of frequency (ties by text).
    guaranteed = set(_INITIAL_ALPHABET) | set(_CONTINUATION_ALPHABET)
    room = vocab_size - len(SPECIAL_TOKENS) - len(guaranteed)
    others = sorted((s for s in symbol_counts if s not in guaranteed), key=lambda s: (-symbol_counts[s], s))[:room]
    alphabet = sorted(guaranteed | set(others), key=lambda s: (-symbol_counts[s], s))
    vocab: list[str] = [*SPECIAL_TOKENS, *alphabet]
    ids = {token: index for index, token in enumerate(vocab)}
    # Words with a symbol outside the vocabulary cannot be produced from it; leave them out.
    keep = [all(s in ids for s in syms) for syms in symbols]

    pair_counts: Counter[tuple[str, str]] = Counter()
    where: dict[tuple[str, str], set[int]] = {}
    for index, (syms, count) in enumerate(zip(symbols, counts, strict=True)):
        if not keep[index]:
            continue
        for pair in zip(syms, syms[1:]):
            pair_counts[pair] += count
            where.setdefault(pair, set()).add(index)
    # Max-heap on count; ties go to the pair of older (lower-id, more frequent) symbols, as in the
    # tokenizers BPE trainer, but with ids fixed by the corpus alone. Stale entries are skipped.
    heap = [(-c, ids[a], ids[b]) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)
    while heap and len(vocab) < vocab_size:
        neg_count, left, right = heapq.heappop(heap)
        pair = (vocab[left], vocab[right])
        if pair_counts.get(pair, 0) != -neg_count:
            continue
        if -neg_count < min_frequency:
            break
        new_symbol = _merged(*pair)
        if new_symbol not in ids:
            ids[new_symbol] = len(vocab)
            vocab.append(new_symbol)
        changed: set[tuple[str, str]] = set()
        for index in sorted(where.pop(pair, ())):
            syms, count = symbols[index], counts[index]
            for old in zip(syms, syms[1:]):
                pair_counts[old] -= count
                changed.add(old)
            merged: list[str] = []
            i = 0
            while i < len(syms):
                if i + 1 < len(syms) and (syms[i], syms[i + 1]) == pair:
                    merged.append(new_symbol)
                    i += 2
                else:
                    merged.append(syms[i])
                    i += 1
            symbols[index] = merged
            for new in zip(merged, merged[1:]):
                pair_counts[new] += count
                where.setdefault(new, set()).add(index)
                changed.add(new)
        for other in changed:
            if other == pair:
                continue
            if pair_counts[other] > 0:
                heapq.heappush(heap, (-pair_counts[other], ids[other[0]], ids[other[1]]))
            else:
                del pair_counts[other]
                where.pop(other, None)
        pair_counts.pop(pair, None)
    return vocab


def check_new_tokens(tokens: Sequence[str]) -> tuple[str, ...]:
    """The declared new tokens as a tuple, each checked to stay one whole word through normalization and
    pre-tokenization (lowercase ASCII letters, as ``dpaudit inject --design new-tokens`` writes them).

    Raises:
        ValueError: a token that is not a string, would be changed or split, or is listed twice.
    """
    if isinstance(tokens, str):
        raise ValueError(f"new_tokens must be a sequence of tokens, got the string {tokens!r}.")
    normalizer, pre_tokenizer = _normalizer(), _pre_tokenizer()
    seen: set[str] = set()
    for token in tokens:
        if not isinstance(token, str) or not token:
            raise ValueError(f"new tokens must be non-empty strings, got {token!r}.")
        words = [w for w, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(token))]
        if words != [token] or token.startswith(_PREFIX) or token in SPECIAL_TOKENS:
            raise ValueError(
                f"new token {token!r} would not stay one whole word (it is lowercased, split or special); "
                "use lowercase ASCII letters."
            )
        if token in seen:
            raise ValueError(f"new token {token!r} is listed twice.")
        seen.add(token)
    return tuple(tokens)


def train_wordpiece(
    texts: Iterable[str], *, vocab_size: int = 8000, min_frequency: int = 2, new_tokens: Sequence[str] = ()
) -> Tokenizer:
    """Learn a lowercasing BERT WordPiece tokenizer from ``texts``; deterministic.

    The same multiset of texts gives the same tokenizer (byte-identical ``to_str()``), whatever
    their order, in any process.

    Args:
        texts: the training corpus (``public.jsonl`` texts, never the private training set).
        vocab_size: the vocabulary size, special tokens included (smaller when the corpus runs out
            of merges that occur ``min_frequency`` times), before the new tokens.
        min_frequency: a merge must occur at least this often.
        new_tokens: declared canary tokens (an inject manifest's ``new_tokens``,
            :attr:`dpaudit.inject_dir.reader.InjectRun.new_tokens`), added after the learned vocabulary as whole
            words; one already learned keeps its id.

    Returns:
        A ``tokenizers.Tokenizer``: BERT normalizer (lowercase), BERT pre-tokenizer then one token
        per digit, WordPiece with ``##`` continuations, ``[CLS] ... [SEP]`` post-processor.
    """
    minimum = len(SPECIAL_TOKENS) + len(_INITIAL_ALPHABET) + len(_CONTINUATION_ALPHABET)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(
            f"vocab_size must be an integer >= {minimum} (specials and the base alphabet), got {vocab_size!r}."
        )
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be a positive integer, got {min_frequency!r}.")
    new_tokens = check_new_tokens(new_tokens)
    vocab = _learn_vocab(_count_words(texts), vocab_size=vocab_size, min_frequency=min_frequency)
    learned = set(vocab)
    vocab += [token for token in new_tokens if token not in learned]
    tokenizer = Tokenizer(
        models.WordPiece(
            {token: index for index, token in enumerate(vocab)},
            unk_token="[UNK]",
            continuing_subword_prefix=_PREFIX,
            max_input_chars_per_word=100,
        )
    )
    tokenizer.normalizer = _normalizer()
    tokenizer.pre_tokenizer = _pre_tokenizer()
    tokenizer.decoder = decoders.WordPiece(prefix=_PREFIX)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tokenizer


def missing_new_tokens(tok: Tokenizer, new_tokens: Sequence[str], *, option: str) -> None:
    """Refuse a given tokenizer (a ``--init-from`` start's) that lacks a token an inject manifest declares for
    new-token canaries (:attr:`dpaudit.inject_dir.reader.InjectRun.new_tokens`): those canaries would be ``[UNK]`` in
    training and in the audit, which could then not tell members from controls.

    Raises:
        ValueError: naming ``option``, how many tokens are missing and one of them.
    """
    missing = [token for token in new_tokens if tok.token_to_id(token) is None]
    if missing:
        raise ValueError(
            f"{option}: its tokenizer lacks {len(missing)} of the {len(new_tokens)} tokens the inject "
            f"manifest declares for new-token canaries (e.g. {missing[0]!r}); start from a run trained with "
            "--data-split public on this inject directory, whose tokenizer has them."
        )


def special_token_ids(tok: Tokenizer) -> dict[str, int]:
    """Ids of the special tokens: keys ``pad``, ``unk``, ``cls``, ``sep``, ``mask``.

    Raises:
        ValueError: if the tokenizer lacks one of them.
    """
    ids: dict[str, int] = {}
    for token in SPECIAL_TOKENS:
        token_id = tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer must contain the special token {token}, got a vocabulary without it.")
        ids[token.strip("[]").lower()] = token_id
    return ids
