"""``dpaudit train --trainer jax-bert``: DP-SGD masked-LM pretraining of BERT (Anil et al. 2021).

This is the one place that composes the pieces, each of which lives in its own module and knows
nothing of the others: the tokenizer and masking (:mod:`.tokenizer`, :mod:`.data`), the Flax model
(:mod:`.model`), Poisson sampling and micro-step packing (:mod:`.sampling`), the clipped-and-noised
step (:mod:`.dp_step`), the optimizer (:mod:`.optimizer`), data parallelism (:mod:`.parallel`), the
privacy plan and its ledger (:mod:`dpaudit.privacy_plan`, :mod:`dpaudit.accounting.ledger`), checkpoints
(:mod:`.checkpoint`) and the Hugging Face export (:mod:`.hf_io`). What every trainer shares lives in the
core: the plan (:func:`dpaudit.privacy_plan.plan_privacy`, sensitivity factor 1: per-example
clipping), the ``privacy.json`` record (:class:`dpaudit.privacy_record.PrivacyRecord`) and the run
directory helpers (:mod:`dpaudit.train_rundir`).

A run, in order (DESIGN sections 3 and 5):

1. verify the inject directory against its manifest; read ``train.jsonl`` (the private data),
   ``heldout.jsonl`` (evaluation) and ``public.jsonl`` (the tokenizer's ONLY input);
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

Randomness (DESIGN "Honest accounting rules"). The mechanism's randomness is secret and comes from
:class:`dpaudit.secret_rng.NoiseSource` (OS entropy, or ``--noise-seed``), never from ``--seed``:

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
never of its index in the file or its batch slot (DESIGN section 5), so adding, removing or
duplicating one row never changes another example's mask (its gradient, hence the sensitivity,
stays that of per-example clipping).
"""

from __future__ import annotations

import functools
import hashlib
import math
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from dpaudit import accounting
from dpaudit.accounting.ledger import BudgetExceededError, PrivacyLedger
from dpaudit.errors import UserInputError
from dpaudit.figures import format_up
from dpaudit.inject_run import (
    PUBLIC,
    TRAIN,
    InjectRun,
    canary_frequencies,
    load_inject_run,
)
from dpaudit.privacy_plan import PrivacyPlan, declared_size_warning, new_ledger, plan_privacy
from dpaudit.privacy_record import PrivacyRecord, group_privacy_rows
from dpaudit.secret_rng import NoiseSource
from dpaudit.tokenizer import special_token_ids, train_wordpiece
from dpaudit.train_rundir import (
    CHECKPOINT_DIR,
    MetricsLog,
    check_out_dir,
    check_resume,
    finish_run,
    finished_result,
    finished_run,
    last_value,
    list_checkpoints,
    remove_checkpoints,
)
from dpaudit.trainer_api import TrainResult
from dpaudit.trainers.jax_bert import checkpoint as ckpt
from dpaudit.trainers.jax_bert import cpu_runtime, dp_step, hf_io, parallel, sampling
from dpaudit.trainers.jax_bert.config import TINY_SETTINGS, JaxBertConfig
from dpaudit.trainers.jax_bert.data import encode_texts, mask_tokens
from dpaudit.trainers.jax_bert.ghost_clipping import make_ghost_clipped_sum_fn
from dpaudit.trainers.jax_bert.model import (
    FlaxBertForMaskedLM,
    example_mlm_loss,
    init_params,
    preset_config,
)
from dpaudit.trainers.jax_bert.optimizer import init_optimizer, make_optimizer

SHUFFLE_NOTE = (
    "fixed-size shuffled batches were used (--sampling shuffle): no epsilon is proven for them, so 'epsilon' "
    "is null; 'epsilon_if_poisson' is what the run would spend if its batches had been Poisson-sampled with "
    "q = batch/N, which this run did NOT use."
)
TELEMETRY_SUMMARY_NOTE = "wall-clock throughput and loss: telemetry, not privacy figures and not covered by the epsilon."
TOKENIZER_NOTE = "tokenizer: WordPiece trained on public.jsonl only (never on train.jsonl or the canaries)."

# Independent PRNG streams of the PUBLIC seed (jax.random.fold_in(PRNGKey(seed), stream)).
_INIT_STREAM, _TRAIN_STREAM, _EVAL_STREAM = 0, 1, 2
# Streams of the SECRET noise seed (numpy SeedSequence entropy [noise_seed, stream, ...]).
_POISSON_STREAM, _SHUFFLE_STREAM = 0, 1


