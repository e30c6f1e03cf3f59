"""The demo's sizes and its stages, as the ``dpaudit`` commands a user would type.

Why these sizes (measured on the built-in corpus with the ``tiny`` preset, 2 layers x 64 hidden, on
the 2-core CPU; the table is in ``benchmarks/bench_demo.py``'s docstring):

- A large corpus drowns the canaries: at 20K rows and 6-digit secrets, 1,500 steps gave the 100x
  canaries 7.9 bits of exposure and no exact reconstruction. At 3,000 utterances a 100x canary is ~3%
  of the training rows; 4-digit secrets (|R| = 10^4, exposure at most 13.3 bits), 32-token sequences
  (every keyed canary whole), learning rate 3e-3 without weight decay and 30% masking (each secret
  digit is predicted more often) make the non-private model memorize them in 1,000 steps: 13.3 bits
  vs 0.9 for the controls, 10/10 reconstructed exactly, held-out MLM accuracy 49% (predicting the
  most frequent token scores 6%).
- ``--quick``: 1,000 utterances, 5 canaries per group, 500 steps (400 reconstructed only 1 of 5
  secrets exactly on two of three noise seeds).
- The epsilon-8 model, trained identically with DP-SGD, stays far below the non-private one and
  reconstructs no 100x canary (full demo: 1x 2.1, 10x 1.8, 100x 5.1-5.3 bits vs 0.6-0.7). With 10
  canaries per group even its 1x and 10x canaries are slightly above the controls (p = 0.02-0.06;
  epsilon 8 allows a likelihood ratio of e^8), and its 100x canaries are clearly above them at every
  size tried (corpus 1,000-10,000, batch 16-64, learning rate 1e-3-3e-3, 1,000-4,000 steps: 3-7 bits,
  p < 0.005): 100 copies are a group of 100 rows, for which epsilon 8 proves nothing, and they share
  one context, so even a DP model learns which digits their secrets favour. At the quick size (5 per
  group) its 1x and 10x canaries are indistinguishable from the controls (p = 0.27-0.85, 5 runs).

Public pretraining, then private training (``benchmarks/bench_public_pretraining.py``): the masked LMs'
inject directory also holds ``public_size`` public utterances (``--public-size``: generated beside the private rows,
never one of them, never a canary). A public model is pretrained on them (``--data-split public --non-private``, a
stage cached like every other), and the non-private and the epsilon-8 model both start from it (``--init-from``).
From random weights the epsilon-8 model learned nothing (5.8% held-out MLM accuracy, the most frequent token 6%);
from the public model it reaches 56% against the non-private model's 62% (0.91x, DP learning rate 1e-3: at 3e-3 the
noise costs 3 points more), while the non-private model still memorizes its 100x canaries (12.3 bits, 6/10 exact)
and the DP model's 1x canaries stay with the controls. The classifiers likewise start from an intent classifier
pretrained on ``classifier_public_size`` public utterances (sgd mode, public data only; 2 epochs: one epoch of 3,000
rows landed anywhere from 55% to 94% across OS-entropy sampling draws, two gave 90-98%): with 3,000 of them sgd 96%,
dp-sgd and edp-sgd at epsilon 8 95% (the public classifier alone 94%, the majority class 13%; with 5,000 all 98%).
Demo wall time with the public stages: 6 min 7 s (``--quick`` 2 min 41 s) on the shared 2-core machine, with 4
shadow models per classifier attack (8 took the demo to 12 minutes under load). The one-run audit's models still start from random weights: the public
model's tokenizer lacks the audit's new tokens (a second public model would cost another pretraining), and the
audit proves the recipe's leakage, which needs no utility.

The one-run audit (designed canaries: docs/canaries.md, "Designs"): the digit canaries above are inserted 1, 10 and 100
times by design, so no one-run bound applies to them. A second inject directory holds
``audit_canaries`` coin-flip new-token canaries (``--design new-tokens``, after Panda et al. 2025: a
token that exists nowhere else, each inserted once iff its fair coin says so), and two jax-bert models
are trained on it with the audit recipe and attacked with the canary attack's pseudo-log-likelihood. The
recipe is the masked LMs' (tiny model, learning rate, 30% masking, about as many examples seen) in fewer,
larger batches at the peak learning rate to the end (``audit_batch_size``, ``audit_steps``,
``audit_lr_decay``): a black-box audit sees only the last iterate, whose separation of a member canary is at
most q sqrt(T) / sigma at the claimed epsilon (epsilon 4: 0.61 at 1,000 steps of 64, 0.86 at 63 of 1,024),
and a learning rate that decays to 0 weighs the early steps' signal less. The one-run proof (against the
claimed mechanism's curve for the DP model, Steinke et al.'s for the non-private one) then proves the
non-private model's leakage and stays below the epsilon-8 model's claim (the full recipe non-private and at
epsilon 4: ``benchmarks/bench_designed_canaries.py``).

The classifiers (``edp-sgd --task classify``, sgd vs edp-sgd mode, when torch is installed) get
their own smaller inject directory: intent labels come with the built-in corpus, each canary carries
a random intent, and the torch trainer is the slower one. The classifiers declare their label set
(``--labels``: the corpus grammar's intents, public): a released model's labels never come from its
private rows, and a public split that happened to miss an intent cannot make the demo refuse a row.

The causal LMs (``--causal``) at the full size get their own inject directory too (``causal_corpus_size``: 900
members beside 555 canary rows, 400 held-out rows, 20,000 public rows of their own), a public causal LM trained 3
epochs on those public rows, and 20 fine-tuning epochs. It is drawn from the same built-in corpus with a seed of its
own (:func:`causal_inject_seed`: a fixed public function of the demo's ``--seed``), so the draw is independent of
the masked LMs', and with ``--exclude`` of their ``public.jsonl`` only: the rows the recipe below was chosen on are
none of the causal LMs' private rows, and excluding public rows makes the causal directory depend on public data
only. Their private rows are not excluded: the causal directory, and the public causal LM trained on it without DP
and released, would then be a function of them (which rows were redrawn shows which were excluded). Measured at the
full size with ``--seed 0`` (normalized texts): 0 of the causal LMs' 1,315 distinct private texts are masked public
rows, by construction; 91 of the masked LMs' 3,030 distinct private texts (84 members, 7 held-out) are causal public
rows, and 9 are causal private ones. Those are coincidences of the grammar between independent draws (the same draw
without ``--exclude`` shares 72 and 9, and 35 causal private texts with the masked public rows), not copies: the
causal directory is a function of its seed and the masked ``public.jsonl``, which is generated beside the masked
corpus (none of its rows, members and held-out alike) before the split, so it is drawn the same whichever rows the
masked LMs were trained on, and nothing trained on it tells which they were. With the demo's seed for both (the
earlier design) the two draws were one random stream and shared 5,441 public rows (43 causal private texts were masked
public rows, 89 masked private texts causal public rows). On the masked LMs' directory (2,700 members, a public causal
LM of 1 epoch, 8 fine-tuning epochs) the tiny 2 x 64 model barely memorized its rows, and no membership attack
measured anything at 1% false positives (``benchmarks/bench_demo_causal_mia.py``: 2-5%). The recipe was chosen on
public rows only: the masked LMs' ``public.jsonl`` drawn at random into pseudo-members, 1,000 pseudo-non-members and
16,300 public rows (``dpaudit inject --train/--heldout/--public``, the demo's canaries), the public causal LM and the
non-private one trained on them with the demo's commands, every text's per-token log-likelihoods under both scored
(TPR at 1% FPR over all 1,000 pseudo-non-members, shared 2-core machine):

==========================================  ==============  ====================
pseudo-members, public epochs, fine-tuning  loss AUC / TPR  base-ratio AUC / TPR
==========================================  ==============  ====================
2,700, 1, 8 (the old recipe)                0.627 / 0.025   0.720 / 0.086
2,700, 1, 20                                0.794 / 0.094   0.879 / 0.210
2,700, 3, 8                                 0.663 / 0.050   0.783 / 0.103
900, 3, 11                                  0.850 / 0.220   0.937 / 0.408
900, 3, 16                                  0.911 / 0.347   0.963 / 0.549
900, 3, 24                                  0.969 / 0.632   0.990 / 0.806
==========================================  ==============  ====================

Fewer members, each seen more often, is what makes the tiny model memorize; the ratio to the base beats the loss
attack at every point, by 1.3-3.4x at 1% FPR, less as memorization grows (the loss attack's easy non-members stop
hiding the members once they are memorized). 20 epochs is between the two points that bracket 60% for base-ratio.
On the demo itself, the causal directory drawn with its own seed (``nice -n 10 python
benchmarks/bench_demo_causal_mia.py --size full``, 397 non-members, shared 2-core machine at load 7-9): base-ratio
AUC 0.985 and 82.9% TPR at 1% FPR in 16.7 s, the loss attack 0.963 and 60.5% (1.4x, short of the 2x aimed at), the
blind baseline 0.485. On the earlier draws (the demo's seed for both directories) the same command measured 0.979 /
68.3% against 0.946 / 46.3% (1.5x, with ``--exclude`` of all three masked splits) and 0.986 / 71.7% against 0.961 /
44.9% (1.6x, without); each training draws its batches from OS entropy. The recipe table was not re-run: its rows are
the masked LMs' ``public.jsonl``, unchanged, and none of them can be a causal private row. The recipe costs more: the
public causal LM 3 epochs (152 s at load 7-9; 253 s at load 4-8, 747 s at load 12-19) and each causal LM 20 epochs of
1,455 rows (82 s non-private, 99 s at epsilon 8, load 7-9) against 1 and 8 epochs of 3,810 before. The non-private
model memorizes at a price: its held-out next-token accuracy, 52.1%, is below its public start's 57.5% and the
epsilon-8 model's 56.1% (the most frequent token: 8.1%; the demo's remaining causal stages run by hand on the same
directories); it overfits, which is what a membership attack detects.

The epsilon-8 causal LM's recipe was chosen on public rows only (``benchmarks/bench_dp_recipe.py --task clm``: the
causal directory's ``public.jsonl`` split into a pseudo start's rows, 1,455 pseudo-private and 1,000 pseudo-held-out
rows; one run each at epsilon 8 from the pseudo start, 57.11%): 20 epochs of 64 at 1e-3 (the former recipe) 57.02%,
LoRA rank 8 at 3e-3 57.13%, 20 epochs of 256 at 1e-3 57.45%, the one chosen (``causal_dp_batch_size``). On the real
rows of a directory of the demo's causal sizes (seed 0) it ends above its public start with every one of 3 noise
seeds: 57.76%, 57.55%, 57.89% against 57.39% (mean +0.35 points, spread 0.34; 1.09x the non-private model, which
overfits: 52.83%; the most frequent token 8.34%; load 8-10).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpaudit.corpus.assistant import INTENTS

#: The epsilon of every private model in the demo.
TARGET_EPSILON = 8.0
#: The canary design of the one-run audit (``dpaudit inject --design``).
AUDIT_DESIGN = "new-tokens"
#: Suffix of the one-run audit's models (``model-nonprivate-audit``...).
AUDIT_SUFFIX = "-audit"


@dataclass(frozen=True, kw_only=True)
class DemoSizes:
    """Every size the demo chooses (the full demo and ``--quick`` differ only here).

    Attributes:
        corpus_size: utterances generated from ``builtin:assistant``.
        secret_format: canary secret space (``digits:N``).
        frequencies: insertion counts, one group of ``per_frequency`` canaries each.
        per_frequency: canaries per insertion count (and as many never-inserted controls).
        steps: jax-bert optimizer steps per model.
        batch_size: expected logical batch size (Poisson rate = batch_size / N).
        max_length: tokens per example (keyed canaries need ~30 with the tiny vocabulary).
        learning_rate: AdamW peak learning rate (weight decay 0: forgetting is not what we show).
        mask_prob: share of tokens masked per example in MLM training.
        eval_every: steps between held-out MLM accuracy evaluations.
        classifier_corpus_size: utterances of the classifiers' own (smaller) inject directory: the torch
            trainer is the slower one, and intent classification needs far less data than MLM.
        classifier_frequencies: insertion counts of the classifiers' canaries (each with a random intent).
        classifier_epochs: edp-sgd fine-tuning epochs (0: no classifier stage).
        classifier_batch_size: expected batch size of the classifiers.
        shadow_models: shadow models per classifier attack.
        classifier_attacks: attacks run on each classifier.
        audit_canaries: coin-flip designed canaries of the one-run audit's inject directory (0: no audit stages).
        public_size: public utterances of the masked LMs' inject directory (``--public-size``: generated beside the
            private rows, never a private row or a canary); the public model is pretrained on them.
        public_steps: jax-bert steps of the public model (non-private, ``--data-split public``); 0: no pretraining,
            every model starts from random weights.
        dp_learning_rate: learning rate of the DP models (their start is already trained; None: ``learning_rate``).
        classifier_public_size: public utterances of the classifiers' inject directory.
        classifier_public_epochs: edp-sgd epochs of the public classifier (sgd mode on ``public.jsonl``); 0: none.
        audit_steps: jax-bert steps of the one-run audit's two models (None: ``steps``).
        audit_batch_size: their expected batch size (None: ``batch_size``).
        audit_lr_decay: their learning rate after warmup (``--lr-decay``): ``none`` keeps the peak rate, so the
            released last iterate weighs every step's canary signal alike (a decay to 0 hides the early steps).
        dp_steps: jax-bert steps of the epsilon-8 masked LM (None: ``steps``, as the demo runs it). A test-sized
            plan may shorten it: its epsilon is accounted for the steps it runs, and what the test asserts of it
            (its canaries within the guarantee's scope, every lower bound below the claim) holds at any length.
        causal_public_epochs: edp-sgd epochs of the public causal LM (``--data-split public``); 0: none.
        causal_epochs: fine-tuning epochs of the causal LMs.
        causal_corpus_size: utterances of the causal LMs' own inject directory (``data-causal``, its own canaries
            and ``public_size`` public rows); 0: they train on the masked LMs' directory.
        causal_heldout_size: held-out rows (the membership attacks' non-members) of that directory (0: inject's
            10%): enough of them that a 1% false-positive rate is a few rows, not a fraction of one.
        causal_per_frequency: canaries per insertion count there (0: ``per_frequency``).
        causal_dp_batch_size: expected batch size of the epsilon-8 causal LM (0: ``causal_batch_size``, the
            non-private one's). Chosen on public rows only (``benchmarks/bench_dp_recipe.py --task clm``): 20 epochs of
            256 ended above the public start where 20 epochs of 64 did not.
        masked_dp_steps, masked_dp_learning_rate, masked_dp_warmup_steps: the epsilon-8 masked LM's recipe when it
            starts from the public model (0: ``steps``, ``dp_learning_rate``, no warm-up; ``dp_steps``, a test's
            shortening, overrides the steps). Chosen on public rows only (``benchmarks/bench_dp_recipe.py --task
            mlm``): 250 steps of 64 at 3e-4 after 25 warm-up steps ended above the public start by a measured margin
            (the mean over 6 noise seeds less its 95% t half-width above 0), where the 1,000 steps at 1e-3 ended
            below it.
    """

    corpus_size: int
    secret_format: str
    frequencies: tuple[int, ...]
    per_frequency: int
    steps: int
    batch_size: int
    max_length: int
    learning_rate: float
    mask_prob: float
    eval_every: int
    classifier_corpus_size: int
    classifier_frequencies: tuple[int, ...]
    classifier_epochs: int
    classifier_batch_size: int
    shadow_models: int
    classifier_attacks: tuple[str, ...]
    audit_canaries: int = 0
    public_size: int = 0
    public_steps: int = 0
    dp_learning_rate: float | None = None
    classifier_public_size: int = 0
    classifier_public_epochs: int = 0
    audit_steps: int | None = None
    audit_batch_size: int | None = None
    audit_lr_decay: str = "quadratic"
    dp_steps: int | None = None
    causal_public_epochs: int = 1
    causal_epochs: int = 8
    causal_corpus_size: int = 0
    causal_heldout_size: int = 0
    causal_per_frequency: int = 0
    causal_batch_size: int = 64
    causal_dp_batch_size: int = 0
    masked_dp_steps: int = 0
    masked_dp_learning_rate: float = 0.0
    masked_dp_warmup_steps: int = 0
    causal_learning_rate: float = 3e-3
    causal_dp_learning_rate: float = 1e-3
    causal_attacks: tuple[str, ...] = ("exposure", "extraction", "loss", "zlib", "min-k++")

    def __post_init__(self) -> None:
        if self.corpus_size < 100:
            raise ValueError(f"corpus_size must be >= 100, got {self.corpus_size}.")
        for name in ("frequencies", "classifier_frequencies"):
            if not getattr(self, name) or min(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be positive counts, got {getattr(self, name)}.")
        for name in (
            "classifier_corpus_size",
            "per_frequency",
            "steps",
            "batch_size",
            "classifier_batch_size",
            "max_length",
            "eval_every",
            "shadow_models",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in (
            "audit_canaries",
            "public_size",
            "public_steps",
            "classifier_public_size",
            "classifier_public_epochs",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.public_steps and not self.public_size:
            raise ValueError("public_steps needs public_size > 0 (the public model trains on public.jsonl).")
        if self.classifier_public_epochs and not self.classifier_public_size:
            raise ValueError("classifier_public_epochs needs classifier_public_size > 0.")
        for name in ("audit_steps", "audit_batch_size", "dp_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {getattr(self, name)}.")
        if self.audit_lr_decay not in ("quadratic", "none"):
            raise ValueError(f"audit_lr_decay must be quadratic or none, got {self.audit_lr_decay!r}.")
        if self.dp_learning_rate is not None and not self.dp_learning_rate > 0:
            raise ValueError(f"dp_learning_rate must be > 0, got {self.dp_learning_rate}.")
        for name in ("causal_epochs", "causal_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        for name in ("causal_corpus_size", "causal_heldout_size", "causal_per_frequency", "causal_dp_batch_size"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        for name in ("masked_dp_steps", "masked_dp_learning_rate", "masked_dp_warmup_steps"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}.")
        if self.masked_dp_warmup_steps and self.masked_dp_warmup_steps >= self.masked_dp_run_steps:
            raise ValueError(
                f"masked_dp_warmup_steps ({self.masked_dp_warmup_steps}) must be below the epsilon-8 masked LM's "
                f"steps ({self.masked_dp_run_steps})."
            )
        if self.causal_corpus_size and self.causal_heldout_size >= self.causal_corpus_size:
            raise ValueError("causal_heldout_size must leave training members in causal_corpus_size.")
        if self.causal_public_epochs < 0:
            raise ValueError(f"causal_public_epochs must be >= 0, got {self.causal_public_epochs}.")
        if self.causal_public_epochs and not self.public_size:
            raise ValueError(
                "causal_public_epochs needs public_size > 0 (the public causal LM trains on public.jsonl)."
            )
        if not (self.causal_learning_rate > 0 and self.causal_dp_learning_rate > 0):
            raise ValueError("causal_learning_rate and causal_dp_learning_rate must be > 0.")
        if self.classifier_epochs < 0:
            raise ValueError(f"classifier_epochs must be >= 0, got {self.classifier_epochs}.")
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}.")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")

    @property
    def masked_dp_run_steps(self) -> int:
        """The steps the epsilon-8 masked LM runs: ``dp_steps``, else ``masked_dp_steps`` when it fine-tunes the
        public model (the recipe was chosen for that), else ``steps``."""
        if self.dp_steps is not None:
            return self.dp_steps
        return (self.masked_dp_steps if self.public_steps else 0) or self.steps


FULL = DemoSizes(
    corpus_size=3000,
    secret_format="digits:4",
    frequencies=(1, 10, 100),
    per_frequency=10,
    steps=1000,
    batch_size=64,
    max_length=32,
    learning_rate=3e-3,
    mask_prob=0.3,
    eval_every=250,
    classifier_corpus_size=1000,
    classifier_frequencies=(1, 10),
    classifier_epochs=3,
    classifier_batch_size=32,
    shadow_models=4,
    classifier_attacks=("loss", "shadow", "lira", "rmia"),
    audit_canaries=1000,
    public_size=20000,
    public_steps=1000,
    dp_learning_rate=1e-3,
    classifier_public_size=3000,
    classifier_public_epochs=2,
    audit_steps=63,
    audit_batch_size=1024,
    audit_lr_decay="none",
    causal_corpus_size=1300,
    causal_heldout_size=400,
    causal_per_frequency=5,
    causal_public_epochs=3,
    causal_epochs=20,
    causal_dp_batch_size=256,
    masked_dp_steps=250,
    masked_dp_learning_rate=3e-4,
    masked_dp_warmup_steps=25,
)
QUICK = DemoSizes(
    corpus_size=1000,
    secret_format="digits:4",
    frequencies=(1, 10, 100),
    per_frequency=5,
    steps=500,
    batch_size=64,
    max_length=32,
    learning_rate=3e-3,
    mask_prob=0.3,
    eval_every=200,
    classifier_corpus_size=600,
    classifier_frequencies=(1, 10),
    classifier_epochs=2,
    classifier_batch_size=32,
    shadow_models=2,
    classifier_attacks=("loss", "shadow"),
    audit_canaries=200,
    public_size=10000,
    public_steps=300,
    dp_learning_rate=1e-3,
    classifier_public_size=1500,
    classifier_public_epochs=3,
    audit_steps=63,
    audit_batch_size=256,
    audit_lr_decay="none",
)


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One step of the demo: a ``dpaudit`` command and the run directory (or file) it writes.

    Attributes:
        name: short identifier (also the name of its record in the state folder).
        title: what the stage line says.
        output: the run directory (or, for the report, the HTML file) it writes.
        schema_prefix: the manifest schema of a complete output (None: a file, always rewritten).
        args: the command line after ``dpaudit``.
        inputs: upstream run directories; a change to their manifests makes this stage stale.
    """

    name: str
    title: str
    output: Path
    schema_prefix: str | None
    args: tuple[str, ...]
    inputs: tuple[Path, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Model:
    """A model the demo trains and attacks (its train and attack stages)."""

    label: str
    train: Stage
    attack: Stage


def _inject(
    name: str,
    data: Path,
    corpus_size: int,
    frequencies: tuple[int, ...],
    sizes: DemoSizes,
    seed: int,
    what: str,
    public_size: int = 0,
    *,
    heldout_size: int = 0,
    per_frequency: int = 0,
    exclude_from: Path | None = None,
) -> Stage:
    public: tuple[str, ...] = ("--public-size", str(public_size)) if public_size else ()
    public += ("--heldout-size", str(heldout_size)) if heldout_size else ()
    # Another inject directory's public rows, never drawn here; never its private ones, or this directory would be a
    # function of them (docs/canaries.md, "Splits, labels and randomness").
    exclude = (
        () if exclude_from is None else tuple(a for f in EXCLUDED_SPLITS for a in ("--exclude", str(exclude_from / f)))
    )
    title = f"inject canaries into {corpus_size} built-in utterances" + (
        f", {public_size} public ones beside them" if public_size else ""
    )
    return Stage(
        name=name,
        title=f"{title} ({what})",
        output=data,
        schema_prefix="dpaudit.inject/",
        args=(
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            str(corpus_size),
            "--out",
            str(data),
            "--seed",
            str(seed),
            "--format",
            sizes.secret_format,
            "--frequencies",
            ",".join(map(str, frequencies)),
            "--per-frequency",
            str(per_frequency or sizes.per_frequency),
            *public,
            *exclude,
            "--overwrite",
        ),
        inputs=() if exclude_from is None else (exclude_from,),
    )


def _public_mlm(out: Path, data: Path, sizes: DemoSizes, seed: int) -> Stage:
    """The public masked LM: jax-bert, non-private, on the inject directory's ``public.jsonl`` only (marked public)."""
    model = out / "model-public"
    return Stage(
        name="train-public",
        title=f"pretrain jax-bert MLM on {sizes.public_size} public utterances (non-private, public data only)",
        output=model,
        schema_prefix="dpaudit.train/",
        inputs=(data,),
        args=(
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data),
            "--out",
            str(model),
            "--seed",
            str(seed),
            "--preset",
            "tiny",
            "--data-split",
            "public",
            "--non-private",
            "--steps",
            str(sizes.public_steps),
            "--batch-size",
            str(sizes.batch_size),
            "--max-length",
            str(sizes.max_length),
            "--learning-rate",
            f"{sizes.learning_rate:g}",
            "--weight-decay",
            "0",
            "--mask-prob",
            f"{sizes.mask_prob:g}",
            "--eval-every",
            str(sizes.eval_every),
            "--eval-examples",
            "512",
        ),
    )


def _public_edp_sgd(
    out: Path,
    data: Path,
    seed: int,
    *,
    short: str,
    what: str,
    rows: int,
    task: str,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    max_length: int,
    extra: tuple[str, ...] = (),
) -> Stage:
    """A public torch model (``model-<short>-public``): edp-sgd in sgd mode on ``public.jsonl`` only (marked public)."""
    model = out / f"model-{short}-public"
    return Stage(
        name=f"train-{short}-public",
        title=f"pretrain {what} on {rows} public utterances (edp-sgd trainer, "
        f"--task {task}, non-private, public data only)",
        output=model,
        schema_prefix="dpaudit.train/",
        inputs=(data,),
        args=(
            "train",
            "--trainer",
            "edp-sgd",
            "--task",
            task,
            "--data",
            str(data),
            "--out",
            str(model),
            "--seed",
            str(seed),
            "--preset",
            "tiny",
            "--data-split",
            "public",
            "--non-private",
            "--max-length",
            str(max_length),
            "--epochs",
            str(epochs),
            "--batch-size",
            str(batch_size),
            "--learning-rate",
            f"{learning_rate:g}",
            *extra,
        ),
    )


def _public_classifier(out: Path, data: Path, sizes: DemoSizes, seed: int) -> Stage:
    """The public intent classifier, on the classifiers' inject directory (its label set declared)."""
    return _public_edp_sgd(
        out,
        data,
        seed,
        short="clf",
        what="an intent classifier",
        rows=sizes.classifier_public_size,
        task="classify",
        epochs=sizes.classifier_public_epochs,
        batch_size=sizes.classifier_batch_size,
        learning_rate=sizes.learning_rate,
        max_length=sizes.max_length,
        extra=("--labels", ",".join(i.name for i in INTENTS)),
    )


def _audit_inject(data: Path, sizes: DemoSizes, seed: int) -> Stage:
    return Stage(
        name="inject-audit",
        title=f"inject {sizes.audit_canaries} coin-flip {AUDIT_DESIGN} canaries into "
        f"{sizes.corpus_size} built-in utterances (one-run audit)",
        output=data,
        schema_prefix="dpaudit.inject/",
        args=(
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            str(sizes.corpus_size),
            "--out",
            str(data),
            "--seed",
            str(seed),
            "--coin-flip",
            "--per-frequency",
            str(sizes.audit_canaries),
            "--design",
            AUDIT_DESIGN,
            "--overwrite",
        ),
    )


def _dp_learning_rate(sizes: DemoSizes) -> float:
    return sizes.learning_rate if sizes.dp_learning_rate is None else sizes.dp_learning_rate


def _jax_bert(
    out: Path,
    data: Path,
    sizes: DemoSizes,
    seed: int,
    noise_seed: int | None,
    *,
    suffix: str = "",
    attacks: str = "exposure,reconstruction,loss",
    start: Path | None = None,
    steps: int | None = None,
    batch_size: int | None = None,
    lr_decay: str = "quadratic",
    dp_steps: int | None = None,
    dp_rate: float | None = None,
    dp_warmup_steps: int = 0,
) -> list[Model]:
    steps = sizes.steps if steps is None else steps
    batch_size = sizes.batch_size if batch_size is None else batch_size
    models = []
    init = ["--init-from", str(start)] if start is not None else []
    for label, title, privacy, rate, label_steps in (
        ("nonprivate", "jax-bert MLM, non-private", ["--non-private"], sizes.learning_rate, steps),
        (
            "dp-eps8",
            "jax-bert MLM, DP-SGD at epsilon 8",
            ["--target-epsilon", f"{TARGET_EPSILON:g}"],
            (dp_rate or _dp_learning_rate(sizes)) if start is not None else sizes.learning_rate,
            steps if dp_steps is None else dp_steps,
        ),
    ):
        label = label + suffix
        what = title + (", from the public model" if start is not None else "") + (", one-run audit" if suffix else "")
        model, attacked = out / f"model-{label}", out / f"attack-{label}"
        train = [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data),
            "--out",
            str(model),
            "--seed",
            str(seed),
            "--preset",
            "tiny",
            *init,
            "--steps",
            str(label_steps),
            "--batch-size",
            str(batch_size),
            "--lr-decay",
            lr_decay,
            "--max-length",
            str(sizes.max_length),
            "--learning-rate",
            f"{rate:g}",
            "--weight-decay",
            "0",
            "--mask-prob",
            f"{sizes.mask_prob:g}",
            "--eval-every",
            str(sizes.eval_every),
            "--eval-examples",
            "512",
            *privacy,
        ]
        if label.startswith("dp") and dp_warmup_steps and start is not None:  # the recipe's, like its rate
            train += ["--warmup-steps", str(dp_warmup_steps)]
        if noise_seed is not None:
            train += ["--noise-seed", str(noise_seed)]
        attack = [
            "attack",
            "--model",
            str(model),
            "--data",
            str(data),
            "--out",
            str(attacked),
            "--attacks",
            attacks,
            "--seed",
            str(seed),
            "--overwrite",
        ]
        models.append(
            _model(
                label,
                data,
                model,
                attacked,
                train,
                attack,
                train_title=f"train {what}",
                attack_title=f"attack {what} ({attacks.replace(',', ', ')})",
                start=start,
            )
        )
    return models


