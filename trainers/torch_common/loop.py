"""The training loop the torch trainers share (``edp-sgd``, ``rgp``): set up or resume, step, checkpoint, finish.

A trainer subclasses :class:`TorchRun` and supplies its mechanism: which parameters it trains
(:meth:`TorchRun._trainable`), its clipper (:meth:`TorchRun._setup_mechanism`, which sets
``self.clipper``: it owns the sensitivity), the noised aggregate of one step
(:meth:`TorchRun.aggregate`), and its ``privacy.json`` (:meth:`TorchRun._privacy_record`). Everything
else is here, once (DESIGN sections 3 and 5):

1. verify the inject directory; read train (private), heldout (evaluation) and public (tokenizer)
   splits; resolve the secret noise seed (OS entropy unless --noise-seed; process 0's is broadcast);
2. build the clipper, then plan the privacy of the whole run before anything is written: per-epoch
   sigma schedule x sensitivity factor, sigma_0 given or calibrated, the ledger certifies the plan;
3. each step: Poisson-sample (secret generator keyed by the step), record the step in the ledger
   BEFORE it runs (the ledger refuses a step past the budget and the run stops there), aggregate
   (the trainer's mechanism: clipped, noised, all-reduced), divide by the expected batch size, Adam;
4. checkpoint atomically every --checkpoint-every steps and at each epoch end; a rerun of the same
   command resumes from the newest checkpoint (RNG streams are keyed by step: nothing else to save);
5. finish: ``model/``, ``metrics.jsonl``, ``privacy.json``, ``manifest.json`` (last), each atomic;
   checkpoints/ (it holds the secret seed) is deleted unless --keep-checkpoints.

The Config of a trainer built on this loop has the fields the loop reads (task, model, preset,
max_length, epochs, batch_size, learning_rate, weight_decay, noise_multiplier, target_epsilon,
delta, noise_decay, decay_rate, sigma_min, noise_seed, mask_prob, eval_examples, checkpoint_every,
keep_checkpoints) and the properties ``mode``, ``private`` and ``resolved_vocab_size``.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from dpaudit.accounting.ledger import BudgetExceededError, PrivacyLedger
from dpaudit.errors import UserInputError
from dpaudit.figures import format_up
from dpaudit.host_allocator import tune_host_allocator
from dpaudit.privacy_plan import decay_schedule, declared_size_warning, new_ledger, plan_privacy
from dpaudit.privacy_record import PrivacyRecord
from dpaudit.secret_rng import NoiseSource
from dpaudit.tokenizer import train_wordpiece
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
from dpaudit.trainers.torch_common import checkpoint as ckpt
from dpaudit.trainers.torch_common import data as data_mod
from dpaudit.trainers.torch_common import distributed, noise, sampling
from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.trainers.torch_common.model import (
    build_model,
    load_model,
    per_example_losses,
    special_ids,
)

_MASK_STREAM, _EVAL_STREAM = 11, 12  # public --seed streams (masking is not part of the mechanism; each
# example's mask is keyed by its content hash and these: data.mask_tokens)


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


def noised_total(grad_sum: list[torch.Tensor], step_noise: StepNoise, stats: tuple, *,
                 world: distributed.World, device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
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


class TorchRun:
    """One invocation: set up (or resume), loop, finish. Not reusable; a trainer subclasses it with its mechanism."""

    #: The registered trainer name (run directories, checkpoints, progress bar).
    trainer_name: ClassVar[str] = ""
    #: Set by :meth:`_setup_mechanism`: the clipper (``clip_norm``, ``sensitivity``, ``sensitivity_factor``) or None.
    clipper: Any = None

    def __init__(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> None:
        self.data_dir, self.out_dir, self.config, self.seed = data_dir, out_dir, config, seed
        self.ckpt_dir = out_dir / CHECKPOINT_DIR

    # -- the trainer's mechanism (a subclass supplies these) --------------------------------------

    def _trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        """Names and tensors the optimizer updates and checkpoints hold (called once the model is built)."""
        raise NotImplementedError

    def _setup_mechanism(self, n: int) -> None:
        """Set ``self.clipper`` (it owns the sensitivity) and whatever else the mechanism needs."""
        raise NotImplementedError

    def aggregate(self, step: int, indices: np.ndarray) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The summed, clipped and noised gradient (aligned with ``self.params``) of the batch ``indices``
        over all processes, and its telemetry tensor (:func:`noised_total`)."""
        raise NotImplementedError

    def _privacy_record(self, steps: int) -> PrivacyRecord:
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        """JSON fields of the mechanism saved in each checkpoint (read back through ``self.resume_state``)."""
        return {}

    def _manifest_extra(self) -> dict[str, Any]:
        """Fields of the mechanism added to the (private) manifest.json."""
        return {}

    # -- setup -------------------------------------------------------------------------------

    def _identity(self) -> dict[str, Any]:
        return {"trainer": self.trainer_name, "config": self.config.to_dict(), "seed": self.seed,
                "data": self.data.identity, "world_size": self.world.size}

    def _check_resume(self, state: dict[str, Any], path: Path) -> None:
        """The core checks (trainer, settings, seed, data), then this trainer's: processes and --noise-seed."""
        stored = state.get("identity", {})
        check_resume(out=self.out_dir, checkpoint=path, trainer=self.trainer_name, stored=stored,
                     current=self._identity())
        if stored.get("world_size") != self.world.size:
            raise UserInputError(f"--out {self.out_dir} was trained by {stored.get('world_size')} processes, not "
                                 f"{self.world.size}; resume with the same number.")
        if self.config.noise_seed is not None and int(state["noise_seed"]) != self.config.noise_seed:
            raise UserInputError(f"--out {self.out_dir} holds a run with a different --noise-seed; use a new --out.")

    def _setup(self) -> None:
        config = self.config
        # CPU: keep freed memory mapped so per-step gradient buffers (hundreds of MB of per-example
        # gradients in dp-sgd) are reused instead of page-faulted in afresh every step (DESIGN section 9).
        self.device = distributed.resolve_device(config.device)
        self.allocator_tuned = tune_host_allocator() if self.device.type == "cpu" else False
        self.world = distributed.init_world(self.device)
        found = list_checkpoints(self.ckpt_dir)
        check_out_dir(self.out_dir, trainer=self.trainer_name, resumable=bool(found))
        self.data = data_mod.load_inject_dir(self.data_dir, task=config.task, labels=config.labels,
                                             unknown_label=config.unknown_label)
        # A finished run of this very command is returned as it is (execute); anything else there is refused.
        # (data.inputs is hashed here, once: the manifest needs it at the end, when --data may be gone.)
        self.finished = finished_run(self.out_dir, trainer=self.trainer_name, config=config.to_dict(), seed=self.seed,
                                     inputs=self.data.inputs, run_only=("keep_checkpoints",))
        if self.finished is not None:
            return
        self.resume_state = ckpt.read_state(found[-1][1]) if found else None
        self.resume_path = found[-1][1] if found else None
        if self.resume_state is not None:
            self._check_resume(self.resume_state, self.resume_path)

        # Secret randomness: OS entropy unless --noise-seed; one seed shared by every process.
        source = NoiseSource.resolve(config.noise_seed)
        if self.resume_state is not None:
            source = NoiseSource(seed=int(self.resume_state["noise_seed"]), explicit=bool(self.resume_state["noise_explicit"]))
        self.noise_source = NoiseSource(seed=distributed.broadcast_seed(source.seed, self.world), explicit=source.explicit)

        # Model and tokenizer.
        if config.model is not None:
            self.model, self.tokenizer = load_model(Path(config.model), config.task, label_names=self.data.label_names,
                                                    seed=self.seed)
            self.tokenizer_source = f"the tokenizer of --model {config.model}"
        else:
            try:
                self.tokenizer = train_wordpiece(self.data.public.texts, vocab_size=config.resolved_vocab_size)
            except ValueError as err:
                raise UserInputError(f"--vocab-size {config.resolved_vocab_size}: {err}") from None
            self.model = build_model(config.task, preset=config.preset, vocab_size=self.tokenizer.get_vocab_size(),
                                     max_length=config.max_length, label_names=self.data.label_names, seed=self.seed)
            self.tokenizer_source = "WordPiece trained on public.jsonl only (never on train.jsonl or the canaries)."
        self.model.to(self.device)
        self.specials = special_ids(self.tokenizer, where=config.model or "tokenizer")
        self.vocab_size = int(self.model.config.vocab_size)
        self.encoded = {name: data_mod.encode(self.tokenizer, split.texts, max_length=config.max_length)
                        for name, split in (("train", self.data.train), ("heldout", self.data.heldout),
                                            ("public", self.data.public))}
        self.labels = {name: torch.from_numpy(ids) for name, ids in self.data.label_ids.items()}  # classify only
        left_out = self.data.label_details().get("rows_left_out_for_unknown_labels", {})
        if self.world.primary and any(left_out.values()):
            print(f"warning: {left_out.get('heldout', 0)} heldout.jsonl and {left_out.get('public', 0)} public.jsonl rows have "
                  "a label outside the label set and are left out of evaluation (--unknown-label NAME maps them).",
                  file=sys.stderr, flush=True)
        self.n_predictions = data_mod.max_predictions(config.max_length, config.mask_prob)

        self.names, self.params = self._trainable()
        self.optimizer = torch.optim.AdamW(self.params, lr=config.learning_rate, weight_decay=config.weight_decay,
                                           foreach=True)
        n = len(self.data.train.texts)
        self._setup_mechanism(n)
        # One epoch is ceil(N / batch) Poisson-sampled steps, N the declared public --dataset-size when given
        # (q and the steps then never depend on the private row count), else the real N, treated as public.
        size = config.dataset_size if config.dataset_size is not None else n
        self.steps_per_epoch = math.ceil(size / config.batch_size)
        if config.dataset_size is not None and config.dataset_size != n and self.world.primary:
            print(declared_size_warning(config.dataset_size, n, config.batch_size), file=sys.stderr)
        self.plan = plan_privacy(
            dataset_size=n, declared_size=config.dataset_size,
            stages=[(self.steps_per_epoch, config.batch_size)] * config.epochs,
            non_private=not config.private, noise_multiplier=config.noise_multiplier,
            target_epsilon=config.target_epsilon, delta=config.delta,
            sensitivity_factor=self.clipper.sensitivity_factor if self.clipper is not None else 1.0,
            noise_schedule=decay_schedule(config.noise_decay, epochs=config.epochs, rate=config.decay_rate,
                                          sigma_min=config.sigma_min))

        self.start_step = 0
        self.ledger: PrivacyLedger | None = None
        self.metrics = MetricsLog(self.ckpt_dir, writer=self.world.primary)
        self.stopped_at_budget = False
        if self.resume_state is None:
            self.ledger = new_ledger(self.plan) if self.plan.private else None
        else:
            state = ckpt.restore_checkpoint(self.resume_path, names=self.names, params=self.params, optimizer=self.optimizer)
            self.start_step = int(state["step"])
            self.stopped_at_budget = bool(state.get("stopped_at_budget"))
            if self.plan.private:
                self.ledger = PrivacyLedger.from_json(state["ledger"])
                if self.ledger.steps != self.start_step:
                    raise UserInputError(f"{self.resume_path}: its ledger holds {self.ledger.steps} steps, not "
                                         f"{self.start_step}; delete it to resume from an older checkpoint.")
        distributed.barrier(self.world)


    def _batch(self, split: str, indices: np.ndarray, *, generator: torch.Generator | None) -> dict[str, torch.Tensor]:
        """Tensors of the examples ``indices`` of ``split``, masked for MLM: each example's mask is keyed by
        its own content hash and ``generator``'s public (--seed, stream, step) seed only, never by its
        position or the other rows (:func:`~trainers.torch_common.data.mask_tokens`, DESIGN section 5)."""
        ids, mask = self.encoded[split].batch(indices)
        if self.config.task == "classify":
            batch = {"input_ids": ids, "labels": self.labels[split][torch.as_tensor(indices, dtype=torch.long)]}
        else:
            batch = data_mod.mask_tokens(ids, mask, generator=generator, mask_id=self.specials["mask"],
                                         vocab_size=self.vocab_size, special_ids=sorted(set(self.specials.values())),
                                         mask_prob=self.config.mask_prob, n_predictions=self.n_predictions,
                                         content=self.encoded[split].content[torch.as_tensor(indices, dtype=torch.long)])
        batch["mask4"] = data_mod.additive_mask(mask)
        return batch

    def _on_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch`` on the run's device (pinned and copied asynchronously to a GPU: no host sync)."""
        return {k: to_device(v, self.device) for k, v in batch.items()}

    # -- one step ----------------------------------------------------------------------------

    def _sample(self, step: int) -> np.ndarray:
        rng = sampling.step_rng(self.noise_source.seed, sampling.SAMPLING_STREAM, step)
        return sampling.poisson_sample(rng, self.plan.dataset_size, self.plan.sampling_probability(step))

    def step(self, step: int, indices: np.ndarray) -> dict[str, Any]:
        """Compute the (noised) aggregate of this step's batch and apply Adam; returns telemetry with a
        device tensor of statistics (:meth:`_telemetry` turns it into numbers at log intervals)."""
        grad_sum, stats = self.aggregate(step, indices)
        scale = 1.0 / self.plan.batch_at(step)  # the expected batch size: public, unlike the realized one
        for p, a in zip(self.params, grad_sum):
            p.grad = a.mul_(scale)
        self.optimizer.step()
        for p in self.params:
            p.grad = None
        return {"stats": stats, "batch_size": len(indices), "sigma": self.plan.sigma_at(step) if self.plan.private else None}

    def _telemetry(self, metrics: dict[str, Any], stats: list[float]) -> dict[str, Any]:
        """A metrics row from :meth:`step`'s output and its fetched statistics.

        ``grad_snr`` as jax-bert defines it: the norm of the clipped sum over the norm of the noise
        actually added to it, both summed over processes (inf without noise).
        """
        loss_sum, correct_sum, units, clipped, sum_norm, noise_norm = stats
        n = metrics["batch_size"]
        private = self.plan.private
        return {"loss": loss_sum / n if n else None, "train_accuracy": correct_sum / n if n else None,
                "batch_size": n, "clip_fraction": clipped / units if (self.clipper is not None and units) else None,
                "sigma": metrics["sigma"], "clipped_sum_norm": sum_norm, "noise_norm": noise_norm if private else None,
                "grad_snr": (sum_norm / noise_norm if noise_norm > 0 else None) if private else None}  # inf: not JSON

    # -- evaluation --------------------------------------------------------------------------

    @torch.no_grad()
    def _evaluate(self) -> dict[str, float]:
        rows = self.data.labelled_rows("heldout")[:self.config.eval_examples]  # classify: rows with a class id
        n = len(rows)
        if n == 0:
            return {}
        gen = _seeded(self.seed, _EVAL_STREAM, 0)
        loss_sum = correct = 0.0
        for start in range(0, n, 64):
            batch = self._on_device(self._batch("heldout", rows[start:start + 64], generator=gen))
            losses, right = per_example_losses(self.model, batch)
            loss_sum += float(losses.sum())
            correct += float(right.sum())
        key = "eval_accuracy" if self.config.task == "classify" else "mlm_accuracy"
        return {"eval_loss": loss_sum / n, key: correct / n}

    # -- the loop ----------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        return {
            "identity": self._identity(),
            "noise_seed": str(self.noise_source.seed),  # secret: checkpoints only
            "noise_explicit": self.noise_source.explicit,
            "ledger": self.ledger.to_json() if self.ledger is not None else None,
            **self._extra_state(),
            "stopped_at_budget": self.stopped_at_budget,
        }

    def _save(self, step: int) -> None:
        if self.world.primary:
            self.metrics.flush()
            ckpt.save_checkpoint(self.ckpt_dir, step=step, names=self.names, params=self.params,
                                 optimizer=self.optimizer, state=self._state())
        distributed.barrier(self.world)

    def _epsilon(self) -> float | None:
        if self.ledger is None:
            return None
        return float(self.ledger.epsilon()) if self.ledger.steps else 0.0

    def execute(self) -> TrainResult:
        self._setup()
        if self.finished is not None:
            return finished_result(self.out_dir, self.finished)
        plan, config = self.plan, self.config
        if self.world.primary:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            for leftover in self.ckpt_dir.glob(".*"):  # staging folders of a killed checkpoint write
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        self.metrics.restore(self.start_step)
        total = plan.total_steps
        step = self.start_step
        eps_text = "inf" if self.ledger is None else f"<={format_up(plan.planned_epsilon)}"  # rounded up, never down
        acc_text = "?"
        bar = tqdm(total=total, initial=step, desc=f"{self.trainer_name} {config.mode}", unit="step", file=sys.stderr,
                   dynamic_ncols=True, leave=False, disable=not self.world.primary)
        epoch_start = time.perf_counter()
        epoch_steps_timed = 0
        pending: list[tuple[int, int, dict[str, Any]]] = []  # (step, epoch, step output) not yet fetched

        def sync() -> dict[str, Any] | None:
            """The loop's only host sync: fetch the pending steps' statistics (one copy) and write their rows."""
            if not pending:
                return None
            fetched = torch.stack([m["stats"] for _, _, m in pending]).cpu().tolist()
            row = None
            for (done, epoch_of, out), stats in zip(pending, fetched):
                row = self._telemetry(out, stats)
                self.metrics.append({"step": done, "epoch": epoch_of, **row, "telemetry_private": True})
            pending.clear()
            if row["loss"] is not None:
                bar.set_postfix(loss=f"{row['loss']:.4g}", acc=acc_text, eps=eps_text, refresh=False)
            return row

        try:
            while step < total and not self.stopped_at_budget:
                if self.ledger is not None:
                    try:  # record BEFORE the step: the ledger refuses a step that would overspend
                        plan.record_step(self.ledger, step)
                    except BudgetExceededError:
                        self.stopped_at_budget = True
                        break
                epoch = plan.stage_at(step)[0]
                indices = self._sample(step)
                pending.append((step + 1, epoch, self.step(step, indices)))
                step += 1
                epoch_steps_timed += 1
                bar.update(1)
                epoch_end = step % self.steps_per_epoch == 0 or step == total
                if epoch_end or step % config.log_every == 0 or step % config.checkpoint_every == 0:
                    last = sync()
                if epoch_end:
                    elapsed = time.perf_counter() - epoch_start
                    row = {"step": step, "epoch": epoch, "epoch_time_s": elapsed,
                           "epoch_steps_timed": epoch_steps_timed, **self._evaluate()}
                    eps = self._epsilon()
                    row["epsilon"] = eps
                    eps_text = format_up(eps)
                    acc_text = f"{row.get('eval_accuracy', row.get('mlm_accuracy', float('nan'))):.3f}"
                    self.metrics.append(row)
                    bar.set_postfix(loss=f"{(last or {}).get('loss') or 0:.4g}", acc=acc_text, eps=eps_text, refresh=True)
                if (epoch_end or step % config.checkpoint_every == 0) and step != total:
                    self._save(step)
                if epoch_end:
                    epoch_start, epoch_steps_timed = time.perf_counter(), 0
        finally:
            sync()
            bar.close()
        if step != self.start_step or self.stopped_at_budget:
            self._save(step)
        return self._finish(step)

    # -- outputs -----------------------------------------------------------------------------

    def _finish(self, steps: int) -> TrainResult:
        out = self.out_dir
        record = self._privacy_record(steps)
        summary: dict[str, Any] = {
            "mode": self.config.mode,
            "task": self.config.task,
            "noise_multiplier": self.plan.noise_multiplier,
            "planned_epsilon": self.plan.planned_epsilon,
            "stopped_at_budget": self.stopped_at_budget,
            "resumed_from_step": self.start_step or None,
            "processes": self.world.size,
            "host_allocator_tuned": self.allocator_tuned,
        }
        rows: list[dict[str, Any]] = []
        if self.world.primary:
            from dpaudit.trainers.torch_common.hf_export import save_hf

            save_hf(out / "model", self.model, self.tokenizer)
            rows = self.metrics.publish(out)
            epoch_rows = [r for r in rows if "epoch_time_s" in r]
            summary["epoch_time_s"] = [r["epoch_time_s"] for r in epoch_rows]
            final_eval = epoch_rows[-1] if epoch_rows else {}
            summary.update({k: final_eval[k] for k in ("eval_accuracy", "mlm_accuracy") if k in final_eval})
            extra = {"model": self.model.config.to_dict(), "steps": steps, "summary": summary,
                     "tokenizer": self.tokenizer_source}
            extra.update(self._manifest_extra())
            finish_run(out, trainer=self.trainer_name, config=self.config.to_dict(), seed=self.seed,
                       inputs=self.data.inputs, record=record, extra=extra)
            remove_checkpoints(out, keep=self.config.keep_checkpoints)
        distributed.barrier(self.world)
        return TrainResult(out_dir=out, steps=steps, epsilon=record.epsilon, delta=record.delta,
                           final_loss=last_value(rows, "loss"), summary=summary)