def noise_key_of(source: NoiseSource) -> jax.Array:
    """The JAX key of the DP noise: the raw threefry key ``uint32[2]`` ``source.hashed_words(2, "jax-noise")``.

    JAX's default key holds 64 bits, so the key cannot carry a 128-bit seed: it is 64 bits of a
    BLAKE2b hash of the whole seed (:meth:`~dpaudit.secret_rng.NoiseSource.hashed_words`), so every
    seed bit changes it (the former ``fold_in(PRNGKey(w0), w1)`` of two XOR-folded words used at most
    64 bits: seeds ``s`` and ``s ^ x ^ (x << 64)`` gave the same noise). An adversary must still search
    2**64 keys. Step ``t`` draws its noise from ``fold_in(noise_key_of(source), t)``.
    """
    return jnp.asarray(source.hashed_words(2, "jax-noise"), dtype=jnp.uint32)


class JaxBertTrainer:
    """DP-SGD BERT masked-LM pretraining in JAX/Flax; registered as ``jax-bert``."""

    name: ClassVar[str] = "jax-bert"
    Config: ClassVar[type] = JaxBertConfig

    def writes_run_dir(self) -> bool:
        """Only process 0 of a multi-host run writes the run directory, so only it takes the lock."""
        return parallel.env_process_index() == 0

    def train(self, data_dir: Path, out_dir: Path, config: JaxBertConfig, *, seed: int) -> TrainResult:
        """Train on an inject run directory and write (or resume) the train run directory ``out_dir``.

        Raises:
            UserInputError: bad data, a plan that cannot fit the budget, or an ``out_dir`` holding a
                different run; raised before anything is written.
        """
        return _Run(Path(data_dir), Path(out_dir), config, seed=seed).execute()

    def tiny_config(self, **overrides: Any) -> JaxBertConfig:
        """A 2-layer, hidden-64 model on 16-token texts, 6 steps of 16 (the contract suite's run)."""
        return JaxBertConfig(**{**TINY_SETTINGS, **overrides})


# ----------------------------------------------------------------------------------------------
# Inputs and planning (nothing is written until these pass).


def load_inject_dir(data_dir: Path) -> InjectRun:
    """The verified inject directory (:func:`dpaudit.inject_run.load_inject_run`), whose train and public
    splits must not be empty."""
    data = load_inject_run(data_dir)
    if not data.train_texts:
        raise UserInputError(f"{data_dir / TRAIN} is empty; there is nothing to train on.")
    if not data.public_texts:
        raise UserInputError(f"{data_dir / PUBLIC} is empty; the tokenizer is trained on it only (rerun inject with a public split).")
    return data


def plan_run_privacy(config: JaxBertConfig, dataset_size: int) -> PrivacyPlan:
    """The run's :class:`~dpaudit.privacy_plan.PrivacyPlan`: the config's (steps, batch) schedule,
    per-example clipping (sensitivity factor 1), sigma given or calibrated for ``--target-epsilon``;
    q = batch / ``--dataset-size`` when a public size is declared, else batch / N (N treated as public).

    Raises:
        UserInputError: a batch larger than the data, or a budget too small for one step.
    """
    return plan_privacy(
        dataset_size=dataset_size, stages=config.schedule, non_private=config.non_private,
        noise_multiplier=config.noise_multiplier, target_epsilon=config.target_epsilon, delta=config.delta,
        sensitivity_factor=1.0, batch_option="--batch-schedule" if config.batch_schedule else "--batch-size",
        declared_size=config.dataset_size,
    )


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


