"""``dpaudit train --trainer jax-bert``: DP-SGD masked-LM pretraining of BERT (Anil et al. 2021).

The run itself is the core's :class:`dpaudit.training.RunSkeleton` (run directory, privacy plan and
ledger, secret Poisson sampling, the step loop with its budget stop, checkpoints, metrics and the one
``privacy.json`` builder); this module is its :class:`~dpaudit.training.TrainerPlugin`, composing the
pieces that each live in their own module and know nothing of the others: the tokenizer and masking
(:mod:`.tokenizer`, :mod:`.data`), the Flax model (:mod:`.model`), micro-step packing
(:mod:`.sampling`), the clipped-and-noised step that owns its sensitivity (:mod:`.dp_step`), the
optimizer (:mod:`.optimizer`), data parallelism (:mod:`.parallel`), checkpoints (:mod:`.checkpoint`)
and the Hugging Face export (:mod:`.hf_io`).

A run, in order (docs/trainers.md, "The run skeleton"):

1. verify the inject directory against its manifest; read ``train.jsonl`` (the private data; ``public.jsonl``
   with ``--data-split public``), ``heldout.jsonl`` (evaluation) and ``public.jsonl`` (the tokenizer's ONLY
   input); with ``--init-from`` the start's parameters, architecture and tokenizer instead
   (:func:`~trainers.jax_bert.hf_io.load_pretrained`, the inverse of the export);
2. plan the privacy of the whole run before anything is written: segments of (steps, expected batch),
   sigma given or calibrated for ``--target-epsilon``, the ledger certifies the plan; a plan that
   cannot take a single step within the budget is refused up front;
3. loop: Poisson-sample indices with the secret numpy Generator, pack them into fixed-shape micro-step
   chunks, mask on device, run the DP (or non-private) step. Each step is recorded in the ledger
   *before* it runs, so the ledger refuses a step that would overspend and the run stops there,
   cleanly. Host syncs happen only every ``--log-every`` steps;
4. checkpoint atomically every ``--checkpoint-every`` steps; a rerun of the same command resumes from
   the newest checkpoint with the same ledger and RNG streams (so interrupted + resumed == straight);
5. at the end write ``model/``, ``metrics.jsonl``, ``privacy.json`` and ``manifest.json``, each atomically
   (the manifest last: a train directory with a manifest is complete), then delete ``checkpoints/``
   unless ``--keep-checkpoints`` (they hold the secret noise state). Rerunning a finished run returns
   its result without training.

Randomness (docs/privacy.md, "The randomness the guarantee relies on is secret"). The mechanism's randomness is secret and comes from
:class:`dpaudit.training.noise_source.NoiseSource` (OS entropy, or ``--noise-seed``), never from ``--seed``:

- Poisson sampling: ``numpy.random.default_rng([noise_seed, 0])``; shuffled batches of schedule
  segment ``s``: ``default_rng([noise_seed, 1, s])``;
- DP noise of (0-based) step ``t``: ``fold_in(noise_key, t)``, where ``noise_key`` is a raw threefry
  key (64 bits: JAX's default PRNG key holds no more) made of the first 8 bytes of a BLAKE2b hash of
  the whole secret seed (all 128 bits of an OS-entropy seed: :func:`noise_key_of`).

So a run is bit-identical at a fixed ``--noise-seed`` (and ``--seed``). The public ``--seed`` drives
what needs no secrecy: initialization, the heldout evaluation masks and the training masks. An
example's mask key is ``fold_in(fold_in(fold_in(fold_in(train_key, step), 0), k0), k1)`` with
``(k0, k1)`` its content key (a 64-bit BLAKE2b hash of its own token ids,
:func:`trainers.jax_bert.data.content_keys`): a function of that example and public values only,
never of its index in the file or its batch slot (docs/privacy.md, "One example's contribution"), so adding, removing or
duplicating one row never changes another example's mask (its gradient, hence the sensitivity,
stays that of per-example clipping).

White-box audit (:class:`dpaudit.training.gradient_canaries.GradientCanaryHost`, after Nasr et al. 2023,
"Tight Auditing of Differentially Private Machine Learning"): :meth:`_Plugin.host_gradient_canaries`,
called before the run, appends ``canaries.rows`` audit rows after the N real rows (the skeleton samples
N + rows indices with the same secret Poisson sampling). A sampled audit row is a Dirac canary: its
gradient ``gain * e_c`` lives on an *audit block* of trained scalars beside the model
(:class:`~trainers.jax_bert.dp_step.AuditBlock`), is clipped by the engine's own rule and summed in the
jitted step (:meth:`~trainers.jax_bert.dp_step._Engine.audit_step`); the block is noised by the same
draw as the model and updated by the same AdamW, and its noisy clipped sum is handed to
``canaries.observe`` after each step. Real rows keep their slots and their clipped sum; a run without
canaries runs exactly the code it ran before (no extra host sync, no extra compilation). The block is
neither exported nor checkpointed.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from dpaudit import accounting
from dpaudit.common.errors import UserInputError
from dpaudit.inject_dir.reader import (
    PUBLIC,
    InjectRun,
    load_inject_run,
)
from dpaudit.trainers.jax_bert import checkpoint as ckpt
from dpaudit.trainers.jax_bert import cpu_runtime, dp_step, hf_io, parallel, sampling
from dpaudit.trainers.jax_bert.config import TINY_SETTINGS, JaxBertConfig
from dpaudit.trainers.jax_bert.data import encode_texts, mask_tokens
from dpaudit.trainers.jax_bert.ghost_clipping import EMBEDDING_TABLES, make_ghost_clipped_sum_fn
from dpaudit.trainers.jax_bert.model import (
    FlaxBertForMaskedLM,
    example_mlm_loss,
    init_params,
    preset_config,
)
from dpaudit.trainers.jax_bert.optimizer import init_optimizer, make_optimizer
from dpaudit.training import ClippedSumStep, RecordParts, RunData, RunSettings, RunSkeleton, TrainerPlugin
from dpaudit.training.api import TrainResult
from dpaudit.training.baselines import MLM_BASELINE_KEY, MLM_BASELINE_RULE, constant_prediction_accuracy, eval_rows
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, GradientCanaries
from dpaudit.training.noise_source import NoiseSource
from dpaudit.training.privacy_plan import PrivacyPlan, plan_privacy
from dpaudit.training.sampling import Sampler, SequentialPoisson
from dpaudit.training.starting_point import SPLIT_FILES, StartingPoint, run_inputs
from dpaudit.training.tokenizer import missing_new_tokens, special_token_ids, train_wordpiece

SHUFFLE_NOTE = (
    "fixed-size shuffled batches were used (--sampling shuffle): no epsilon is proven for them, so 'epsilon' "
    "is null; 'epsilon_if_poisson' is what the run would spend if its batches had been Poisson-sampled with "
    "q = batch/N, which this run did NOT use."
)
TOKENIZER_NOTE = "tokenizer: WordPiece trained on public.jsonl only (never on train.jsonl or the canaries)."
START_TOKENIZER_NOTE = "tokenizer: the starting point's tokenizer.json ({start}), as it came."

# Independent PRNG streams of the PUBLIC seed (jax.random.fold_in(PRNGKey(seed), stream)).
_INIT_STREAM, _TRAIN_STREAM, _EVAL_STREAM = 0, 1, 2
# Streams of the SECRET noise seed (numpy SeedSequence entropy [noise_seed, stream, ...]).
_POISSON_STREAM, _SHUFFLE_STREAM = 0, 1


def noise_key_of(source: NoiseSource) -> jax.Array:
    """The JAX key of the DP noise: the raw threefry key ``uint32[2]`` ``source.hashed_words(2, "jax-noise")``.

    JAX's default key holds 64 bits, so the key cannot carry a 128-bit seed: it is 64 bits of a
    BLAKE2b hash of the whole seed (:meth:`~dpaudit.training.noise_source.NoiseSource.hashed_words`), so every
    seed bit changes it (the former ``fold_in(PRNGKey(w0), w1)`` of two XOR-folded words used at most
    64 bits: seeds ``s`` and ``s ^ x ^ (x << 64)`` gave the same noise). An adversary must still search
    2**64 keys. Step ``t`` draws its noise from ``fold_in(noise_key_of(source), t)``.
    """
    return jnp.asarray(source.hashed_words(2, "jax-noise"), dtype=jnp.uint32)


class JaxBertTrainer:
    """DP-SGD BERT masked-LM pretraining in JAX/Flax; registered as ``jax-bert``."""

    name: ClassVar[str] = "jax-bert"
    Config: ClassVar[type] = JaxBertConfig

    @property
    def Plugin(self) -> type:  # noqa: N802 (a class, as the contract suite reads it)
        """The :class:`~dpaudit.training.TrainerPlugin` class this trainer runs on the core skeleton."""
        return _Plugin

    def writes_run_dir(self) -> bool:
        """Only process 0 of a multi-host run writes the run directory, so only it takes the lock."""
        return parallel.env_process_index() == 0

    def train(self, data_dir: Path, out_dir: Path, config: JaxBertConfig, *, seed: int) -> TrainResult:
        """Train on an inject run directory and write (or resume) the train run directory ``out_dir``.

        Raises:
            UserInputError: bad data, a plan that cannot fit the budget, or an ``out_dir`` holding a
                different run; raised before anything is written.
        """
        return _Plugin(Path(data_dir), Path(out_dir), config, seed=seed).execute()

    def tiny_config(self, **overrides: Any) -> JaxBertConfig:
        """A 2-layer, hidden-64 model on 16-token texts, 6 steps of 16 (the contract suite's run)."""
        return JaxBertConfig(**{**TINY_SETTINGS, **overrides})


# ----------------------------------------------------------------------------------------------
# Inputs and planning (nothing is written until these pass).


def load_inject_dir(data_dir: Path, *, split: str = "train") -> InjectRun:
    """The verified inject directory (:func:`dpaudit.inject_dir.reader.load_inject_run`), whose split trained on
    (``split``: ``train`` or ``public``) and public split must not be empty."""
    data = load_inject_run(data_dir)
    if not data.split(SPLIT_FILES[split]).texts:
        raise UserInputError(f"{data_dir / SPLIT_FILES[split]} is empty; there is nothing to train on.")
    if not data.public_texts:
        raise UserInputError(
            f"{data_dir / PUBLIC} is empty; the tokenizer is trained on it only (rerun inject with a public split)."
        )
    return data


#: The :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the DP noise (:func:`trainers.jax_bert.dp_step.wide_normal`):
#: Box-Muller with a 96-bit radius uniform, reach 11.596 sigma; the plan counts its tail inside delta.
NOISE_SAMPLER = "jax-bm96"


def plan_options(config: JaxBertConfig) -> dict[str, Any]:
    """The keyword arguments of :func:`~dpaudit.training.privacy_plan.plan_privacy` this config sets: its
    (steps, batch) schedule, sigma given or calibrated for ``--target-epsilon``, the declared size."""
    return {
        "stages": config.schedule,
        "non_private": config.non_private,
        "noise_multiplier": config.noise_multiplier,
        "target_epsilon": config.target_epsilon,
        "delta": config.delta,
        "declared_size": config.dataset_size,
        "batch_option": "--batch-schedule" if config.batch_schedule else "--batch-size",
        "noise_sampler": NOISE_SAMPLER,
        "accept_noise_tail": config.accept_noise_tail,
    }


def plan_run_privacy(config: JaxBertConfig, dataset_size: int) -> PrivacyPlan:
    """The run's :class:`~dpaudit.training.privacy_plan.PrivacyPlan` as the skeleton makes it: per-example clipping
    (the step's sensitivity factor 1); q = batch / ``--dataset-size`` when a public size is declared,
    else batch / N (N treated as public).

    Raises:
        UserInputError: a batch larger than the data, or a budget too small for one step.
    """
    return plan_privacy(dataset_size=dataset_size, sensitivity_factor=1.0, **plan_options(config))


def ledger_sampling(config: JaxBertConfig) -> str:
    """The ledger's sampling label: ``poisson`` or ``shuffle``."""
    return "poisson" if config.sampling == "poisson" else "shuffle"


# ----------------------------------------------------------------------------------------------
# Compiled functions, shared by every run of the same shapes in a process.


@dataclass(frozen=True)
class _Compiled:
    model: FlaxBertForMaskedLM
    optimizer: Any
    step: Any  # dp_step.StepFn
    mask_batch: Any  # jit: (key, content_key [..., 2], input_ids [..., L], attention_mask [..., L]) -> masked dict
    eval_sums: Any  # jit: (params, batch [B, ...], weights [B]) -> [loss_sum, n_correct, n_predictions]


def parameter_keys(params: Any) -> frozenset[dp_step.Key]:
    """Every parameter's path in ``params`` (arrays or shapes)."""
    return frozenset(dp_step.path_key(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0])


def frozen_parameters(freeze: str, keys: frozenset[dp_step.Key]) -> frozenset[dp_step.Key]:
    """The parameter paths ``--freeze`` leaves untrained among the model's parameter paths ``keys``: none; the three
    embedding tables; ``below-top``: everything below the top encoder layer (the embeddings, their LayerNorm and
    every lower layer; the top layer and the MLM head train); ``weights``: every weight matrix and table, so only
    the biases and LayerNorm parameters train (BitFit, Ben Zaken et al. 2022; under DP, Bu et al. 2022,
    "Differentially Private Bias-Term only Fine-tuning"). docs/trainers.md, "Frozen parameters"."""
    if freeze == "none":
        return frozenset()
    if freeze == "embeddings":
        return EMBEDDING_TABLES
    if freeze == "weights":
        return frozenset(key for key in keys if key[-1] not in ("bias", "scale"))
    if freeze == "below-top":
        layers = [key for key in keys if key[:3] == ("bert", "encoder", "layer")]
        top = str(max(int(key[3]) for key in layers))
        below = {key for key in layers if key[3] != top}
        return frozenset(below | {key for key in keys if key[:2] == ("bert", "embeddings")})
    raise ValueError(f"--freeze {freeze!r} is not one of none, embeddings, below-top, weights.")


def trained_parameters(params: Any, freeze: str) -> dict[str, Any]:
    """What the run trains, for privacy.json's mechanism and the summary: ``--freeze`` and the trained and frozen
    parameter counts."""
    frozen = frozen_parameters(freeze, parameter_keys(params))
    sizes = {
        dp_step.path_key(path): int(np.prod(leaf.shape))
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    frozen_count = sum(n for key, n in sizes.items() if key in frozen)
    return {
        "freeze": freeze,
        "trained_parameters": sum(sizes.values()) - frozen_count,
        "frozen_parameters": frozen_count,
        "frozen": sorted("/".join(key) for key in frozen),
    }


@functools.lru_cache(maxsize=8)
def compiled_functions(
    bert_config: Any,
    *,
    private: bool,
    clip_norm: float,
    clipping: str,
    learning_rate: float,
    warmup_steps: int,
    lr_decay: str,
    weight_decay: float,
    mesh: Any,
    mask_token_id: int,
    special_ids: tuple[int, ...],
    mask_prob: float,
    max_predictions: int,
    freeze: str = "none",
) -> _Compiled:
    """The model, optimizer, step, masking and evaluation functions of one configuration.

    Cached per process on everything that shapes the compiled code, so a second run with the same
    settings (a resume, shadow models, tests) reuses the compiled XLA programs instead of recompiling.
    The run's length is not a key: the learning-rate schedule reads ``total_steps`` from the
    optimizer state (:func:`~trainers.jax_bert.optimizer.init_optimizer`), so a 250-step run reuses
    what a 6-step run compiled.
    """
    model = FlaxBertForMaskedLM(bert_config)
    optimizer = make_optimizer(
        learning_rate=learning_rate, warmup_steps=warmup_steps, weight_decay=weight_decay, decay=lr_decay
    )
    loss_fn = functools.partial(example_mlm_loss, model=model)
    shapes = jax.eval_shape(lambda: init_params(bert_config, jax.random.key(0)))
    frozen = frozen_parameters(freeze, parameter_keys(shapes))
    if private:
        clipped_sum = (
            make_ghost_clipped_sum_fn(model, clip_norm=clip_norm, frozen=frozen) if clipping == "ghost" else None
        )
        step = dp_step.make_dp_train_step(
            loss_fn, optimizer, clip_norm=clip_norm, mesh=mesh, clipped_sum_fn=clipped_sum, frozen=frozen
        )
    else:
        step = dp_step.make_nonprivate_train_step(loss_fn, optimizer, mesh=mesh, frozen=frozen)
    mask_one = functools.partial(
        mask_tokens,
        mask_token_id=mask_token_id,
        vocab_size=bert_config.vocab_size,
        special_ids=jnp.asarray(special_ids, jnp.int32),
        mask_prob=mask_prob,
        max_predictions=max_predictions,
    )

    def mask_batch(
        key: jax.Array, content_key: jax.Array, input_ids: jax.Array, attention_mask: jax.Array
    ) -> dict[str, jax.Array]:
        # docs/privacy.md, "One example's contribution": each example's mask key is the step's public key with its own content key
        # (a hash of its token ids, data.content_keys) folded in: never its index in the file nor its
        # slot, so one example joining, leaving or repeating cannot change another example's mask.
        lead = input_ids.shape[:-1]
        flat_ids = input_ids.reshape(-1, input_ids.shape[-1])
        words = content_key.reshape(-1, 2).astype(jnp.uint32)
        keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.fold_in(key, w[0]), w[1]))(words)
        out = jax.vmap(mask_one)(keys, flat_ids, attention_mask.reshape(flat_ids.shape))
        return {k: v.reshape(lead + v.shape[1:]) for k, v in out.items()}

    def eval_sums(params: Any, batch: dict[str, jax.Array], weights: jax.Array) -> jax.Array:
        losses, aux = jax.vmap(loss_fn, in_axes=(None, 0))(params, batch)
        w_pred = weights * aux["n_predictions"]
        return jnp.stack([jnp.sum(w_pred * losses), jnp.sum(weights * aux["n_correct"]), jnp.sum(w_pred)])

    return _Compiled(
        model=model, optimizer=optimizer, step=step, mask_batch=jax.jit(mask_batch), eval_sums=jax.jit(eval_sums)
    )


