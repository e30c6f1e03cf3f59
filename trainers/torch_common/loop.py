"""The torch trainers' plug-in base (``edp-sgd``, ``rgp``) on the core's run skeleton.

The run itself (run directory, privacy plan, secret Poisson sampling, the ledger recorded before
each step, budget stop, checkpoints, metrics, the one ``privacy.json`` builder) is the core's
:class:`dpaudit.training.RunSkeleton`. :class:`TorchPlugin` is the
:class:`~dpaudit.training.TrainerPlugin` both torch trainers share: data, WordPiece tokenizer or
``--init-from``, model and AdamW, masking, evaluation, checkpoints of the trained tensors and the Hugging
Face export. A trainer subclasses it with its mechanism: which parameters it trains
(:meth:`TorchPlugin._trainable`), its clipper (:meth:`TorchPlugin._setup_mechanism`, which sets
``self.clipper``: it owns the sensitivity), the noised aggregate of one step
(:meth:`TorchPlugin.aggregate`) and its words for ``privacy.json`` (:meth:`TorchPlugin.record_parts`).

White-box audits: :class:`TorchPlugin` implements
:class:`~dpaudit.training.gradient_canaries.GradientCanaryHost` (Nasr et al. 2023, Dirac gradient
canaries). Hosted canaries add an audit block (:class:`~trainers.torch_common.canary_block.AuditBlock`)
as the last trained tensor and ``canaries.rows`` audit rows after the N real ones; a trainer's
:meth:`TorchPlugin.aggregate` sends only the real rows through its engines (:meth:`TorchPlugin._split_rows`)
and appends the audit rows' clipped block gradient, and :meth:`TorchPlugin.step` hands the block's
noisy clipped sum to ``canaries.observe``. Without canaries nothing of this runs.

The Config of a trainer built on this loop has the fields the loop reads (task, init_from, data_split, preset,
max_length, epochs, batch_size, learning_rate, weight_decay, lr_warmup_steps, noise_multiplier, target_epsilon,
delta, noise_decay, decay_rate, sigma_min, noise_seed, mask_prob, eval_examples, checkpoint_every,
log_every, keep_checkpoints, dataset_size) and the properties ``mode``, ``private`` and ``resolved_vocab_size``.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from dpaudit.common.errors import UserInputError
from dpaudit.scoring.architecture import transformers_layout
from dpaudit.trainers.torch_common import checkpoint as ckpt
from dpaudit.trainers.torch_common import data as data_mod
from dpaudit.trainers.torch_common import distributed, noise, privacy, sampling
from dpaudit.trainers.torch_common.averaging import WARMUP_RULE, ParameterAverage
from dpaudit.trainers.torch_common.canary_block import AuditBlock
from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.trainers.torch_common.model import (
    build_model,
    load_model,
    per_example_losses,
    special_ids,
)
from dpaudit.trainers.torch_common.noise_corrected_adam import ADAMBC_RULE, NoiseCorrectedAdamW
from dpaudit.training import ClippedSumStep, RecordParts, RunData, RunSettings, RunSkeleton, TrainerPlugin
from dpaudit.training.api import TrainResult
from dpaudit.training.baselines import (
    CLASSIFY_BASELINE_KEY,
    CLASSIFY_BASELINE_RULE,
    CLM_BASELINE_KEY,
    CLM_BASELINE_RULE,
    CLM_LOSS_BASELINE_KEY,
    MLM_BASELINE_KEY,
    MLM_BASELINE_RULE,
    constant_prediction_accuracy,
    eval_rows,
    majority_class_accuracy,
    unigram_loss,
)
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, UNIT_MICROBATCH, GradientCanaries
from dpaudit.training.host_allocator import tune_host_allocator
from dpaudit.training.noise_source import NoiseSource
from dpaudit.training.privacy_plan import PrivacyPlan, decay_schedule
from dpaudit.training.starting_point import StartingPoint, run_inputs
from dpaudit.training.tokenizer import missing_new_tokens, special_token_ids, train_wordpiece

_MASK_STREAM, _EVAL_STREAM = 11, 12  # public --seed streams (masking is not part of the mechanism; each
# example's mask is keyed by its content hash and these: data.mask_tokens)


def warmup_learning_rate(step: int, peak: float, warmup_steps: int) -> float:
    """The learning rate of step ``step`` (from 0) under ``--lr-warmup-steps``: ``peak * (step + 1) / warmup_steps``
    while the warm-up lasts, ``peak`` after it (and always, with ``warmup_steps`` 0).

    The linear warm-up jax-bert's ``--warmup-steps`` climbs (Anil et al. 2021 warm up their DP BERT; a DP step
    from a public start moves the model by noise before its Adam moments settle, and the first epochs are where the
    masked LMs' held-out figure dipped). A function of the step alone: a resumed run takes the rate the straight
    one did, and nothing about the data sets it.
    """
    if warmup_steps and step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak


def draw_rows(positions: np.ndarray, draws: int) -> np.ndarray:
    """The rows of a batch built by :meth:`TorchPlugin._batch` with ``draws`` K (``--mask-draws``) that hold the
    examples at batch ``positions``: example i's K maskings are rows i K .. i K + K - 1 (``np.repeat``'s layout);
    the positions themselves when K = 1."""
    if draws == 1:
        return positions
    return (np.asarray(positions, dtype=np.int64)[:, None] * draws + np.arange(draws)).reshape(-1)


def _seeded(seed: int, stream: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed(sampling.derived_seed(seed, stream, step))


def _scalar(value: float | torch.Tensor, device: torch.device) -> torch.Tensor:
    """A 0-d float64 tensor on ``device`` (host numbers copied asynchronously: no host sync)."""
    t = (value if isinstance(value, torch.Tensor) else torch.tensor(float(value))).to(torch.float64).reshape(())
    return t if t.device == device else to_device(t, device)


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of ``tensors`` as a 0-d float64 tensor on their device (no host sync)."""
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)).double())