@functools.lru_cache(maxsize=8)
def compiled_functions(
    bert_config: Any, *, private: bool, clip_norm: float, clipping: str, learning_rate: float, warmup_steps: int,
    weight_decay: float, mesh: Any, mask_token_id: int, special_ids: tuple[int, ...], mask_prob: float,
    max_predictions: int,
) -> _Compiled:
    """The model, optimizer, step, masking and evaluation functions of one configuration.

    Cached per process on everything that shapes the compiled code, so a second run with the same
    settings (a resume, shadow models, tests) reuses the compiled XLA programs instead of recompiling.
    The run's length is not a key: the learning-rate schedule reads ``total_steps`` from the
    optimizer state (:func:`~trainers.jax_bert.optimizer.init_optimizer`), so a 250-step run reuses
    what a 6-step run compiled.
    """
    model = FlaxBertForMaskedLM(bert_config)
    optimizer = make_optimizer(learning_rate=learning_rate, warmup_steps=warmup_steps, weight_decay=weight_decay)
    loss_fn = functools.partial(example_mlm_loss, model=model)
    if private:
        clipped_sum = make_ghost_clipped_sum_fn(model, clip_norm=clip_norm) if clipping == "ghost" else None
        step = dp_step.make_dp_train_step(loss_fn, optimizer, clip_norm=clip_norm, mesh=mesh, clipped_sum_fn=clipped_sum)
    else:
        step = dp_step.make_nonprivate_train_step(loss_fn, optimizer, mesh=mesh)
    mask_one = functools.partial(mask_tokens, mask_token_id=mask_token_id, vocab_size=bert_config.vocab_size,
                                 special_ids=jnp.asarray(special_ids, jnp.int32), mask_prob=mask_prob,
                                 max_predictions=max_predictions)

    def mask_batch(key: jax.Array, content_key: jax.Array, input_ids: jax.Array,
                   attention_mask: jax.Array) -> dict[str, jax.Array]:
        # DESIGN section 5: each example's mask key is the step's public key with its own content key
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

    return _Compiled(model=model, optimizer=optimizer, step=step, mask_batch=jax.jit(mask_batch),
                     eval_sums=jax.jit(eval_sums))


# ----------------------------------------------------------------------------------------------
# The run.