# ----------------------------------------------------------------------------------------------
# The plug-in: the run itself is the core's skeleton (dpaudit.training.RunSkeleton).


class _Step(ClippedSumStep):
    """The compiled DP (or non-private) step as the skeleton's clipped-sum step.

    The engine owns its sensitivity (C under add/remove of one example: per-example clipping, factor
    1; None when non-private, as :class:`~dpaudit.training.plugin.ClippedSumStep` states it) and adds noise of
    std ``sigma * sensitivity`` itself.
    """

    def __init__(self, run: _Plugin) -> None:
        engine = run.fns.step
        super().__init__(clip_norm=engine.sensitivity, sensitivity_factor=1.0, sensitivity=engine.sensitivity)
        self.run = run

    def __call__(self, step: int, indices: np.ndarray, sigma: float, expected_batch: float) -> Any:
        run = self.run
        if run.canaries is not None:
            return self._audit_call(step, indices, sigma, expected_batch)
        chunks = run._chunks(step, indices)
        noise_key = jax.random.fold_in(run.noise_key, step)
        if run.mesh is not None:
            noise_key = parallel.replicate(run.mesh, noise_key)
        run.params, run.opt_state, metrics = run.fns.step(
            run.params, run.opt_state, chunks, noise_key, sigma, expected_batch
        )
        return metrics

    def _audit_call(self, step: int, indices: np.ndarray, sigma: float, expected_batch: float) -> Any:
        """The step with the run's gradient canaries (Nasr et al. 2023): the same real chunks, noise key,
        sigma and expected batch as :meth:`__call__`, plus the audit slots; then the block's noisy clipped
        sum goes to ``canaries.observe`` (the audit's one host sync per step, absent without canaries)."""
        run = self.run
        chunks, audit_rows = run._audit_chunks(step, indices)
        noise_key = jax.random.fold_in(run.noise_key, step)
        if run.mesh is not None:
            noise_key = parallel.replicate(run.mesh, noise_key)
        run.params, run.opt_state, run.canary_block, metrics, noisy = run.fns.step.audit_step(
            run.params, run.opt_state, run.canary_block, chunks, audit_rows, noise_key, sigma, expected_batch
        )
        run.canaries.observe(step, np.asarray(jax.device_get(noisy), dtype=np.float64))
        return metrics