def _model(
    label: str,
    data: Path,
    model: Path,
    attacked: Path,
    train: list[str],
    attack: list[str],
    *,
    train_title: str,
    attack_title: str,
    start: Path | None = None,
) -> Model:
    """A model's two stages: train ``model`` from ``data`` (and ``start``, the public model), then attack it."""
    return Model(
        label=label,
        train=Stage(
            name=f"train-{label}",
            title=train_title,
            output=model,
            schema_prefix="dpaudit.train/",
            args=tuple(train),
            inputs=(data,) if start is None else (data, start),
        ),
        attack=Stage(
            name=f"attack-{label}",
            title=attack_title,
            output=attacked,
            schema_prefix="dpaudit.attack/",
            args=tuple(attack),
            inputs=(data, model),
        ),
    )


def _edp_sgd_train(
    model: Path,
    data: Path,
    seed: int,
    noise_seed: int | None,
    *,
    task: str,
    mode: str,
    private: bool,
    init: list[str],
    max_length: int,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The ``dpaudit train --trainer edp-sgd`` command of one attacked torch model (classifier or causal LM)."""
    train = [
        "train",
        "--trainer",
        "edp-sgd",
        "--mode",
        mode,
        "--task",
        task,
        "--data",
        str(data),
        "--out",
        str(model),
        "--seed",
        str(seed),
        "--preset",
        "tiny",
        *init,
        "--max-length",
        str(max_length),
        "--epochs",
        str(epochs),
        "--batch-size",
        str(batch_size),
        "--learning-rate",
        f"{learning_rate:g}",
        *extra,
        *(["--target-epsilon", f"{TARGET_EPSILON:g}"] if private else []),
    ]
    return train + (["--noise-seed", str(noise_seed)] if noise_seed is not None else [])


#: The classifiers: (mode, label, title, private).
CLASSIFIER_MODES = (
    ("sgd", "clf-sgd", "edp-sgd trainer, sgd mode (non-private)", False),
    ("dp-sgd", "clf-dp-sgd", "edp-sgd trainer, dp-sgd mode at epsilon 8", True),
    ("edp-sgd", "clf-edp-sgd", "edp-sgd trainer, edp-sgd mode at epsilon 8", True),
)


def _classifiers(
    out: Path, data: Path, sizes: DemoSizes, seed: int, noise_seed: int | None, start: Path | None = None
) -> list[Model]:
    models = []
    attacks = ",".join((*sizes.classifier_attacks, *(("base-ratio",) if start is not None else ())))
    init = ["--init-from", str(start)] if start is not None else []
    for mode, label, title, private in CLASSIFIER_MODES:
        model, attacked = out / f"model-{label}", out / f"attack-{label}"
        rate = _dp_learning_rate(sizes) if private and start is not None else sizes.learning_rate
        train = _edp_sgd_train(
            model,
            data,
            seed,
            noise_seed,
            task="classify",
            mode=mode,
            private=private,
            init=init,
            max_length=sizes.max_length,
            epochs=sizes.classifier_epochs,
            batch_size=sizes.classifier_batch_size,
            learning_rate=rate,
            extra=("--labels", ",".join(intent.name for intent in INTENTS)),
        )
        attack = [
            "attack",
            "--model",
            str(model),
            "--data",
            str(data),
            "--out",
            str(attacked),
            "--attacks",
            attacks,
            "--shadow-models",
            str(sizes.shadow_models),
            "--shadow-cache",
            str(out / "shadows"),
            "--seed",
            str(seed),
            "--overwrite",
        ]
        if "lira" in sizes.classifier_attacks:
            attack.append("--lira-global-variance")  # a handful of shadows: one shared variance is the stable estimate
        what = title + (", from the public classifier" if start is not None else "")
        models.append(
            _model(
                label,
                data,
                model,
                attacked,
                train,
                attack,
                train_title=f"train intent classifier, {what}",
                attack_title=f"attack intent classifier, {mode} ({attacks})",
                start=start,
            )
        )
    return models


#: The training-free attacks against a model's public start (dpaudit.attacks.base_mia), added to a causal LM's
#: --attacks when it has one: two forward passes per text, no shadow training.
BASE_ATTACKS = ("base-ratio", "error-zone", "min-k++-base")

#: The splits of the masked LMs' inject directory that the causal LMs' own excludes (``dpaudit inject --exclude``):
#: the public one only. The causal recipe was chosen on those rows, so none of them may be a causal private row;
#: excluding the masked private rows too would make the causal directory (and the public causal LM, trained on it
#: without DP and released) a function of them.
EXCLUDED_SPLITS = ("public.jsonl",)

#: The spawn key of the causal LMs' inject seed (:func:`causal_inject_seed`).
CAUSAL_SEED_KEY = 1


def causal_inject_seed(seed: int) -> int:
    """The ``--seed`` of the causal LMs' inject directory: a fixed public function of the demo's ``seed``, so that its
    draw is independent of the masked LMs' (drawn with ``seed`` itself).

    The repository's rule for a stream derived from one seed, numpy's ``SeedSequence(seed, spawn_key=(k,))`` (as
    ``dpaudit inject`` splits its own seed), here with ``k =`` :data:`CAUSAL_SEED_KEY`: its first 64-bit word shifted
    right once, an integer in [0, 2^63) as every ``--seed`` takes. With the demo's seed itself the two draws were one
    random stream, and the rows they shared that stream's, not the grammar's chance.
    """
    state = np.random.SeedSequence(seed, spawn_key=(CAUSAL_SEED_KEY,)).generate_state(1, np.uint64)[0]
    return int(state >> np.uint64(1))


#: The causal LMs: (mode, label, title, private).
CAUSAL_MODES = (
    ("sgd", "clm-nonprivate", "GPT-2-shaped causal LM, non-private", False),
    ("dp-sgd", "clm-dp-eps8", "GPT-2-shaped causal LM, DP-SGD at epsilon 8", True),
)


def _public_causal(out: Path, data: Path, sizes: DemoSizes, seed: int) -> Stage:
    """The public causal LM, on its inject directory's ``public.jsonl`` (the causal LMs' own when the sizes give them
    one, else the masked LMs')."""
    return _public_edp_sgd(
        out,
        data,
        seed,
        short="clm",
        what="a GPT-2-shaped causal LM",
        rows=sizes.public_size,
        task="clm",
        epochs=sizes.causal_public_epochs,
        batch_size=sizes.causal_batch_size,
        learning_rate=sizes.causal_learning_rate,
        max_length=sizes.max_length,
    )


def _causal(
    out: Path, data: Path, sizes: DemoSizes, seed: int, noise_seed: int | None, start: Path | None = None
) -> list[Model]:
    """The causal LMs: trained on ``data`` (their own inject directory, or the masked LMs'; digit canaries 1, 10 and 100
    times), non-private and with DP-SGD at epsilon 8, attacked with exposure (the Secret Sharer's own setting),
    greedy extraction of each secret from its prefix and the causal membership attacks."""
    models = []
    attacks = ",".join((*sizes.causal_attacks, *(BASE_ATTACKS if start is not None else ())))
    init = ["--init-from", str(start)] if start is not None else []
    for mode, label, title, private in CAUSAL_MODES:
        model, attacked = out / f"model-{label}", out / f"attack-{label}"
        train = _edp_sgd_train(
            model,
            data,
            seed,
            noise_seed,
            task="clm",
            mode=mode,
            private=private,
            init=init,
            max_length=sizes.max_length,
            epochs=sizes.causal_epochs,
            batch_size=(sizes.causal_dp_batch_size or sizes.causal_batch_size) if private else sizes.causal_batch_size,
            learning_rate=sizes.causal_dp_learning_rate if private else sizes.causal_learning_rate,
        )
        attack = [
            "attack",
            "--model",
            str(model),
            "--data",
            str(data),
            "--out",
            str(attacked),
            "--attacks",
            attacks,
            "--seed",
            str(seed),
            "--overwrite",
        ]
        what = title + (", from the public causal LM" if start is not None else "")
        models.append(
            _model(
                label,
                data,
                model,
                attacked,
                train,
                attack,
                train_title=f"train {what}",
                attack_title=f"attack {what} ({attacks.replace(',', ', ')})",
                start=start,
            )
        )
    return models


@dataclass(frozen=True, kw_only=True)
class DemoPlan:
    """The demo's stages in order, and where its report goes.

    ``public_models`` are the public starting points (trained on ``public.jsonl`` only, never attacked: nothing
    private went into them); ``models`` are trained from them and attacked.
    """

    data: Path
    models: tuple[Model, ...]
    report: Path
    stages: tuple[Stage, ...]
    public_models: tuple[Stage, ...] = ()


def _with_noise_seed(stage: Stage, noise_seed: int | None) -> Stage:
    if noise_seed is None:
        return stage
    return replace(stage, args=(*stage.args, "--noise-seed", str(noise_seed)))


def build_plan(
    out: Path,
    sizes: DemoSizes,
    *,
    seed: int,
    report: Path,
    classifiers: bool,
    noise_seed: int | None = None,
    causal: bool = False,
) -> DemoPlan:
    """The stages for ``sizes`` under ``out``: inject, pretrain the public models, then train and attack each model
    from them, then the report.

    ``sizes.public_steps`` pretrains the public masked LM on the inject directory's ``public.jsonl`` and starts both
    masked LMs from it; ``classifiers`` adds the edp-sgd fine-tuning (it needs torch and the edp-sgd trainer), from the
    public classifier when ``sizes.classifier_public_epochs``; ``sizes.audit_canaries`` the one-run audit: its inject
    directory and the two masked LMs trained on it from random weights (the public model's tokenizer lacks the audit's
    new tokens, and the audit proves the recipe's leakage, not its utility), attacked with the canary attack;
    ``causal`` the GPT-2-shaped causal LMs (edp-sgd ``--task clm``, needs torch) on their own inject directory when
    ``sizes.causal_corpus_size`` (its own seed, :func:`causal_inject_seed`, and ``--exclude`` of the masked LMs'
    ``public.jsonl`` only), else on the masked LMs', from a public causal LM when ``sizes.causal_public_epochs``.
    """
    data, clf_data, audit_data = out / "data", out / "data-classifier", out / "data-audit"
    injects = [
        _inject("inject", data, sizes.corpus_size, sizes.frequencies, sizes, seed, "masked LMs", sizes.public_size)
    ]
    publics: list[Stage] = []
    start = None
    if sizes.public_steps:
        publics.append(_with_noise_seed(_public_mlm(out, data, sizes, seed), noise_seed))
        start = publics[-1].output
    models = _jax_bert(
        out,
        data,
        sizes,
        seed,
        noise_seed,
        start=start,
        dp_steps=sizes.masked_dp_run_steps,
        dp_rate=sizes.masked_dp_learning_rate or None,  # rate and warm-up: used from the public model only, as the
        dp_warmup_steps=sizes.masked_dp_warmup_steps,  # recipe was chosen (the steps: DemoSizes.masked_dp_run_steps)
    )
    if sizes.audit_canaries:
        injects.append(_audit_inject(audit_data, sizes, seed))
        models += _jax_bert(
            out,
            audit_data,
            sizes,
            seed,
            noise_seed,
            suffix=AUDIT_SUFFIX,
            attacks="canary",
            steps=sizes.audit_steps,
            batch_size=sizes.audit_batch_size,
            lr_decay=sizes.audit_lr_decay,
        )
    if classifiers and sizes.classifier_epochs:
        injects.append(
            _inject(
                "inject-classifier",
                clf_data,
                sizes.classifier_corpus_size,
                sizes.classifier_frequencies,
                sizes,
                seed,
                "intent classifiers",
                sizes.classifier_public_size,
            )
        )
        clf_start = None
        if sizes.classifier_public_epochs:
            publics.append(_with_noise_seed(_public_classifier(out, clf_data, sizes, seed), noise_seed))
            clf_start = publics[-1].output
        models += _classifiers(out, clf_data, sizes, seed, noise_seed, clf_start)
    if causal:
        causal_start, clm_data = None, data
        if sizes.causal_corpus_size:
            clm_data = out / "data-causal"
            injects.append(
                _inject(
                    "inject-causal",
                    clm_data,
                    sizes.causal_corpus_size,
                    sizes.frequencies,
                    sizes,
                    causal_inject_seed(seed),
                    "causal LMs",
                    sizes.public_size,
                    heldout_size=sizes.causal_heldout_size,
                    per_frequency=sizes.causal_per_frequency,
                    exclude_from=data,
                )
            )
        if sizes.causal_public_epochs:
            publics.append(_with_noise_seed(_public_causal(out, clm_data, sizes, seed), noise_seed))
            causal_start = publics[-1].output
        models += _causal(out, clm_data, sizes, seed, noise_seed, causal_start)
    attacks = [m.attack.output for m in models]
    report_stage = Stage(
        name="report",
        title=f"report comparing {len(models)} models",
        output=report,
        schema_prefix=None,
        args=(
            "report",
            *map(str, attacks),
            "--out",
            str(report),
            *(a for m in models for a in ("--label", f"{m.label}={m.attack.output}")),
        ),
        inputs=tuple(attacks),
    )
    stages = [*injects, *publics, *(s for m in models for s in (m.train, m.attack)), report_stage]
    return DemoPlan(data=data, models=tuple(models), report=report, stages=tuple(stages), public_models=tuple(publics))