class _Run:
    """One invocation of the trainer: set up (or resume), loop, finish. Not reusable."""

    def __init__(self, data_dir: Path, out_dir: Path, config: JaxBertConfig, *, seed: int) -> None:
        if not isinstance(config, JaxBertConfig):
            raise TypeError(f"config must be a JaxBertConfig, got {type(config).__name__}.")
        self.data_dir, self.out_dir, self.config, self.seed = data_dir, out_dir, config, int(seed)
        self.ckpt_dir = out_dir / CHECKPOINT_DIR

    # -- setup ---------------------------------------------------------------------------------

    def _check_out_dir(self) -> None:
        # A finished run (manifest.json, checkpoints deleted) is returned as it is by _finished_run.
        resumable = bool(list_checkpoints(self.ckpt_dir)) or (self.out_dir / "manifest.json").is_file()
        check_out_dir(self.out_dir, trainer=JaxBertTrainer.name, resumable=resumable)

    def _identity(self) -> dict[str, Any]:
        return {"trainer": JaxBertTrainer.name, "config": self.config.to_dict(), "seed": self.seed, "data": self.data.identity}

    def _check_resume(self, state: dict[str, Any], path: Path) -> None:
        def comparable(identity: dict[str, Any]) -> dict[str, Any]:
            # A resume may change what happens after training (JaxBertConfig.RUN_ONLY_FIELDS).
            config = {k: v for k, v in dict(identity.get("config") or {}).items() if k not in JaxBertConfig.RUN_ONLY_FIELDS}
            return {**identity, "config": config}

        check_resume(out=self.out_dir, checkpoint=path, trainer=JaxBertTrainer.name,
                     stored=comparable(dict(state.get("identity") or {})), current=comparable(self._identity()))

    def _finished_run(self) -> dict[str, Any] | None:
        """The manifest of a finished run of this very command in ``--out`` (None when there is none).

        Its checkpoints are gone (they held the secret noise state), so a rerun cannot continue it:
        the same settings get the stored result back, different ones a one-line error.
        """
        return finished_run(self.out_dir, trainer=JaxBertTrainer.name, config=self.config.to_public_dict(), seed=self.seed,
                            inputs=self.data.inputs, run_only=JaxBertConfig.RUN_ONLY_FIELDS)

    def _setup(self) -> None:
        config = self.config
        parallel.maybe_initialize_distributed()  # multi-host: before any other JAX call
        self.runtime_tuning = cpu_runtime.tune_cpu_runtime()  # before anything is compiled
        # Multi-host: every process computes the same run (same data, seed and RNG streams); only
        # process 0 writes files, the others keep their rows in memory and meet it at barriers.
        self.primary = parallel.is_primary()
        self._check_out_dir()
        self.data = load_inject_dir(self.data_dir)
        self.finished = self._finished_run()
        if self.finished is not None:
            return
        n = len(self.data.train_texts)
        self.plan = plan_run_privacy(config, n)
        if config.dataset_size is not None and config.dataset_size != n and self.primary:
            print(declared_size_warning(config.dataset_size, n, self.plan.batch_at(0)), file=sys.stderr)
        self.mesh = None
        if config.data_parallel and jax.device_count() > 1:
            self.mesh = parallel.make_data_mesh()
            parallel.check_micro_batch(self.mesh, config.micro_batch)
        latest = list_checkpoints(self.ckpt_dir)[-1:] if self.ckpt_dir.is_dir() else []
        self.resume_state = ckpt.read_state(latest[0][1]) if latest else None
        self.has_checkpoint = bool(latest)  # tracked in memory: other processes must not race the listing
        if self.resume_state is not None:
            self._check_resume(self.resume_state, latest[0][1])

        try:
            self.tokenizer = train_wordpiece(self.data.public_texts, vocab_size=config.resolved_vocab_size)
        except ValueError as err:
            raise UserInputError(f"--vocab-size {config.resolved_vocab_size}: {err}") from None
        self.tokenizer_sha = hashlib.sha256(self.tokenizer.to_str().encode("utf-8")).hexdigest()
        if self.resume_state is not None and self.resume_state.get("tokenizer_sha256") != self.tokenizer_sha:
            raise UserInputError(f"--out {self.out_dir}: the tokenizer retrained on public.jsonl differs from the checkpoint's; use a new --out.")
        specials = special_token_ids(self.tokenizer)
        vocab = self.tokenizer.get_vocab_size()
        self.train_enc = encode_texts(self.tokenizer, self.data.train_texts, max_length=config.max_length)
        self.bert_config = preset_config(config.preset, vocab_size=vocab, max_position_embeddings=max(128, config.max_length))
        base_key = jax.random.PRNGKey(self.seed)
        self.train_key = jax.random.fold_in(base_key, _TRAIN_STREAM)
        params = init_params(self.bert_config, jax.random.fold_in(base_key, _INIT_STREAM), seq_len=config.max_length)
        self.fns = compiled_functions(
            self.bert_config, private=self.plan.private, clip_norm=config.clip_norm, clipping=config.clipping,
            learning_rate=config.learning_rate, warmup_steps=config.warmup_steps, weight_decay=config.weight_decay,
            mesh=self.mesh, mask_token_id=specials["mask"], special_ids=tuple(sorted(set(specials.values()))),
            mask_prob=config.mask_prob, max_predictions=config.resolved_max_predictions)
        opt_state = init_optimizer(self.fns.optimizer, params, total_steps=self.plan.total_steps)
        self._setup_eval()

        self.start_step = 0
        self.ledger: PrivacyLedger | None = None
        if self.resume_state is None:
            self.noise = _shared_noise_source(config.noise_seed)
            self.rng = self.noise.numpy_generator(_POISSON_STREAM)
            self.ledger = (new_ledger(self.plan, sampling=ledger_sampling(config), privacy_unit="example")
                           if self.plan.private else None)
        else:
            restored = ckpt.restore_checkpoint(latest[0][1], params_template=params, opt_state_template=opt_state)
            params, opt_state = restored.params, restored.opt_state
            self.start_step = restored.step
            try:
                self.noise = NoiseSource.from_state(restored.state.get("noise_source"))
            except ValueError:
                raise UserInputError(f"{restored.path}: the checkpoint holds no secret noise state (written by an older "
                                     f"dpaudit); use a new --out.") from None
            self.rng = self.noise.numpy_generator(_POISSON_STREAM)
            self.rng.bit_generator.state = restored.state["numpy_rng"]
            if self.plan.private:  # the ledger keeps its plan certificate: recording the rest costs no accountant call
                try:
                    self.ledger = PrivacyLedger.from_json(restored.state.get("ledger"))
                except (UserInputError, KeyError, TypeError, ValueError, AttributeError) as err:
                    raise UserInputError(f"{restored.path / ckpt.STATE_NAME}: damaged privacy ledger ({err}); delete "
                                         f"{restored.path} to resume from an older checkpoint.") from None
                if self.ledger.steps != restored.step:
                    raise UserInputError(f"{restored.path}: its privacy ledger holds {self.ledger.steps} steps, not "
                                         f"{restored.step}; the checkpoint is damaged, delete it to resume from an older one.")
        if self.mesh is not None:  # global replicated arrays (device_put cannot span processes)
            params, opt_state = parallel.replicate(self.mesh, params), parallel.replicate(self.mesh, opt_state)
        self.params, self.opt_state = params, opt_state
        self.noise_key = noise_key_of(self.noise)
        # Every process has read the out dir (and any checkpoint) before process 0 writes to it.
        parallel.sync_processes("jax_bert_setup")

    def _setup_eval(self) -> None:
        """Heldout evaluation: a fixed subset, masked once with a fixed key, in padded batches."""
        texts = self.data.heldout_texts[: self.config.eval_examples]
        self.eval_batches: list[tuple[dict[str, jax.Array], jax.Array]] = []
        if not texts:
            return
        enc = encode_texts(self.tokenizer, texts, max_length=self.config.max_length)
        size = min(len(texts), max(self.config.micro_batch, 8))
        n_pad = -len(texts) % size
        ids = np.concatenate([enc["input_ids"], np.repeat(enc["input_ids"][:1], n_pad, 0)])
        att = np.concatenate([enc["attention_mask"], np.repeat(enc["attention_mask"][:1], n_pad, 0)])
        content = np.concatenate([enc["content_key"], np.repeat(enc["content_key"][:1], n_pad, 0)])
        weights = np.concatenate([np.ones(len(texts), np.float32), np.zeros(n_pad, np.float32)])
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), _EVAL_STREAM)
        masked = self.fns.mask_batch(key, jnp.asarray(content), jnp.asarray(ids), jnp.asarray(att))
        for start in range(0, len(weights), size):
            batch = {k: v[start : start + size] for k, v in masked.items()}
            w = jnp.asarray(weights[start : start + size])
            if self.mesh is not None:  # global arrays, so evaluation also runs multi-process
                batch, w = parallel.replicate(self.mesh, (batch, w))
            self.eval_batches.append((batch, w))

    # -- the loop ------------------------------------------------------------------------------

    def _batches(self) -> Iterator[tuple[int, np.ndarray]]:
        """(step, sampled indices) from ``start_step`` on; Poisson from the saved Generator state,
        shuffle by replaying the segment's permutation stream (it has no resumable state)."""
        n = self.plan.dataset_size
        step = self.start_step
        while step < self.plan.total_steps:
            batch = self.plan.batch_at(step)
            if self.config.sampling == "poisson":
                yield step, sampling.poisson_sample(self.rng, n, self.plan.sampling_probability(step))
                step += 1
                continue
            segment, offset = self.plan.stage_at(step)
            seg_steps = self.plan.stages[segment][0]
            stream = sampling.shuffle_batches(self.noise.numpy_generator(_SHUFFLE_STREAM, segment), n, batch)
            for _ in range(offset):
                next(stream)
            for _ in range(seg_steps - offset):
                yield step, next(stream)
                step += 1

    def _chunks(self, step: int, indices: np.ndarray) -> list[tuple[dict[str, jax.Array], np.ndarray]]:
        n, m = self.plan.dataset_size, self.config.micro_batch
        batch = self.plan.batch_at(step)
        capacity = self._capacity.get(batch)
        if capacity is None:
            if self.config.sampling == "poisson":
                q = self.plan.sampling_probability(step)  # the realized batch is ~ q n (n the real rows)
                capacity = sampling.microstep_capacity(q * n, m, dataset_size=n, sampling_probability=q)
            else:
                capacity = -(-batch // m)
            self._capacity[batch] = capacity
        mask_key = jax.random.fold_in(jax.random.fold_in(self.train_key, step), 0)
        chunks = []
        for idx, mask in sampling.pack_microsteps(indices, m, capacity):
            masked = self.fns.mask_batch(mask_key, self.train_enc["content_key"][idx], self.train_enc["input_ids"][idx],
                                         self.train_enc["attention_mask"][idx])
            chunks.append((masked, mask))
        return chunks

    def _evaluate(self) -> dict[str, float]:
        if not self.eval_batches:
            return {}
        total = sum(self.fns.eval_sums(self.params, batch, w) for batch, w in self.eval_batches)
        loss_sum, correct, preds = (float(x) for x in jax.device_get(total))
        return {"eval_loss": loss_sum / max(preds, 1.0), "mlm_accuracy": correct / max(preds, 1.0)}

    def _checkpoint_state(self) -> dict[str, Any]:
        """What a checkpoint stores beside params and optimizer state (the step is the checkpoint's own)."""
        return {
            "identity": self._identity(),
            "numpy_rng": _jsonable(self.rng.bit_generator.state),
            "jax_key": np.asarray(jax.random.key_data(self.train_key)).tolist(),  # public (--seed)
            "noise_source": self.noise.to_state(),  # SECRET: checkpoints are private to the data owner
            "ledger": self.ledger.to_json() if self.ledger is not None else None,
            "tokenizer_sha256": self.tokenizer_sha,
            "noise_multiplier": self.plan.noise_multiplier,
            "stopped_at_budget": self.stopped_at_budget,
        }

    def _save(self, step: int) -> None:
        self.metrics.flush()
        if self.primary:
            ckpt.save_checkpoint(self.ckpt_dir, step=step, params=self.params, opt_state=self.opt_state,
                                 state=self._checkpoint_state())
        self.has_checkpoint = True
        parallel.sync_processes(f"jax_bert_checkpoint_{step}")  # no process runs ahead of a half-written one

    def _sync(self, pending: list[tuple[int, Any]], window_start: float, bar: tqdm, *, final: bool = False,
              untimed: int = 0) -> None:
        """The only host sync of the loop: fetch ``pending`` step metrics, write rows, update the bar.

        The last row of the window gets ``examples_per_s`` (over the window's steps but the first
        ``untimed``, which ran before ``window_start``: the compiling first step); at evaluations,
        checkpoints and the end (``final``) also the epsilon spent so far (a PLD call costs about a
        second: not every log).
        """
        if not pending:
            return
        fetched = jax.device_get([m for _, m in pending])
        elapsed = max(time.perf_counter() - window_start, 1e-9)
        timed = fetched[untimed:]
        examples_per_s = float(sum(m.batch_size for m in timed)) / elapsed if timed else None
        last = pending[-1][0] + 1
        wants_epsilon = final or last in self.eval_steps or last in self.checkpoint_steps
        epsilon = self._epsilon_spent() if self.ledger is not None and wants_epsilon else None
        for i, ((step, _), metrics) in enumerate(zip(pending, fetched)):
            row = {
                "step": step + 1,
                "loss": _num(metrics.loss),
                "train_mlm_accuracy": _num(metrics.n_correct / max(float(metrics.n_predictions), 1.0)),
                "batch_size": int(metrics.batch_size),
                "expected_batch_size": self.plan.batch_at(step),
                "grad_snr": _num(metrics.grad_snr) if self.plan.private else None,
                "clip_fraction": _num(metrics.clip_fraction) if self.plan.private else None,
                "clipped_sum_norm": _num(metrics.clipped_sum_norm),
                "noise_norm": _num(metrics.noise_norm) if self.plan.private else None,
                "telemetry_private": True,
            }
            if i == len(pending) - 1:
                if examples_per_s is not None:
                    row["examples_per_s"] = examples_per_s
                if wants_epsilon:
                    row["epsilon"] = epsilon  # spent so far (None when non-private)
                if wants_epsilon and (final or last in self.eval_steps):
                    row.update(self._evaluate())
            self.metrics.append(row)
        if wants_epsilon:
            self.last_epsilon_text = "inf" if epsilon is None else f"{epsilon:.3g}"
        bar.set_postfix(loss=f"{float(fetched[-1].loss):.4g}", eps=self.last_epsilon_text, refresh=False)

    def _epsilon_spent(self) -> float:
        """Epsilon of the recorded steps; cached per step count (the PLD call is the slow part)."""
        steps = self.ledger.steps
        if steps not in self._eps_cache:
            self._eps_cache[steps] = float(self.ledger.epsilon()) if steps else 0.0
        return self._eps_cache[steps]

    def execute(self) -> TrainResult:
        self._setup()
        if self.finished is not None:
            return self._finished_result(self.finished)
        config, plan = self.config, self.plan
        if self.primary:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            for leftover in self.ckpt_dir.glob(".*"):  # staging folders of a checkpoint write that was killed
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        self._capacity: dict[int, int] = {}
        self._eps_cache: dict[int, float] = {}
        # Only process 0 writes; the others keep their rows in memory (multi-host).
        self.metrics = MetricsLog(self.ckpt_dir, writer=self.primary)
        self.stopped_at_budget = bool(self.resume_state and self.resume_state.get("stopped_at_budget"))
        self.metrics.restore(self.start_step)
        total = plan.total_steps
        sync_every = config.log_every
        self.eval_steps = set(range(config.eval_every, total + 1, config.eval_every)) | {total}
        self.checkpoint_steps = checkpoint_steps = set(range(config.checkpoint_every, total + 1, config.checkpoint_every))
        # Until the first exact PLD evaluation, show the certified plan's epsilon: every prefix of the
        # plan spends at most that much.
        planned = plan.planned_epsilon
        self.last_epsilon_text = "inf" if self.ledger is None else ("?" if planned is None else f"<={planned:.3g}")
        step = self.start_step
        bar = tqdm(total=total, initial=step, desc="jax-bert", unit="step", file=sys.stderr, dynamic_ncols=True, leave=False)
        pending: list[tuple[int, Any]] = []
        window, untimed = time.perf_counter(), 0
        try:
            batches = self._batches() if not self.stopped_at_budget else iter(())
            for step_index, indices in batches:
                if self.ledger is not None:
                    try:  # record BEFORE the step: the ledger refuses a step that would overspend
                        plan.record_step(self.ledger, step_index)
                    except BudgetExceededError:
                        self.stopped_at_budget = True
                        break
                chunks = self._chunks(step_index, indices)
                noise_key = jax.random.fold_in(self.noise_key, step_index)
                if self.mesh is not None:
                    noise_key = parallel.replicate(self.mesh, noise_key)
                # The step owns its sensitivity (C): it adds noise of std sigma * step.sensitivity.
                sigma = plan.sigma_at(step_index) if plan.private else 0.0
                self.params, self.opt_state, metrics = self.fns.step(
                    self.params, self.opt_state, chunks, noise_key, sigma, float(plan.batch_at(step_index)))
                pending.append((step_index, metrics))
                step = step_index + 1
                bar.update(1)
                if step == self.start_step + 1:  # the first step compiles: keep it out of examples/s
                    jax.block_until_ready(metrics)
                    window, untimed = time.perf_counter(), 1
                if step % sync_every == 0 or step in checkpoint_steps or step in self.eval_steps:
                    self._sync(pending, window, bar, untimed=untimed)
                    pending, window, untimed = [], time.perf_counter(), 0
                if step in checkpoint_steps and step != total:
                    self._save(step)
            self._sync(pending, window, bar, final=True, untimed=untimed)
        finally:
            bar.close()
        if step != self.start_step or not self.has_checkpoint or self.stopped_at_budget:
            self._save(step)
        result = self._finish(step)
        parallel.sync_processes("jax_bert_finish")  # every process returns after the outputs are complete
        return result

    # -- outputs -------------------------------------------------------------------------------

    def _privacy_record(self, steps: int) -> PrivacyRecord:
        """The run's ``privacy.json``: what ran (the ledger's event and segments) and what it proves."""
        plan, config = self.plan, self.config
        common: dict[str, Any] = {
            "trainer": JaxBertTrainer.name, "privacy_unit": "example", "adjacency": "add_remove",
            "sampling": config.sampling, "steps": steps, "planned_steps": plan.total_steps,
            "randomness": self.noise.note,
            "noise_seed_explicit": self.noise.explicit,
        }
        if not plan.private:
            return PrivacyRecord(
                **common, **plan.public_fields(steps_from_n=False), private=False,
                mechanism="non-private training: no clipping, no noise.",
                guarantee="none: non-private training (no clipping, no noise); epsilon = inf.",
                notes=["non-private run: no guarantee for any file.", TOKENIZER_NOTE],
            )
        assert self.ledger is not None
        computed = self._epsilon_spent()  # = ledger.epsilon(), cached (a PLD call costs about a second)
        delta = self.ledger.delta
        shuffle = config.sampling == "shuffle"
        segments = [dict(seg.to_json(), expected_batch_size=seg.sampling_probability * plan.accounting_size)
                    for seg in self.ledger.segments]
        eps_text = format_up(computed, 4)
        delta_text = format_up(delta, 3)
        sampled = ("fixed-size shuffled batches (--sampling shuffle)" if shuffle
                   else "Poisson-subsampled with rate q = expected batch / N")
        mechanism = (f"DP-SGD (Abadi et al. 2016): {sampled}; each example's gradient clipped to L2 norm "
                     f"C = {config.clip_norm:g} (sensitivity C under add/remove of one example); Gaussian noise of std "
                     f"sigma * C added once to the clipped sum per step; {steps} steps.")
        if shuffle:
            guarantee = ("no proven epsilon: fixed-size shuffled batches (--sampling shuffle). If the batches had been "
                         f"Poisson-sampled, the run would be ({eps_text}, {delta_text})-DP (epsilon_if_poisson).")
        else:
            guarantee = (f"({eps_text}, {delta_text})-DP for one training example (add/remove), Poisson-subsampled "
                         f"Gaussian mechanism with per-example clipping to C = {config.clip_norm:g}, composed over "
                         f"{steps} steps ({self.ledger.accountant.upper()} accountant), for the released model/.")
        event = self.ledger.event()
        public = plan.public_fields(steps_from_n=False, event=None if shuffle else event, delta=delta)
        if public["n_public"] and not shuffle:
            guarantee += (f" N = {plan.dataset_size} is treated as public (q = batch / N): against an adversary who knows "
                          f"N, ({format_up(public['epsilon_replace_one'], 4)}, {delta_text})-DP (replace-one).")
        guarantee += " Condition: " + self.noise.note
        tail = accounting.noise_tail_caveat("jax-float32", self.ledger.segments, delta)
        delta_rule = ("given by --delta" if config.delta is not None
                      else accounting.DEFAULT_DELTA_RULE.replace("default ", "default: ", 1))
        warning = accounting.delta_warning(delta, plan.accounting_size)
        notes = [f"delta: {delta_rule}", TOKENIZER_NOTE, "caveat: " + tail["caveat"]]
        if shuffle:
            notes.insert(0, "caveat: " + SHUFFLE_NOTE)
        if warning:
            notes.insert(0, "warning: " + warning)
        return PrivacyRecord(
            **common, **public, private=True, mechanism=mechanism, noise_tail=tail,
            accountant=self.ledger.accountant,
            event=accounting.event_to_json(event),
            epsilon=None if shuffle else computed,
            epsilon_if_poisson=computed if shuffle else None,
            delta=delta, target_epsilon=self.ledger.target_epsilon,
            clip_norm=config.clip_norm, sensitivity_factor=plan.sensitivity_factor,
            noise_multipliers=list(plan.sigmas or ()), noise_calibrated=plan.noise_calibrated,
            stopped_at_budget=self.stopped_at_budget, segments=segments,
            group_privacy=group_privacy_rows(None if shuffle else computed, delta, canary_frequencies(self.data.manifest)),
            guarantee=guarantee, notes=notes,
        )

    def _summary(self, steps: int, record: PrivacyRecord, rows: list[dict[str, Any]]) -> dict[str, Any]:
        del steps
        return {
            "noise_multiplier": self.plan.noise_multiplier,
            "planned_epsilon": None if self.config.sampling == "shuffle" else self.plan.planned_epsilon,
            "epsilon_if_poisson": record.epsilon_if_poisson,
            "stopped_at_budget": self.stopped_at_budget,
            "resumed_from_step": self.start_step or None,
            "telemetry": {"examples_per_s": last_value(rows, "examples_per_s"), "note": TELEMETRY_SUMMARY_NOTE},
            "sampling": self.config.sampling,
            "devices": 1 if self.mesh is None else int(self.mesh.devices.size),
            "cpu_runtime_tuning": self.runtime_tuning,
            "checkpoints_kept": bool(self.config.keep_checkpoints),
        }

    def _finish(self, steps: int) -> TrainResult:
        out = self.out_dir
        record = self._privacy_record(steps)
        if self.primary:
            hf_io.save_pretrained(out / "model", jax.device_get(self.params), self.bert_config, self.tokenizer)  # atomic
            rows = self.metrics.publish(out)
        else:  # this run's rows as computed here (rows before a resume are only in process 0's file)
            rows = self.metrics.rows()
        summary = self._summary(steps, record, rows)
        result = TrainResult(out_dir=out, steps=steps, epsilon=record.epsilon, delta=record.delta,
                             final_loss=last_value(rows, "loss"), summary=summary)
        if not self.primary:
            return result
        finish_run(
            out, trainer=JaxBertTrainer.name, config=self.config.to_public_dict(), seed=self.seed,
            inputs=self.data.inputs, record=record,
            extra={"model": self.bert_config.to_hf_dict(), "steps": steps, "summary": summary,
                   "tokenizer_trained_on": "public.jsonl", "private_to_data_owner": True,
                   "noise_seed_note": self.noise.note},
        )
        # The run is complete: the secret noise state has no further use (kept, with a warning, if asked).
        remove_checkpoints(out, keep=self.config.keep_checkpoints)
        return result

    def _finished_result(self, manifest: dict[str, Any]) -> TrainResult:
        """The result of a finished run, read back from its run directory (nothing is trained or written)."""
        return finished_result(self.out_dir, manifest)


def _shared_noise_source(noise_seed: int | None) -> NoiseSource:
    """:meth:`NoiseSource.resolve`, with process 0's OS-entropy seed shared by every process of a multi-host run."""
    source = NoiseSource.resolve(noise_seed)
    if source.explicit:
        return source
    return NoiseSource(seed=parallel.broadcast_from_primary(source.seed), explicit=False)


# ----------------------------------------------------------------------------------------------
# Small helpers.


def _num(x: Any) -> float | None:
    """A finite float for JSON, or None (inf/nan are not JSON)."""
    value = float(x)
    return value if math.isfinite(value) else None


def _jsonable(obj: Any) -> Any:
    """numpy scalars inside a bit-generator state -> plain JSON types."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