@dataclass(frozen=True)
class StepNoise:
    """This process's noise for one step: the sum of ``draws`` ((std, key) Gaussian draws keyed by the
    secret ``seed``), shaped like ``like``; zeros when private with no draw of its own; nothing when
    not private.

    :meth:`draw` is called once the clipped sum is ready, and then uses every core
    (:func:`noise.gaussian_sum`). Drawing in threads beside the clipping was slower on a 2-core CPU:
    the draw then competes with torch's own threads for the same cores.
    """

    like: list[torch.Tensor]
    draws: list[noise.Draw]
    seed: int
    private: bool

    def draw(self) -> list[torch.Tensor]:
        return noise.gaussian_sum(self.like, self.draws, self.seed) if self.private else []


def noised_total(
    grad_sum: list[torch.Tensor], step_noise: StepNoise, stats: tuple, *, world: distributed.World, device: torch.device
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """This process's clipped sum plus its noise (:class:`StepNoise`), summed over all processes, and the
    step's telemetry.

    The clipped sum and the noise are all-reduced separately in one flat call, so the telemetry can
    report both norms: [loss sum, correct sum, units, units clipped, ||clipped sum||, ||noise||] as a
    float64 tensor on ``device`` (no host sync). ``||clipped sum|| / ||noise||`` is the gradient SNR as
    jax-bert defines it. On one process drawing one CPU Philox draw, the noise is added straight into
    the clipped sum (:func:`noise.add_gaussian_`: the same numbers, no noise buffer), and the
    sampler sums both squares in that pass.
    """
    totals = torch.stack([_scalar(v, device) for v in stats])
    if world.size == 1 and step_noise.private and noise.fusable(grad_sum, step_noise.draws):
        # One pass: the noise goes straight into the clipped sum, and the sampler sums both squares.
        squares = noise.add_gaussian_(grad_sum, step_noise.draws[0], step_noise.seed)
        return grad_sum, torch.cat([totals, torch.tensor(squares, dtype=torch.float64).sqrt()])
    zero = torch.zeros((), dtype=torch.float64, device=device)
    noise_sum = step_noise.draw()
    distributed.all_reduce_sum_(grad_sum + noise_sum, world)  # one flat all-reduce of both
    distributed.all_reduce_sum_([totals], world)
    norms = torch.stack([_norm(grad_sum), _norm(noise_sum) if noise_sum else zero])
    if noise_sum:
        torch._foreach_add_(grad_sum, noise_sum)
    return grad_sum, torch.cat([totals, norms])


class TorchStep(ClippedSumStep):
    """The skeleton's clipped-sum step of a torch run: :meth:`TorchPlugin.step` with the clipper's sensitivity.

    The clipper computes the clipped sum, so it owns the sensitivity (``sensitivity_factor`` x C); the
    plan and the record read it here. Non-private (no clipper): no clip norm, no sensitivity
    (:class:`~dpaudit.training.plugin.ClippedSumStep`).
    """

    def __init__(self, run: TorchPlugin) -> None:
        clipper = run.clipper
        if clipper is None:
            super().__init__(clip_norm=None)
        else:
            super().__init__(
                clip_norm=clipper.clip_norm,
                sensitivity_factor=clipper.sensitivity_factor,
                sensitivity=clipper.sensitivity,
            )
        self.run = run

    def __call__(self, step: int, indices: np.ndarray, sigma: float, expected_batch: float) -> dict[str, Any]:
        return self.run.step(step, indices, sigma=sigma, expected_batch=expected_batch)


class TorchPlugin(TrainerPlugin):
    """One invocation as a :class:`~dpaudit.training.TrainerPlugin`; a trainer subclasses it with its mechanism."""

    #: The registered trainer name (run directories, checkpoints, progress bar).
    trainer_name: ClassVar[str] = ""

    def __init__(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> None:
        self.data_dir, self.out_dir, self.config, self.seed = data_dir, out_dir, config, int(seed)
        self.name = self.trainer_name
        #: Set by :meth:`_setup_mechanism`: the clipper (``clip_norm``, ``sensitivity``, ``sensitivity_factor``) or None.
        self.clipper: Any = None
        self.device: torch.device | None = None
        self.allocator_tuned = False
        self.world: distributed.World | None = None
        self.data: Any = None
        self.model: Any = None
        self.tokenizer: Any = None
        self.tokenizer_source = ""
        self.starting_point: StartingPoint | None = None  # --init-from, checked in load_data
        self.head: str | None = None  # classify from a start: "reused" or "fresh"
        self.eval_baseline: dict[str, float | None] | None = None  # the trivial baseline of evaluate(), computed once
        self.specials: dict[str, int] = {}
        self.vocab_size = 0
        self.encoded: dict[str, Any] = {}
        self.labels: dict[str, torch.Tensor] = {}
        self.n_predictions = 0
        self.names: list[str] = []
        self.params: list[torch.nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None
        self.steps_per_epoch = 0
        #: White-box audit (:meth:`host_gradient_canaries`): the canaries, the real row count N and the block.
        self.canaries: GradientCanaries | None = None
        self.real_rows = 0
        self.audit: AuditBlock | None = None
        self.average: ParameterAverage | None = None  # --ema-decay (init_model)
        self.skeleton = RunSkeleton(self, Path(out_dir))

    # -- the skeleton's state, read by the mechanism -------------------------------------------

    @property
    def plan(self) -> PrivacyPlan:
        return self.skeleton.plan

    @plan.setter
    def plan(self, value: PrivacyPlan) -> None:  # tests replace it (e.g. with a noiseless plan)
        self.skeleton.plan = value

    @property
    def noise_source(self) -> NoiseSource:
        return self.skeleton.noise_source

    @property
    def ledger(self) -> Any:
        return self.skeleton.ledger

    def _setup(self) -> None:
        """Everything before the first step (:meth:`RunSkeleton.setup`)."""
        self.skeleton.setup()

    def execute(self) -> TrainResult:
        return self.skeleton.execute()

    def _sample(self, step: int) -> np.ndarray:
        """The skeleton's secret Poisson sample of step ``step`` (the benchmarks drive :meth:`step` with it)."""
        return self.skeleton.sample(step)

    # -- the trainer's mechanism (a subclass supplies these) --------------------------------------

    def _trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        """Names and tensors the optimizer updates and checkpoints hold (called once the model is built)."""
        raise NotImplementedError

    def _setup_mechanism(self, n: int, resume_state: Mapping[str, Any] | None) -> None:
        """Set ``self.clipper`` (it owns the sensitivity) and whatever else the mechanism needs."""
        raise NotImplementedError

    def aggregate(
        self, step: int, indices: np.ndarray, sigma: float | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The summed, clipped and noised gradient (aligned with ``self.params``) of the batch ``indices``
        over all processes, and its telemetry tensor (:func:`noised_total`). ``sigma``: the skeleton's
        noise multiplier of this step (None: the plan's, ``sigma_at(step)``; 0 when non-private)."""
        raise NotImplementedError

    def _mechanism_parts(self, plan: PrivacyPlan, steps: int, details: dict[str, Any]) -> RecordParts:
        """The trainer's words for privacy.json, given the shared ``details``."""
        raise NotImplementedError

    # -- white-box audit: GradientCanaryHost (Nasr et al. 2023, Dirac gradient canaries) -------------

    def gradient_canary_unit(self) -> tuple[str, int]:
        """The clipping unit as the engines implement it: here each example (per-example clipping, or
        none); a trainer that clips micro-batches overrides it."""
        return UNIT_EXAMPLE, 1

    def host_gradient_canaries(self, canaries: GradientCanaries) -> None:
        """Host ``canaries`` in the run about to start: :meth:`load_data` then counts their rows and
        :meth:`init_model` adds their block (see :mod:`dpaudit.training.gradient_canaries`).

        Raises:
            RuntimeError: called twice, or after the run was set up (the rows would not be sampled).
            ValueError: micro-batch clipping and an audit row without a slot in ``[0, k)``.
        """
        if self.canaries is not None or self.skeleton.data is not None:
            raise RuntimeError("host_gradient_canaries must be called once, before the run is set up.")
        unit, k = self.gradient_canary_unit()
        if unit == UNIT_MICROBATCH and (canaries.slot is None or (canaries.rows and int(canaries.slot.max()) >= k)):
            raise ValueError(f"this run clips {k} micro-batches per step: each audit row needs a slot in [0, {k}).")
        self.canaries = canaries

    def canary_parameters(self) -> np.ndarray:
        """The audit block's current values as the audit reads them (float64, ``(size,)``): the last iterate."""
        if self.audit is None:
            raise RuntimeError("no audit block: host gradient canaries and set the run up first.")
        return self.audit.values()

    def _audit_groups(self) -> int | None:
        """Reserved block coordinates per canary: None for one (a flat block: per-example clipping or
        none); a trainer with per-layer clip norms returns its number of layer groups (:mod:`.canary_block`)."""
        return None

    @property
    def model_params(self) -> list[torch.nn.Parameter]:
        """The model's trained tensors: :attr:`params` without the audit block (the engines' tensors)."""
        return self.params if self.audit is None else self.params[:-1]

    def _split_rows(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(real row indices, audit rows) of a step's sample. Without canaries ``indices`` itself, untouched:
        the real rows reach the engines exactly as in a run that hosts none."""
        if self.audit is None:
            return indices, np.zeros(0, dtype=np.int64)
        return self.audit.split(indices)

    def _audit_example_sum(self, rows: np.ndarray, clip_norm: float | None) -> torch.Tensor | None:
        """Per-example clipping: the block's clipped sum over the audit ``rows``, added by process 0 only
        (each row is summed once over the processes, like the noise it draws); None when not auditing."""
        if self.audit is None:
            return None
        return self.audit.example_sum(rows if self.primary else rows[:0], clip_norm)

    def _with_block(self, grads: list[torch.Tensor] | None, block: torch.Tensor | None) -> list[torch.Tensor] | None:
        """The model's sums ``grads`` (None: this process had no real rows) followed by the audit block's
        sum, aligned with :attr:`params`; ``grads`` itself when not auditing."""
        if block is None:
            return grads
        model = grads if grads is not None else [torch.zeros_like(p) for p in self.model_params]
        return [*model, block]

    def _sigma(self, step: int, sigma: float | None) -> float:
        """The noise multiplier of step ``step``: the skeleton's, else the plan's (0 when non-private)."""
        if sigma is not None:
            return sigma
        return self.plan.sigma_at(step) if self.plan.private else 0.0

    # -- the plug-in surface ----------------------------------------------------------------------

    def start(self) -> None:
        # CPU: keep freed memory mapped so per-step gradient buffers (hundreds of MB of per-example
        # gradients in dp-sgd) are reused instead of page-faulted in afresh every step (docs/trainers.md, "Performance notes").
        self.device = distributed.resolve_device(self.config.device)
        self.allocator_tuned = tune_host_allocator() if self.device.type == "cpu" else False
        self.world = distributed.init_world(self.device)

    @property
    def primary(self) -> bool:
        return self.world is None or self.world.primary

    def barrier(self, tag: str) -> None:
        del tag
        distributed.barrier(self.world)

    def share_source(self, source: NoiseSource) -> NoiseSource:
        """Process 0's seed, broadcast to every process."""
        return NoiseSource(seed=distributed.broadcast_seed(source.seed, self.world), explicit=source.explicit)

    def settings(self) -> RunSettings:
        config = self.config
        return RunSettings(
            config=config.to_dict(),
            noise_seed=config.noise_seed,
            keep_checkpoints=config.keep_checkpoints,
            plan=self._plan_request(),
            log_every=config.log_every,
            checkpoint_every=config.checkpoint_every,
            eval_every=self.steps_per_epoch,
            checkpoint_at_eval=True,
            progress_label=f"{self.trainer_name} {config.mode}",
        )

    def _plan_request(self) -> dict[str, Any]:
        """One epoch is ceil(N / batch) Poisson-sampled steps, N the declared public --dataset-size when
        given (q and the steps then never depend on the private row count), else the real N, treated as public."""
        config = self.config
        return {
            "declared_size": config.dataset_size,
            "stages": [(self.steps_per_epoch, config.batch_size)] * config.epochs,
            "non_private": not config.private,
            "noise_multiplier": config.noise_multiplier,
            "target_epsilon": config.target_epsilon,
            "delta": config.delta,
            "noise_schedule": decay_schedule(
                config.noise_decay, epochs=config.epochs, rate=config.decay_rate, sigma_min=config.sigma_min
            ),
            "noise_sampler": privacy.noise_sampler(self.device.type if self.device is not None else "cpu"),
            "accept_noise_tail": config.accept_noise_tail,
        }

    def load_data(self) -> RunData:
        config = self.config
        self.data = data_mod.load_inject_dir(
            self.data_dir,
            task=config.task,
            labels=config.labels,
            unknown_label=config.unknown_label,
            split=config.data_split,
        )
        self.real_rows = len(self.data.train.texts)
        # A white-box audit's rows follow the real ones (indices N .. N + rows - 1) and are sampled like them.
        n = self.real_rows + (self.canaries.rows if self.canaries is not None else 0)
        size = config.dataset_size if config.dataset_size is not None else n
        self.steps_per_epoch = math.ceil(size / config.batch_size)
        total = self.steps_per_epoch * config.epochs
        if config.lr_warmup_steps >= total:
            raise UserInputError(
                f"--lr-warmup-steps {config.lr_warmup_steps} is not shorter than the run's {total} steps "
                f"({config.epochs} epochs of {self.steps_per_epoch}); give fewer warm-up steps."
            )
        # (data.inputs is hashed here, once: the manifest needs it at the end, when --data may be gone.)
        # (--init-from passes the one model directory check here, against transformers' tensors for its config.json.)
        inputs, identity, frequencies, self.starting_point = run_inputs(
            self.data, init_from=config.init_from, data_split=config.data_split, layout=transformers_layout
        )
        return RunData(
            size=n,
            inputs=inputs,
            identity=identity,
            frequencies=frequencies,
            split=config.data_split,
            start=self.starting_point,
        )

    def check_resume(self, state: Mapping[str, Any], path: Path) -> None:
        if state.get("world_size") != self.world.size:
            raise UserInputError(
                f"--out {self.out_dir} was trained by {state.get('world_size')} processes, not "
                f"{self.world.size}; resume with the same number."
            )

    def init_model(self, resume_state: Mapping[str, Any] | None) -> None:
        """Tokenizer and model (from --seed or --init-from), encoded splits, the trained tensors and AdamW."""
        del resume_state  # restored after the plan (restore)
        config = self.config
        self._build_model()
        self.model.to(self.device)
        where = f"--init-from {self.starting_point.given}" if self.starting_point is not None else "tokenizer"
        causal = config.task == "clm"
        # A causal start keeps its own tokenizer (GPT-2's BPE has no [MASK]); its BOS goes first (data.encode).
        self.specials = {} if causal and self.starting_point is not None else special_ids(self.tokenizer, where=where)
        bos = getattr(self.model.config, "bos_token_id", None) if causal and self.starting_point is not None else None
        self.vocab_size = int(self.model.config.vocab_size)
        self.encoded = {
            name: data_mod.encode(self.tokenizer, split.texts, max_length=config.max_length, bos_id=bos)
            for name, split in (
                ("train", self.data.train),
                ("heldout", self.data.heldout),
                ("public", self.data.public),
            )
        }
        self.labels = {name: torch.from_numpy(ids) for name, ids in self.data.label_ids.items()}  # classify only
        left_out = self.data.label_details().get("rows_left_out_for_unknown_labels", {})
        if self.world.primary and any(left_out.values()):
            print(
                f"warning: {left_out.get('heldout', 0)} heldout.jsonl and {left_out.get('public', 0)} public.jsonl rows have "
                "a label outside the label set and are left out of evaluation (--unknown-label NAME maps them).",
                file=sys.stderr,
                flush=True,
            )
        self.n_predictions = data_mod.max_predictions(config.max_length, config.mask_prob)
        self.names, self.params = self._trainable()
        if self.canaries is not None:  # the audit block: trained, noised and decayed like the model's tensors
            self.audit = AuditBlock(self.canaries, self.real_rows, groups=self._audit_groups(), device=self.device)
            self.names, self.params = [*self.names, AuditBlock.NAME], [*self.params, self.audit.param]
        if config.adambc_floor is not None:  # DP-AdamBC: Phi_t handed to each step (step)
            self.optimizer = NoiseCorrectedAdamW(
                self.params, lr=config.learning_rate, weight_decay=config.weight_decay, floor=config.adambc_floor
            )
        else:
            self.optimizer = torch.optim.AdamW(
                self.params, lr=config.learning_rate, weight_decay=config.weight_decay, foreach=True
            )
        # --ema-decay: the model's trained tensors averaged over the iterates (the audit block reads its own
        # noised sums, never an average).
        if config.ema_decay is not None:
            self.average = ParameterAverage(self.model_params, config.ema_decay)

    @contextlib.contextmanager
    def _averaged(self) -> Iterator[None]:
        """The model as evaluated and exported: the parameter average inside the block under --ema-decay, the
        last iterate otherwise."""
        if self.average is None:
            yield
            return
        with self.average.swapped():
            yield

    def _build_model(self) -> None:
        config = self.config
        start = self.starting_point
        if start is not None:
            option = f"--init-from {start.given}"
            self.model, self.tokenizer, self.head = load_model(
                start.model_dir, config.task, option=option, label_names=self.data.label_names, seed=self.seed
            )
            if self.head == "fresh" and self.world.primary:  # what transformers' silenced load report would say
                why = (
                    "no classification head for this run's labels (its config.json's id2label is another label set, "
                    "or names none)"
                    if config.task == "classify"
                    else "no masked-LM head (its weights hold the encoder only)"
                )
                print(
                    f"note: {option} has {why}: a fresh head drawn from --seed is trained with the run.",
                    file=sys.stderr,
                    flush=True,
                )
            if config.max_length > int(getattr(self.model.config, "max_position_embeddings", config.max_length)):
                raise UserInputError(
                    f"--max-length {config.max_length} exceeds the start's position table "
                    f"(max_position_embeddings {self.model.config.max_position_embeddings}); lower "
                    "--max-length."
                )
            try:
                missing_new_tokens(self.tokenizer, self.data.run.new_tokens, option=option)
            except ValueError as err:
                raise UserInputError(str(err)) from None
            self.tokenizer_source = f"the starting point's tokenizer.json ({start.describe()}), as it came."
            return
        try:
            self.tokenizer = train_wordpiece(
                self.data.public.texts, vocab_size=config.resolved_vocab_size, new_tokens=self.data.run.new_tokens
            )
        except ValueError as err:
            raise UserInputError(f"--vocab-size {config.resolved_vocab_size}: {err}") from None
        specials = special_token_ids(self.tokenizer) if config.task == "clm" else None  # bos/eos/pad of the GPT-2
        self.model = build_model(
            config.task,
            preset=config.preset,
            vocab_size=self.tokenizer.get_vocab_size(),
            max_length=config.max_length,
            label_names=self.data.label_names,
            seed=self.seed,
            specials=specials,
            zero_rows=[self.tokenizer.token_to_id(t) for t in self.data.run.new_tokens],
        )
        self.tokenizer_source = "WordPiece trained on public.jsonl only (never on train.jsonl or the canaries)."

    def make_step(self, dataset_size: int, resume_state: Mapping[str, Any] | None) -> TorchStep:
        self._setup_mechanism(dataset_size, resume_state)
        return TorchStep(self)

    def read_state(self, path: Path) -> dict[str, Any]:
        """The checkpoint's state; one written before the run skeleton (secret seed under ``noise_seed``,
        the process count in its identity) is read in today's keys, so an interrupted run still resumes."""
        state = ckpt.read_state(path)
        if "noise_source" not in state and "noise_seed" in state:
            source = NoiseSource(seed=int(state.pop("noise_seed")), explicit=bool(state.pop("noise_explicit", False)))
            state["noise_source"] = source.to_state()
        identity = state.get("identity")
        if "world_size" not in state and isinstance(identity, dict) and "world_size" in identity:
            state["world_size"] = identity.pop("world_size")
        if isinstance(identity, dict) and isinstance(identity.get("config"), dict):  # older field names (--model)
            identity["config"] = type(self.config).upgrade_stored(identity["config"])
        return state

    def restore(self, path: Path) -> int:
        average = self.average.tensors if self.average is not None else None
        state = ckpt.restore_checkpoint(
            path, names=self.names, params=self.params, optimizer=self.optimizer, average=average
        )
        return int(state["step"])

    def save(self, directory: Path, step: int, state: Mapping[str, Any]) -> None:
        ckpt.save_checkpoint(
            directory,
            step=step,
            names=self.names,
            params=self.params,
            optimizer=self.optimizer,
            state=dict(state),
            average=self.average.tensors if self.average is not None else None,
        )

    def extra_state(self) -> dict[str, Any]:
        return {"world_size": self.world.size}

    def export(self, model_dir: Path) -> None:
        """model/: the trained model (the parameter average under --ema-decay) in Hugging Face's layout."""
        with self._averaged():
            self._write_model(model_dir)

    def _write_model(self, model_dir: Path) -> None:
        """Write the model as it stands (a trainer with more to write overrides this)."""
        from dpaudit.trainers.torch_common.hf_export import save_hf

        start = self.starting_point.model_dir if self.starting_point is not None else None
        save_hf(model_dir, self.model, self.tokenizer, start_dir=start)

    def summary(self) -> dict[str, Any]:
        key, rule = {
            "classify": (CLASSIFY_BASELINE_KEY, CLASSIFY_BASELINE_RULE),
            "clm": (CLM_BASELINE_KEY, CLM_BASELINE_RULE),
        }.get(self.config.task, (MLM_BASELINE_KEY, MLM_BASELINE_RULE))
        rules = {key: rule, **({CLM_LOSS_BASELINE_KEY: CLM_BASELINE_RULE} if self.config.task == "clm" else {})}
        return {
            "mode": self.config.mode,
            "task": self.config.task,
            "processes": self.world.size,
            "host_allocator_tuned": self.allocator_tuned,
            **({"baselines": rules} if self.eval_baseline is not None else {}),
        }

    def manifest_extra(self) -> dict[str, Any]:
        return {"model": self.model.config.to_dict(), "tokenizer": self.tokenizer_source}

    def record_parts(self, plan: PrivacyPlan, steps: int) -> RecordParts:
        config = self.config
        details: dict[str, Any] = {
            "mode": config.mode,
            "task": config.task,
            "epochs": config.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "expected_batch_size": config.batch_size,
            "tokenizer": self.tokenizer_source,
            **self.data.label_details(),
        }
        if self.head is not None:
            details["classifier_head" if config.task == "classify" else "mlm_head"] = self.head
        if plan.private:
            details["noise_decay"] = {
                "kind": config.noise_decay,
                "rate": config.decay_rate,
                "sigma_min": config.sigma_min,
                "fixed_in_advance": True,
            }
            details["noise_generator"] = noise.describe()
        if config.adambc_floor is not None:
            details["optimizer"] = {
                "kind": "DP-AdamBC (Tang et al. 2024)",
                "floor": config.adambc_floor,
                "rule": ADAMBC_RULE,
                "why_post_processing": "Phi_t is computed from sigma, the sensitivity and the expected batch size, "
                "public values fixed before the run; the moments read the noised gradients only",
            }
        if self.average is not None:
            details["parameter_average"] = {
                "kind": "ema",
                "decay": self.average.decay,
                "warmup": WARMUP_RULE,
                "rule": "the evaluated and exported model is the average of the iterates: post-processing of the "
                "noised updates, covered by the same epsilon",
            }
        return self._mechanism_parts(plan, steps, details)

    # -- batches -----------------------------------------------------------------------------

    def _batch(
        self, split: str, indices: np.ndarray, *, generator: torch.Generator | None, draws: int = 1
    ) -> dict[str, torch.Tensor]:
        """Tensors of the examples ``indices`` of ``split``, masked for MLM: each example's mask is keyed by
        its own content hash and ``generator``'s public (--seed, stream, step) seed only, never by its
        position or the other rows (:func:`~trainers.torch_common.data.mask_tokens`).

        ``draws`` K > 1 (MLM only, ``--mask-draws``): K rows per example, example i's at rows i K .. i K + K - 1
        (:func:`draw_rows`), each masked by its own draw key (:func:`~trainers.torch_common.data.draw_contents`) and
        weighted 1 / K (``draw_weight``), so a unit's loss is the mean over its example's K maskings."""
        if draws > 1 and self.config.task != "mlm":  # the config refuses it first
            raise ValueError(f"{draws} mask draws: only a masked LM draws masks")
        rows = np.repeat(indices, draws) if draws > 1 else indices
        ids, mask = self.encoded[split].batch(rows)
        if self.config.task == "clm":  # nothing drawn: every real token after the first is predicted
            batch = {"input_ids": ids, "next_weights": mask.float()}
        elif self.config.task == "classify":
            batch = {"input_ids": ids, "labels": self.labels[split][torch.as_tensor(indices, dtype=torch.long)]}
        else:
            content = self.encoded[split].content[torch.as_tensor(indices, dtype=torch.long)]
            batch = data_mod.mask_tokens(
                ids,
                mask,
                generator=generator,
                mask_id=self.specials["mask"],
                vocab_size=self.vocab_size,
                special_ids=sorted(set(self.specials.values())),
                mask_prob=self.config.mask_prob,
                n_predictions=self.n_predictions,
                content=content if draws == 1 else data_mod.draw_contents(content, draws),
            )
            if draws > 1:
                batch["draw_weight"] = torch.full((len(rows),), 1.0 / draws)
        batch["mask4"] = data_mod.additive_mask(mask)
        return batch

    def _on_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch`` on the run's device (pinned and copied asynchronously to a GPU: no host sync)."""
        return {k: to_device(v, self.device) for k, v in batch.items()}

    # -- one step ----------------------------------------------------------------------------

    def step(
        self, step: int, indices: np.ndarray, *, sigma: float | None = None, expected_batch: float | None = None
    ) -> dict[str, Any]:
        """Compute the (noised) aggregate of this step's batch and apply Adam; returns telemetry with a
        device tensor of statistics (:meth:`_telemetry` turns it into numbers at log intervals)."""
        grad_sum, stats = self.aggregate(step, indices, sigma)
        if self.audit is not None:  # the audit's one host sync per step: the block's noisy clipped sum
            self.canaries.observe(step, self.audit.project(grad_sum[-1]))
        # The expected batch size: public, unlike the realized one.
        scale = 1.0 / (expected_batch if expected_batch is not None else self.plan.batch_at(step))
        for p, a in zip(self.params, grad_sum):
            p.grad = a.mul_(scale)
        rate = warmup_learning_rate(step, self.config.learning_rate, self.config.lr_warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        if isinstance(self.optimizer, NoiseCorrectedAdamW):
            # The noise's variance per coordinate of p.grad: the std drawn on the sum (sigma x sensitivity, however
            # the engines split the draws) over the same public divisor.
            std = self._sigma(step, sigma) * self.clipper.sensitivity * scale
            self.optimizer.step(noise_variance=std * std)
        else:
            self.optimizer.step()
        for p in self.params:
            p.grad = None
        if self.average is not None:
            self.average.update(step)
        # Loss and accuracy telemetry average over the real rows (audit rows have no loss).
        rows = len(indices) if self.audit is None else int(np.count_nonzero(indices < self.real_rows))
        return {
            "stats": stats,
            "batch_size": rows,
            "sigma": self._sigma(step, sigma) if self.plan.private else None,
            "learning_rate": rate,
        }

    def fetch(self, pending: Sequence[tuple[int, Any]]) -> list[dict[str, Any]]:
        """Metric rows of the pending steps: their statistics fetched in one copy (the loop's only host sync)."""
        fetched = torch.stack([out["stats"] for _, out in pending]).cpu().tolist()
        return [
            {
                "step": step + 1,
                "epoch": self.plan.stage_at(step)[0],
                **self._telemetry(out, stats),
                "telemetry_private": True,
            }
            for (step, out), stats in zip(pending, fetched)
        ]

    def _telemetry(self, metrics: dict[str, Any], stats: list[float]) -> dict[str, Any]:
        """A metrics row from :meth:`step`'s output and its fetched statistics.

        ``grad_snr`` as jax-bert defines it: the norm of the clipped sum over the norm of the noise
        actually added to it, both summed over processes (inf without noise).
        """
        loss_sum, correct_sum, units, clipped, sum_norm, noise_norm = stats
        n = metrics["batch_size"]
        private = self.plan.private
        return {
            "loss": loss_sum / n if n else None,
            "train_accuracy": correct_sum / n if n else None,
            "batch_size": n,
            "learning_rate": metrics["learning_rate"],
            "clip_fraction": clipped / units if (self.clipper is not None and units) else None,
            "sigma": metrics["sigma"],
            "clipped_sum_norm": sum_norm,
            "noise_norm": noise_norm if private else None,
            "grad_snr": (sum_norm / noise_norm if noise_norm > 0 else None) if private else None,
        }  # inf: not JSON

    # -- evaluation --------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        available = self.data.labelled_rows("heldout")  # classify: rows with a class id
        rows = available[: self.config.eval_examples]
        n = len(rows)
        if n == 0:
            return {}
        gen = _seeded(self.seed, _EVAL_STREAM, 0)
        loss_sum = correct = 0.0
        batches = [self._batch("heldout", rows[start : start + 64], generator=gen) for start in range(0, n, 64)]
        with self._averaged():
            for cpu in batches:
                losses, right = per_example_losses(self.model, self._on_device(cpu))
                loss_sum += float(losses.sum())
                correct += float(right.sum())
        if self.eval_baseline is None:  # the same rows and masks every evaluation: computed once
            self.eval_baseline = self._baseline(batches)
        key = {"classify": "eval_accuracy", "clm": "next_token_accuracy"}.get(self.config.task, "mlm_accuracy")
        return {"eval_loss": loss_sum / n, key: correct / n, **self.eval_baseline, **eval_rows(n, len(available))}

    def _baseline(self, batches: list[dict[str, torch.Tensor]]) -> dict[str, float | None]:
        """The best constant prediction's accuracy on the evaluated rows, scored like the model
        (:mod:`dpaudit.training.baselines`): the majority class, or the most frequent masked (clm: next)
        token (each row's accuracy, averaged over rows, as :func:`per_example_losses` scores), and for clm
        the unigram loss beside the held-out loss."""
        if self.config.task == "classify":
            labels = torch.cat([b["labels"] for b in batches]).numpy()
            return {CLASSIFY_BASELINE_KEY: majority_class_accuracy(labels)}
        if self.config.task == "clm":  # the targets of positions 1.. of each row, padded to one width
            width = max(b["input_ids"].shape[1] for b in batches)
            pad = lambda t: torch.nn.functional.pad(t[:, 1:], (0, width - t.shape[1])).numpy()
            targets = np.concatenate([pad(b["input_ids"]) for b in batches])
            weights = np.concatenate([pad(b["next_weights"]) for b in batches])
            return {
                CLM_BASELINE_KEY: constant_prediction_accuracy(targets, weights, per_example=True),
                CLM_LOSS_BASELINE_KEY: unigram_loss(targets, weights),
            }
        targets = np.concatenate([b["targets"].numpy() for b in batches])
        weights = np.concatenate([b["weights"].numpy() for b in batches])
        return {MLM_BASELINE_KEY: constant_prediction_accuracy(targets, weights, per_example=True)}