#: Audit rows per accumulation call of a run with gradient canaries (a fixed shape: one compilation).
AUDIT_PIECE = 4096


class _ShuffleSampler:
    """``--sampling shuffle``: fixed-size batches of segment ``s`` from ``numpy_generator(1, s)``'s
    permutations (no proven epsilon). Stateless: a resumed run replays the segment's stream."""

    def __init__(self, source: NoiseSource, plan: Callable[[], PrivacyPlan]) -> None:
        # The plan is read when sampling (after the skeleton's begin), so a skeleton other than the
        # plug-in's own can run it too.
        self.source, self.plan_of = source, plan
        self.stream: Iterator[np.ndarray] | None = None
        self.next_step = -1

    def sample(self, step: int, dataset_size: int, sampling_probability: float) -> np.ndarray:
        del sampling_probability
        plan = self.plan_of()
        segment, offset = plan.stage_at(step)
        if step != self.next_step or offset == 0:
            self.stream = sampling.shuffle_batches(
                self.source.numpy_generator(_SHUFFLE_STREAM, segment), dataset_size, plan.batch_at(step)
            )
            for _ in range(offset):
                next(self.stream)
        self.next_step = step + 1
        return next(self.stream)

    def state(self) -> None:
        return None

    def restore(self, state: Any) -> None:
        del state


class _Plugin(TrainerPlugin):
    """One invocation of the trainer on the core skeleton: set up (or resume), loop, finish. Not reusable."""

    name = "jax-bert"

    def __init__(self, data_dir: Path, out_dir: Path, config: JaxBertConfig, *, seed: int) -> None:
        if not isinstance(config, JaxBertConfig):
            raise TypeError(f"config must be a JaxBertConfig, got {type(config).__name__}.")
        self.data_dir, self.out_dir, self.config, self.seed = data_dir, out_dir, config, int(seed)
        self.is_primary = True
        self.runtime_tuning: Any = None
        self.data: InjectRun | None = None
        self.mesh: Any = None
        self.tokenizer: Any = None
        self.tokenizer_sha = ""
        self.train_enc: dict[str, np.ndarray] = {}
        self.bert_config: Any = None
        self.train_key: jax.Array | None = None
        self.fns: _Compiled | None = None
        self.params: Any = None
        self.opt_state: Any = None
        self.eval_batches: list[tuple[dict[str, jax.Array], jax.Array]] = []
        self.noise: NoiseSource | None = None
        self.noise_key: jax.Array | None = None
        self._capacity: dict[int, int] = {}
        self.plan: PrivacyPlan | None = None  # set by begin(), from whichever skeleton runs this plug-in
        self.real_size = 0  # N, the real training rows (batch indices >= N are audit rows)
        self.canaries: GradientCanaries | None = None
        self.canary_block: dp_step.AuditBlock | None = None
        self.starting_point: StartingPoint | None = None  # --init-from, checked in load_data
        self.train_texts: list[str] = []  # the rows of the split trained on (--data-split)
        self.eval_baseline: float | None = None  # the best constant prediction's accuracy on the evaluated positions
        self.skeleton = RunSkeleton(self, Path(out_dir))

    def _setup(self) -> None:
        """Everything before the first step (:meth:`RunSkeleton.setup`)."""
        self.skeleton.setup()

    def execute(self) -> TrainResult:
        """Run (or resume) the whole run on the plug-in's own skeleton. ``RunSkeleton(plugin, out_dir).execute()``
        runs it the same way: the plug-in reads the plan from :meth:`begin`, not from its own skeleton."""
        return self.skeleton.execute()

    # -- white-box audit: gradient canaries (dpaudit.training.gradient_canaries) ---------------------

    def gradient_canary_unit(self) -> tuple[str, int]:
        """Each example is clipped on its own (both clip engines): ``(UNIT_EXAMPLE, 1)``."""
        return UNIT_EXAMPLE, 1

    def host_gradient_canaries(self, canaries: GradientCanaries) -> None:
        """Host ``canaries`` in this run (Nasr et al. 2023 Dirac canaries); call once, before it runs.

        Raises:
            ValueError: a non-private run (no clipping or noise to audit), or a gain whose square
                overflows float32 (its norm would be inf and clipping would zero it instead of giving C).
            RuntimeError: called twice, or after the run started.
        """
        if self.canaries is not None or self.data is not None:
            raise RuntimeError("host_gradient_canaries must be called once, before the run starts.")
        if self.config.non_private:
            raise ValueError("a --non-private run has no clipping or noise: there is nothing to audit white-box.")
        check_canary_gains(canaries.gain)
        self.canaries = canaries  # canaries.slot is for micro-batch clipping; each example is its own unit here

    def canary_parameters(self) -> np.ndarray:
        """The audit block's current values (the last iterate), float64 ``(size,)``; zeros before training."""
        if self.canaries is None:
            raise RuntimeError("this run hosts no gradient canaries (call host_gradient_canaries first).")
        if self.canary_block is None:
            return np.zeros(self.canaries.size, np.float64)
        return np.asarray(jax.device_get(self.canary_block.values), dtype=np.float64)

    # -- processes -------------------------------------------------------------------------------

    def start(self) -> None:
        parallel.maybe_initialize_distributed()  # multi-host: before any other JAX call
        self.runtime_tuning = cpu_runtime.tune_cpu_runtime()  # before anything is compiled
        # Multi-host: every process computes the same run (same data, seed and RNG streams); only
        # process 0 writes files, the others keep their rows in memory and meet it at barriers.
        self.is_primary = parallel.is_primary()

    @property
    def primary(self) -> bool:
        return self.is_primary

    def barrier(self, tag: str) -> None:
        parallel.sync_processes(f"jax_bert_{tag}")

    def share_source(self, source: NoiseSource) -> NoiseSource:
        """Process 0's OS-entropy seed shared by every process of a multi-host run; the noise key from it."""
        if not source.explicit:
            source = NoiseSource(seed=parallel.broadcast_from_primary(source.seed), explicit=False)
        self.noise, self.noise_key = source, noise_key_of(source)
        return source

    # -- inputs, model, step ----------------------------------------------------------------------

    def load_data(self) -> RunData:
        """The verified inputs; with gradient canaries the run has ``N + canaries.rows`` rows (the audit
        rows after the real ones, sampled like them)."""
        config = self.config
        self.data = load_inject_dir(self.data_dir, split=config.data_split)
        self.train_texts = self.data.split(SPLIT_FILES[config.data_split]).texts
        self.real_size = len(self.train_texts)
        audit_rows = self.canaries.rows if self.canaries is not None else 0
        inputs, identity, frequencies, self.starting_point = run_inputs(
            self.data, init_from=config.init_from, data_split=config.data_split, layout=hf_io.expected_layout
        )
        return RunData(
            size=self.real_size + audit_rows,
            inputs=inputs,
            identity=identity,
            frequencies=frequencies,
            split=config.data_split,
            start=self.starting_point,
        )

    def settings(self) -> RunSettings:
        config = self.config
        return RunSettings(
            config=config.to_dict(),
            run_only=JaxBertConfig.RUN_ONLY_FIELDS,
            noise_seed=config.noise_seed,
            keep_checkpoints=config.keep_checkpoints,
            plan=plan_options(config),
            ledger={"sampling": ledger_sampling(config), "privacy_unit": "example"},
            log_every=config.log_every,
            checkpoint_every=config.checkpoint_every,
            eval_every=config.eval_every,
            progress_label=self.name,
        )

    def init_model(self, resume_state: Mapping[str, Any] | None) -> None:
        """Mesh, tokenizer (public.jsonl only, or the start's), encoded training split, parameters from --seed (or
        the start's), compiled functions."""
        config = self.config
        if config.data_parallel and jax.device_count() > 1:
            self.mesh = parallel.make_data_mesh()
            parallel.check_physical_batch(self.mesh, config.physical_batch)
        base_key = jax.random.PRNGKey(self.seed)
        if self.starting_point is not None:
            start = self.starting_point
            self.params, self.bert_config, self.tokenizer = _load_start(start, config, self.data.new_tokens)
            self._check_tokenizer(resume_state)
        else:
            self._train_tokenizer(resume_state)
            self.bert_config = preset_config(
                config.preset,
                vocab_size=self.tokenizer.get_vocab_size(),
                max_position_embeddings=max(128, config.max_length),
            )
            self.params = init_params(
                self.bert_config,
                jax.random.fold_in(base_key, _INIT_STREAM),
                seq_len=config.max_length,
                zero_rows=[self.tokenizer.token_to_id(t) for t in self.data.new_tokens],
            )
        specials = special_token_ids(self.tokenizer)
        self.train_enc = encode_texts(self.tokenizer, self.train_texts, max_length=config.max_length)
        self.train_key = jax.random.fold_in(base_key, _TRAIN_STREAM)
        self.fns = compiled_functions(
            self.bert_config,
            private=not config.non_private,
            clip_norm=config.clip_norm,
            clipping=config.clip_engine,
            learning_rate=config.learning_rate,
            warmup_steps=config.warmup_steps,
            lr_decay=config.lr_decay,
            weight_decay=config.weight_decay,
            mesh=self.mesh,
            mask_token_id=specials["mask"],
            special_ids=tuple(sorted(set(specials.values()))),
            mask_prob=config.mask_prob,
            max_predictions=config.resolved_max_predictions,
            freeze=config.freeze,
        )
        dp_step.check_frozen(self.params, frozen_parameters(config.freeze, parameter_keys(self.params)))
        self._setup_eval()

    def _train_tokenizer(self, resume_state: Mapping[str, Any] | None) -> None:
        config = self.config
        try:
            self.tokenizer = train_wordpiece(
                self.data.public_texts, vocab_size=config.resolved_vocab_size, new_tokens=self.data.new_tokens
            )
        except ValueError as err:
            raise UserInputError(f"--vocab-size {config.resolved_vocab_size}: {err}") from None
        self._check_tokenizer(resume_state)

    def _check_tokenizer(self, resume_state: Mapping[str, Any] | None) -> None:
        self.tokenizer_sha = hashlib.sha256(self.tokenizer.to_str().encode("utf-8")).hexdigest()
        if resume_state is not None and resume_state.get("tokenizer_sha256") != self.tokenizer_sha:
            where = (
                "the start's tokenizer"
                if self.starting_point is not None
                else "the tokenizer retrained on public.jsonl"
            )
            raise UserInputError(f"--out {self.out_dir}: {where} differs from the checkpoint's; use a new --out.")

    def make_step(self, dataset_size: int, resume_state: Mapping[str, Any] | None) -> _Step:
        return _Step(self)

    def make_sampler(self, source: NoiseSource) -> Sampler:
        if self.config.sampling == "poisson":
            return SequentialPoisson(source, _POISSON_STREAM)
        return _ShuffleSampler(source, lambda: self.plan)

    def read_state(self, path: Path) -> dict[str, Any]:
        """The checkpoint's state; one written before the run skeleton (the Poisson generator's state
        under ``numpy_rng``) is read in today's keys, so an interrupted run continues the same stream."""
        state = ckpt.read_state(path)
        if "sampler" not in state and "numpy_rng" in state:
            state["sampler"] = state.pop("numpy_rng")
        return state

    def restore(self, path: Path) -> int:
        # A template gives structure only: the restored state holds the checkpoint's own total_steps.
        template = init_optimizer(self.fns.optimizer, self.params, total_steps=1)
        restored = ckpt.restore_checkpoint(path, params_template=self.params, opt_state_template=template)
        self.params, self.opt_state = restored.params, restored.opt_state
        return restored.step

    def begin(self, plan: PrivacyPlan) -> None:
        """The optimizer's schedule spans the planned steps (unless restored); the state goes on the mesh.
        With gradient canaries, the audit block starts at 0 with its own state of the same optimizer."""
        self.plan = plan
        if self.opt_state is None:
            self.opt_state = init_optimizer(self.fns.optimizer, self.params, total_steps=plan.total_steps)
        if self.canaries is not None:
            values = jnp.zeros((self.canaries.size,), jnp.float32)
            self.canary_block = dp_step.AuditBlock(
                values, init_optimizer(self.fns.optimizer, values, total_steps=plan.total_steps)
            )
        if self.mesh is not None:  # global replicated arrays (device_put cannot span processes)
            self.params, self.opt_state = (
                parallel.replicate(self.mesh, self.params),
                parallel.replicate(self.mesh, self.opt_state),
            )
            if self.canary_block is not None:
                self.canary_block = parallel.replicate(self.mesh, self.canary_block)

    def save(self, directory: Path, step: int, state: Mapping[str, Any]) -> None:
        ckpt.save_checkpoint(directory, step=step, params=self.params, opt_state=self.opt_state, state=dict(state))

    def extra_state(self) -> dict[str, Any]:
        return {
            "jax_key": np.asarray(jax.random.key_data(self.train_key)).tolist(),  # public (--seed)
            "tokenizer_sha256": self.tokenizer_sha,
            "noise_multiplier": self.plan.noise_multiplier,
        }

    # -- batches and evaluation ------------------------------------------------------------------

    def _setup_eval(self) -> None:
        """Heldout evaluation: a fixed subset, masked once with a fixed key, in padded batches."""
        texts = self.data.heldout_texts[: self.config.eval_examples]
        self.eval_rows = eval_rows(len(texts), len(self.data.heldout_texts))  # said beside every held-out figure
        self.eval_batches = []
        if not texts:
            return
        enc = encode_texts(self.tokenizer, texts, max_length=self.config.max_length)
        # Batches of a size that does not depend on how many rows there are (a short set is padded up to one batch):
        # runs that evaluate different numbers of rows (an attack's shadow models, each on the held-out rows it did
        # not train on) share the compiled masking and evaluation instead of compiling their own (1-1.5 s each for a
        # tiny model). Padding rows weigh 0 and a row's mask depends on its own content only: the figures are the same.
        size = max(self.config.physical_batch, 8)
        n_pad = -len(texts) % size
        ids = np.concatenate([enc["input_ids"], np.repeat(enc["input_ids"][:1], n_pad, 0)])
        att = np.concatenate([enc["attention_mask"], np.repeat(enc["attention_mask"][:1], n_pad, 0)])
        content = np.concatenate([enc["content_key"], np.repeat(enc["content_key"][:1], n_pad, 0)])
        weights = np.concatenate([np.ones(len(texts), np.float32), np.zeros(n_pad, np.float32)])
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), _EVAL_STREAM)
        masked = self.fns.mask_batch(key, jnp.asarray(content), jnp.asarray(ids), jnp.asarray(att))
        targets, used = jax.device_get((masked["masked_labels"], masked["masked_weights"]))
        self.eval_baseline = constant_prediction_accuracy(targets, used * weights[:, None], per_example=False)
        for start in range(0, len(weights), size):
            batch = {k: v[start : start + size] for k, v in masked.items()}
            w = jnp.asarray(weights[start : start + size])
            if self.mesh is not None:  # global arrays, so evaluation also runs multi-process
                batch, w = parallel.replicate(self.mesh, (batch, w))
            self.eval_batches.append((batch, w))

    def _packed(self, step: int, indices: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Step ``step``'s sampled indices packed into fixed-shape chunks ``(idx [S, m], mask [S, m])``."""
        n, m = self.plan.dataset_size, self.config.physical_batch
        return sampling.pack_microsteps(indices, m, self._chunk_capacity(step, n, m))

    def _mask_key(self, step: int) -> jax.Array:
        """The public key step ``step``'s masks are drawn from (each row folds in its own content key)."""
        return jax.random.fold_in(jax.random.fold_in(self.train_key, step), 0)

    def _masked(self, mask_key: jax.Array, idx: np.ndarray) -> dict[str, jax.Array]:
        """The real rows ``idx [S, m]``, masked on device."""
        return self.fns.mask_batch(
            mask_key,
            self.train_enc["content_key"][idx],
            self.train_enc["input_ids"][idx],
            self.train_enc["attention_mask"][idx],
        )

    def _chunks(self, step: int, indices: np.ndarray) -> list[tuple[dict[str, jax.Array], np.ndarray]]:
        mask_key = self._mask_key(step)
        return [(self._masked(mask_key, idx), mask) for idx, mask in self._packed(step, indices)]

    def _audit_chunks(
        self, step: int, indices: np.ndarray
    ) -> tuple[list[tuple[dict[str, jax.Array], np.ndarray]], list[dp_step.AuditRows]]:
        """The chunks of a run with gradient canaries (real rows only), and the step's audit rows.

        A sampled index ``i >= N`` is audit row ``i - N``. Only the real rows go through the model: they
        are packed into chunks as any run packs its rows (the chunk capacity is sized for the expected
        REAL rows, q x N), so thousands of audit rows cost no model work. The audit rows travel apart,
        in pieces of :data:`AUDIT_PIECE` slots (padding: mask 0), so their shapes, and with them the
        compiled accumulation, do not change from step to step.
        """
        canaries, n_real = self.canaries, self.real_size
        audit = np.sort(indices[indices >= n_real]) - n_real
        real = indices[indices < n_real]
        mask_key = self._mask_key(step)
        m = self.config.physical_batch
        packed = sampling.pack_microsteps(real, m, self._chunk_capacity(step, n_real, m))
        chunks = [(self._masked(mask_key, idx), mask) for idx, mask in packed]
        pieces = []
        for start in range(0, len(audit), AUDIT_PIECE):
            rows = audit[start : start + AUDIT_PIECE]
            pad = AUDIT_PIECE - len(rows)
            pieces.append(
                dp_step.AuditRows(
                    gain=np.pad(canaries.gain[rows].astype(np.float32), (0, pad))[None, :],
                    coordinate=np.pad(canaries.coordinate[rows].astype(np.int32), (0, pad))[None, :],
                    mask=np.pad(np.ones(len(rows), np.float32), (0, pad))[None, :],
                )
            )
        return chunks, pieces

    def _chunk_capacity(self, step: int, n: int, m: int) -> int:
        """Micro-steps per chunk for step ``step``'s expected batch (cached per batch size)."""
        plan = self.plan
        batch = plan.batch_at(step)
        if batch not in self._capacity:
            if self.config.sampling == "poisson":
                q = plan.sampling_probability(step)  # the realized batch is ~ q n (n the real rows)
                self._capacity[batch] = sampling.microstep_capacity(q * n, m, dataset_size=n, sampling_probability=q)
            else:
                self._capacity[batch] = -(-batch // m)
        return self._capacity[batch]

    def fetch(self, pending: Sequence[tuple[int, Any]]) -> list[dict[str, Any]]:
        """Metric rows of the pending steps (their metrics fetched in one device_get)."""
        plan = self.plan
        private = plan.private
        rows = []
        for (step, _), metrics in zip(pending, jax.device_get([m for _, m in pending])):
            rows.append(
                {
                    "step": step + 1,
                    "loss": _num(metrics.loss),
                    "train_accuracy": _num(metrics.n_correct / max(float(metrics.n_predictions), 1.0)),
                    "batch_size": int(metrics.batch_size),
                    "expected_batch_size": plan.batch_at(step),
                    "grad_snr": _num(metrics.grad_snr) if private else None,
                    "clip_fraction": _num(metrics.clip_fraction) if private else None,
                    "clipped_sum_norm": _num(metrics.clipped_sum_norm),
                    "noise_norm": _num(metrics.noise_norm) if private else None,
                    "telemetry_private": True,
                }
            )
        return rows

    def evaluate(self) -> dict[str, float]:
        if not self.eval_batches:
            return {}
        total = sum(self.fns.eval_sums(self.params, batch, w) for batch, w in self.eval_batches)
        loss_sum, correct, preds = (float(x) for x in jax.device_get(total))
        return {
            "eval_loss": loss_sum / max(preds, 1.0),
            "mlm_accuracy": correct / max(preds, 1.0),
            MLM_BASELINE_KEY: self.eval_baseline,
            **self.eval_rows,
        }

    # -- outputs ---------------------------------------------------------------------------------

    def export(self, model_dir: Path) -> None:
        hf_io.save_pretrained(model_dir, jax.device_get(self.params), self.bert_config, self.tokenizer)  # atomic

    def record_parts(self, plan: PrivacyPlan, steps: int) -> RecordParts:
        """jax-bert's words for privacy.json: DP-SGD with per-example clipping (Abadi et al. 2016)."""
        config = self.config
        shuffle = config.sampling == "shuffle"
        sampled = (
            "fixed-size shuffled batches (--sampling shuffle)"
            if shuffle
            else "Poisson-subsampled with rate q = expected batch / N"
        )
        mechanism = (
            f"DP-SGD (Abadi et al. 2016): {sampled}; each example's gradient clipped to L2 norm "
            f"C = {config.clip_norm:g} (sensitivity C under add/remove of one example); Gaussian noise of std "
            f"sigma * C added once to the clipped sum per step; {steps} steps."
        )
        if config.freeze != "none":
            trained = trained_parameters(self.params, config.freeze)
            mechanism += (
                f" Trained parameters: {trained['trained_parameters']:,} (clipped together, noised); frozen "
                f"(--freeze {config.freeze}; no gradient, noise or update): {', '.join(trained['frozen'])} "
                f"({trained['frozen_parameters']:,})."
            )
        delta_rule = (
            "given by --delta"
            if config.delta is not None
            else accounting.DEFAULT_DELTA_RULE.replace("default ", "default: ", 1)
        )
        tokenizer_note = self._tokenizer_note()
        notes = (["caveat: " + SHUFFLE_NOTE] if shuffle else []) + [f"delta: {delta_rule}", tokenizer_note]
        return RecordParts(
            mechanism=mechanism,
            noise_sampler=NOISE_SAMPLER,
            notes=notes,
            steps_from_n=False,
            sampling=config.sampling,
            guarantee_mechanism=(
                f", Poisson-subsampled Gaussian mechanism with per-example clipping to C = {config.clip_norm:g}"
            ),
            nonprivate_notes=[tokenizer_note],
        )

    def _tokenizer_note(self) -> str:
        start = self.starting_point
        return TOKENIZER_NOTE if start is None else START_TOKENIZER_NOTE.format(start=start.describe())

    def summary(self) -> dict[str, Any]:
        shuffle = self.config.sampling == "shuffle"
        return {
            **({"planned_epsilon": None} if shuffle else {}),
            "sampling": self.config.sampling,
            "devices": 1 if self.mesh is None else int(self.mesh.devices.size),
            "cpu_runtime_tuning": self.runtime_tuning,
            "checkpoints_kept": bool(self.config.keep_checkpoints),
            "trained": trained_parameters(self.params, self.config.freeze),
            **({"baselines": {MLM_BASELINE_KEY: MLM_BASELINE_RULE}} if self.eval_batches else {}),
        }

    def manifest_extra(self) -> dict[str, Any]:
        start = self.starting_point
        tokenizer = "public.jsonl" if start is None else f"the start's tokenizer.json ({start.given})"
        return {
            "model": self.bert_config.to_hf_dict(),
            "tokenizer_trained_on": tokenizer,
            "private_to_data_owner": True,
            "noise_seed_note": self.noise.note,
        }


# ----------------------------------------------------------------------------------------------
# The starting point (--init-from).


def _load_start(start: StartingPoint, config: JaxBertConfig, new_tokens: Sequence[str]) -> tuple[Any, Any, Any]:
    """The start's Flax parameters, architecture and tokenizer (:func:`~trainers.jax_bert.hf_io.load_pretrained`,
    the inverse of the export): a BERT masked-LM in Hugging Face layout, safetensors only.

    Raises:
        UserInputError: one line naming --init-from: weights that are not whole safetensors, not a BERT masked-LM,
            no tokenizer.json, a --max-length beyond its position table, or a tokenizer without the inject
            manifest's declared new tokens (those canaries would be [UNK]).
    """
    option = f"--init-from {start.given}"  # (its directory passed the one up-front check: resolve_start)
    try:
        params, bert_config, tokenizer = hf_io.load_pretrained(start.model_dir)
    except UserInputError as err:
        raise UserInputError(f"{option}: {err}") from None
    if tokenizer is None or not (start.model_dir / hf_io.TOKENIZER_NAME).is_file():
        raise UserInputError(
            f"{option}: no tokenizer.json; the start's fast tokenizer file is needed (tokenizer.save_pretrained(dir))."
        )
    try:
        special_token_ids(tokenizer)
    except ValueError as err:
        raise UserInputError(f"{option}: {err} Use a BERT WordPiece tokenizer.") from None
    if config.max_length > bert_config.max_position_embeddings:
        raise UserInputError(
            f"--max-length {config.max_length} exceeds the start's position table "
            f"(max_position_embeddings {bert_config.max_position_embeddings}); lower --max-length."
        )
    try:
        missing_new_tokens(tokenizer, new_tokens, option=option)
    except ValueError as err:
        raise UserInputError(str(err)) from None
    return params, bert_config, tokenizer


# ----------------------------------------------------------------------------------------------
# Small helpers.


#: The largest gain a gradient canary may have: the largest float32 whose square is finite (2**64 (1 - 2**-24),
#: about 1.8e19). The engines compute a norm as the sqrt of a float32 sum of squares; above this the square
#: is inf, C / inf = 0, and the canary would add 0 instead of C.
MAX_CANARY_GAIN = float(np.nextafter(np.float32(2.0**64), np.float32(0.0)))


def check_canary_gains(gain: np.ndarray) -> None:
    """Raises ValueError unless every gain is finite and, as float32, at most :data:`MAX_CANARY_GAIN` in size."""
    with np.errstate(over="ignore"):  # an overflow to inf is what this check reports
        as_f32 = np.abs(np.asarray(gain, np.float64).astype(np.float32))
    if as_f32.size and not (np.all(np.isfinite(as_f32)) and as_f32.max() <= MAX_CANARY_GAIN):
        raise ValueError(
            f"canary gains must be finite with |gain| <= {MAX_CANARY_GAIN:.7g} (float32: a larger "
            "gain's squared norm overflows and clipping would zero it)."
        )


def _num(x: Any) -> float | None:
    """A finite float for JSON, or None (inf/nan are not JSON)."""
    value = float(x)
    return value if math.isfinite(value) else None
