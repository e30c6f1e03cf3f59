"""The one training run: set up or resume, step, checkpoint, finish; framework-free.

Both trainer families (jax-bert; the torch trainers edp-sgd and rgp) and any third-party trainer run
on :class:`RunSkeleton`; a trainer supplies only the pieces of :class:`~dpaudit.training.plugin.TrainerPlugin`.
In order (docs/trainers.md, "The run skeleton"; docs/run-directories.md):

1. refuse a bad ``--out`` and read the inputs before anything is written (a ``--init-from`` start trained on
   this run's private data is refused here, :func:`dpaudit.training.starting_point.refuse_private_start`); a
   finished run of this very
   command is returned as it is; a checkpoint is resumed only when its identity (trainer, settings,
   seed, data) is this run's and its arrays and privacy ledger are intact (checked before the model is
   built), and the staging folders of a killed checkpoint write are removed;
2. the secret noise source (OS entropy unless ``--noise-seed``; restored from a checkpoint);
3. model init and the clipped-sum step, whose sensitivity the plan reads
   (:func:`dpaudit.training.privacy_plan.plan_privacy`): sigma given or calibrated, the ledger certifies it;
4. each step: the secret Poisson sample, recorded in the ledger BEFORE it runs (the ledger refuses
   a step past the budget and the run stops there, cleanly), then the step;
5. one metrics row per step, written at each log interval (the last of each window with its
   examples/s); at each evaluation that step's row also holds ``stage``, ``epsilon`` (spent so far)
   and the heldout metrics; an atomic checkpoint every ``checkpoint_every`` steps;
6. finish: ``model/``, ``metrics.jsonl``, ``privacy.json`` (the one builder,
   :func:`dpaudit.training.record.build_record`) and ``manifest.json`` last, each atomic (both say which
   split was trained on and where the run started; the manifest also lists, privately, every
   ``train.jsonl`` that went into the model, its start's included); then
   ``checkpoints/`` (it holds the secret seed) is deleted unless ``--keep-checkpoints``.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from tqdm.auto import tqdm

from dpaudit.accounting.ledger import BudgetExceededError, PrivacyLedger
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up
from dpaudit.training.api import TrainResult
from dpaudit.training.noise_source import NoiseSource
from dpaudit.training.plugin import RunData, RunSettings, TrainerPlugin
from dpaudit.training.privacy_plan import declared_size_warning, new_ledger, plan_privacy
from dpaudit.training.record import RunFacts, build_record
from dpaudit.training.starting_point import private_training_inputs, public_data_only, refuse_private_start
from dpaudit.training.train_dir import (
    CHECKPOINT_DIR,
    CHECKPOINT_STATE,
    MetricsLog,
    check_checkpoint_arrays,
    check_out_dir,
    check_resume,
    finish_run,
    finished_result,
    finished_run,
    last_value,
    list_checkpoints,
    remove_checkpoints,
)

__all__ = ["RunSkeleton"]

_T = TypeVar("_T")


def _after_setup(value: _T | None, name: str) -> _T:
    """``value``, which :meth:`RunSkeleton.setup` sets before any other method reads it."""
    if value is None:
        raise RuntimeError(f"RunSkeleton.{name} is read before setup() set it")
    return value


TELEMETRY_SUMMARY_NOTE = (
    "wall-clock throughput and loss: telemetry, not privacy figures and not covered by the epsilon."
)


class RunSkeleton:
    """One invocation of a trainer: :meth:`execute` sets up (or resumes), loops and finishes. Not reusable."""

    def __init__(self, plugin: TrainerPlugin, out_dir: Path) -> None:
        self.plugin, self.out_dir = plugin, Path(out_dir)
        self.ckpt_dir = self.out_dir / CHECKPOINT_DIR
        self.settings: RunSettings | None = None
        self.data: RunData | None = None
        self.finished: dict[str, Any] | None = None
        self.resume_path: Path | None = None
        self.resume_state: dict[str, Any] | None = None
        self.resumed_ledger: PrivacyLedger | None = None  # read with resume_state, before the model is built
        self.noise_source: NoiseSource | None = None
        self.step_fn: Any = None
        self.plan: Any = None
        self.sampler: Any = None
        self.ledger: PrivacyLedger | None = None
        self.start_step = 0
        self.stopped_at_budget = False
        self.has_checkpoint = False
        self.metrics: MetricsLog | None = None
        self.eps_cache: dict[int, float] = {}
        self.final_eval: dict[str, float] = {}  # the last evaluation's heldout metrics (for the summary)
        self.start_eval: dict[str, float] = {}  # the --init-from start's, before the first private step
        self.clock = _Clock()

    # What setup() sets, for the methods that run after it (the attributes stay None-able: a plug-in reads them).
    @property
    def _settings(self) -> RunSettings:
        return _after_setup(self.settings, "settings")

    @property
    def _data(self) -> RunData:
        return _after_setup(self.data, "data")

    @property
    def _metrics(self) -> MetricsLog:
        return _after_setup(self.metrics, "metrics")

    @property
    def _noise_source(self) -> NoiseSource:
        return _after_setup(self.noise_source, "noise_source")

    # -- setup -------------------------------------------------------------------------------

    def setup(self) -> None:
        """Everything before the first step; sets :attr:`finished` instead when the run is already done."""
        plugin = self.plugin
        plugin.start()
        # Only process 0 writes; the others keep their rows in memory.
        self.metrics = MetricsLog(self.ckpt_dir, writer=plugin.primary)
        found = list_checkpoints(self.ckpt_dir)
        check_out_dir(self.out_dir, trainer=plugin.name, resumable=bool(found))
        self.data = data = plugin.load_data()
        self.settings = settings = plugin.settings()
        if data.start is not None:  # a start trained on private data: refused (or declared), nothing written
            start = refuse_private_start(
                data.start, data.inputs, accept_private=bool(settings.config.get("accept_private_start"))
            )
            self.data = data = dataclasses.replace(data, start=start)
        self.finished = finished_run(
            self.out_dir,
            trainer=plugin.name,
            config=dict(settings.config),
            seed=plugin.seed,
            inputs=data.inputs,
            run_only=tuple(settings.run_only),
        )
        if self.finished is not None:
            return
        if found:
            self.resume_path = found[-1][1]
            self.resume_state = plugin.read_state(self.resume_path)
            self.has_checkpoint = True
            self._check_resume(self.resume_state, self.resume_path)
            # Before the model is built: a damaged checkpoint is refused without an init or a compile.
            check_checkpoint_arrays(self.resume_path, self.resume_state)
            if self.resume_state.get("ledger") is not None:  # only a private run writes one
                self.resumed_ledger = self._stored_ledger(self.resume_state, self.resume_path)
        self.noise_source = plugin.share_source(self._source())
        plugin.init_model(self.resume_state)
        self.step_fn = plugin.make_step(data.size, self.resume_state)
        self._plan()
        self.sampler = plugin.make_sampler(self.noise_source)
        self._restore_or_start()
        plugin.begin(self.plan)
        plugin.barrier("setup")  # every process has read --out (and any checkpoint) before process 0 writes

    def _identity(self) -> dict[str, Any]:
        settings = self._settings
        config = settings.identity_config if settings.identity_config is not None else settings.config
        return {
            "trainer": self.plugin.name,
            "config": dict(config),
            "seed": self.plugin.seed,
            "data": self._data.identity,
        }

    def _check_resume(self, state: Mapping[str, Any], path: Path) -> None:
        run_only = set(self._settings.run_only)

        def comparable(identity: Mapping[str, Any]) -> dict[str, Any]:  # a resume may change what comes after training
            config = {k: v for k, v in dict(identity.get("config") or {}).items() if k not in run_only}
            return {**identity, "config": config}

        check_resume(
            out=self.out_dir,
            checkpoint=path,
            trainer=self.plugin.name,
            stored=comparable(dict(state.get("identity") or {})),
            current=comparable(self._identity()),
        )
        self.plugin.check_resume(state, path)

    def _source(self) -> NoiseSource:
        """The secret source: a checkpoint's, else OS entropy unless --noise-seed."""
        wanted = self._settings.noise_seed
        if self.resume_state is None:
            return NoiseSource.resolve(wanted)
        try:
            source = NoiseSource.from_state(self.resume_state.get("noise_source"))
        except ValueError:
            raise UserInputError(
                f"{self.resume_path}: the checkpoint holds no secret noise state (written by an older "
                "dpaudit); use a new --out."
            ) from None
        if wanted is not None and source.seed != wanted:
            raise UserInputError(f"--out {self.out_dir} holds a run with a different --noise-seed; use a new --out.")
        return source

    def _plan(self) -> None:
        """Plan the whole run from the step's own sensitivity factor (nothing is written before this passes)."""
        n = self._data.size
        self.plan = plan_privacy(
            dataset_size=n, sensitivity_factor=self.step_fn.sensitivity_factor, **self._settings.plan
        )
        declared = self.plan.declared_size
        if declared is not None and declared != n and self.plugin.primary:
            print(declared_size_warning(declared, n, self.plan.batch_at(0)), file=sys.stderr)

    def _restore_or_start(self) -> None:
        if self.resume_state is None:
            self.ledger = new_ledger(self.plan, **self._settings.ledger) if self.plan.private else None
            return
        state, path = self.resume_state, _after_setup(self.resume_path, "resume_path")  # set with resume_state
        self.start_step = self.plugin.restore(path)
        self.stopped_at_budget = bool(state.get("stopped_at_budget"))
        self.start_eval = dict(state.get("start_eval") or {})
        try:
            self.sampler.restore(state.get("sampler"))
        except (ValueError, TypeError, KeyError) as err:
            raise UserInputError(
                f"{path / CHECKPOINT_STATE}: {err}; delete {path} to resume from an older checkpoint, "
                "or use a new --out."
            ) from None
        if not self.plan.private:
            return
        # the ledger keeps its plan certificate: recording the rest costs no accountant call
        ledger = self.resumed_ledger if self.resumed_ledger is not None else self._stored_ledger(state, path)
        self.ledger = ledger
        if ledger.steps != self.start_step:
            raise UserInputError(
                f"{path}: its privacy ledger holds {self.ledger.steps} steps, not {self.start_step}; "
                "the checkpoint is damaged, delete it to resume from an older one."
            )

    @staticmethod
    def _stored_ledger(state: Mapping[str, Any], path: Path) -> PrivacyLedger:
        """The privacy ledger checkpoint ``path`` holds, or a one-line error that says it is damaged."""
        try:
            return PrivacyLedger.from_json(state.get("ledger"))
        except (UserInputError, KeyError, TypeError, ValueError, AttributeError) as err:
            raise UserInputError(
                f"{path / CHECKPOINT_STATE}: damaged privacy ledger ({err}); delete {path} to resume "
                "from an older checkpoint."
            ) from None

    # -- the loop ----------------------------------------------------------------------------

    def execute(self) -> TrainResult:
        self.setup()
        if self.finished is not None:
            return finished_result(self.out_dir, self.finished)
        if self.plugin.primary:
            self.ckpt_dir.mkdir(parents=True, exist_ok=True)
            for leftover in self.ckpt_dir.glob(".*"):  # staging folders of a checkpoint write that was killed
                shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
        self._metrics.restore(self.start_step)
        if self.start_step == 0 and self._data.start is not None and self.plan.private:
            # The public start's held-out utility on the same rows: a private run that ends below it made the
            # model worse (dpaudit train warns; docs/trainers.md, "Held-out utility").
            self.start_eval = self.plugin.evaluate()
        step = self._loop()
        if step != self.start_step or not self.has_checkpoint or self.stopped_at_budget:
            self._save(step)
        result = self._finish(step)
        self.plugin.barrier("finish")  # every process returns after the outputs are complete
        return result

    def sample(self, step: int) -> np.ndarray:
        """The secret Poisson sample of step ``step``: the row indices that join its batch (what the loop draws)."""
        return self.sampler.sample(step, self.plan.dataset_size, self.plan.sampling_probability(step))

    def _loop(self) -> int:
        plan, total = self.plan, self.plan.total_steps
        step = self.start_step
        from dpaudit.common.progress import end_warmup, warmup_format

        bar = tqdm(
            total=total,
            initial=step,
            desc=self._settings.progress_label or self.plugin.name,
            unit="step",
            file=sys.stderr,
            dynamic_ncols=True,
            leave=False,
            disable=not self.plugin.primary,
            # no time estimate while the first steps compile: docs/architecture.md (progress.py)
            bar_format=warmup_format("compiling the DP step" if plan.private else "compiling the training step"),
        )
        first = step
        pending: list[tuple[int, Any]] = []
        self.clock.restart()
        try:
            while step < total and not self.stopped_at_budget:
                if not self._record(step):
                    break
                indices = self.sample(step)
                sigma = plan.sigma_at(step) if plan.private else 0.0
                pending.append((step, self.step_fn(step, indices, sigma, float(plan.batch_at(step)))))
                step += 1
                bar.update(1)
                end_warmup(bar, step - first)
                self._after_step(step, pending, bar)
            if pending and self.stopped_at_budget:  # the steps before the budget stop are evaluated too
                self._sync(pending, bar, self._evaluation(step))
        finally:
            self._sync(pending, bar)
            bar.close()
        return step

    def _record(self, step: int) -> bool:
        """Record ``step`` in the ledger BEFORE it runs; False (and stop) when it would overspend."""
        if self.ledger is None:
            return True
        try:
            self.plan.record_step(self.ledger, step)
        except BudgetExceededError:
            self.stopped_at_budget = True
            return False
        return True

    def _after_step(self, done: int, pending: list[tuple[int, Any]], bar: Any) -> None:
        settings, total = self._settings, self.plan.total_steps
        evaluate = done == total or bool(settings.eval_every and done % settings.eval_every == 0)
        checkpoint = done % settings.checkpoint_every == 0 or (evaluate and settings.checkpoint_at_eval)
        if evaluate or checkpoint or done % settings.log_every == 0:
            self._sync(pending, bar, self._evaluation(done) if evaluate else None)
        if checkpoint and done != total:
            self._save(done)

    def _sync(self, pending: list[tuple[int, Any]], bar: Any, evaluation: dict[str, Any] | None = None) -> None:
        """The loop's only host sync: the pending steps' rows, the window's examples/s (and an evaluation)
        on the last one."""
        if not pending:
            return
        rows = self.plugin.fetch(pending)
        examples = sum(int(r.get("batch_size") or 0) for r in rows)
        rows[-1]["examples_per_s"] = examples / self.clock.window()
        rows[-1].update(evaluation or {})
        for row in rows:
            self._metrics.append(row)
        pending.clear()
        if rows[-1].get("loss") is not None:
            bar.set_postfix(loss=f"{rows[-1]['loss']:.4g}", eps=self._epsilon_text(), refresh=evaluation is not None)

    def _evaluation(self, done: int) -> dict[str, Any]:
        """The plan stage, the epsilon spent so far (a PLD call: at evaluations only) and heldout metrics."""
        self.final_eval = self.plugin.evaluate()
        return {"stage": self.plan.stage_at(done - 1)[0], "epsilon": self.epsilon(), **self.final_eval}

    def epsilon(self) -> float | None:
        """Epsilon of the recorded steps (None when non-private); cached per step count."""
        if self.ledger is None:
            return None
        steps = self.ledger.steps
        if steps not in self.eps_cache:
            self.eps_cache[steps] = float(self.ledger.epsilon()) if steps else 0.0
        return self.eps_cache[steps]

    def _epsilon_text(self) -> str:
        if self.ledger is None:
            return "inf"
        if self.ledger.steps in self.eps_cache:
            return format_up(self.eps_cache[self.ledger.steps])
        planned = self.plan.planned_epsilon  # every prefix of the certified plan spends at most this
        return "?" if planned is None else f"<={format_up(planned)}"

    def _state(self) -> dict[str, Any]:
        return {
            "identity": self._identity(),
            "noise_source": self._noise_source.to_state(),  # SECRET: checkpoints are private to the data owner
            "sampler": self.sampler.state(),
            "ledger": self.ledger.to_json() if self.ledger is not None else None,
            "stopped_at_budget": self.stopped_at_budget,
            "start_eval": self.start_eval or None,  # evaluated before step 0 only: a resumed run keeps it
            **self.plugin.extra_state(),
        }

    def _save(self, step: int) -> None:
        self._metrics.flush()
        if self.plugin.primary:
            self.plugin.save(self.ckpt_dir, step, self._state())
        self.has_checkpoint = True
        self.plugin.barrier(f"checkpoint_{step}")  # no process runs ahead of a half-written checkpoint

    # -- outputs -----------------------------------------------------------------------------

    def record(self, steps: int) -> Any:
        """The run's ``privacy.json`` record from the one builder."""
        step_fn, data = self.step_fn, self._data
        facts = RunFacts(
            trainer=self.plugin.name,
            plan=self.plan,
            ledger=self.ledger,
            epsilon=self.epsilon(),
            clip_norm=step_fn.clip_norm,
            sensitivity_factor=step_fn.sensitivity_factor,
            noise_source=self._noise_source,
            steps=steps,
            stopped_at_budget=self.stopped_at_budget,
            frequencies=data.frequencies,
            data_split=data.split,
            start=data.start,
        )
        return build_record(facts, self.plugin.record_parts(self.plan, steps))

    def _summary(self, record: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "noise_multiplier": self.plan.noise_multiplier,
            "planned_epsilon": self.plan.planned_epsilon,
            "epsilon_if_poisson": record.epsilon_if_poisson,
            "stopped_at_budget": self.stopped_at_budget,
            "resumed_from_step": self.start_step or None,
            **self.final_eval,
            "start_eval": self.start_eval or None,
            "telemetry": {"examples_per_s": last_value(rows, "examples_per_s"), "note": TELEMETRY_SUMMARY_NOTE},
            **self._provenance(),
            **self.plugin.summary(),
        }

    def _provenance(self) -> dict[str, Any]:
        """What the run trained on and where it started (summary and manifest)."""
        data = self._data
        return {
            "data_split": data.split,
            "public_data_only": public_data_only(data.split, data.start),
            "init_from": data.start.given if data.start is not None else None,
        }

    def _provenance_manifest(self) -> dict[str, Any]:
        """The manifest's record of the start and of the train.jsonl files in this model (private: their
        hashes), which a later run started from this one is checked against."""
        data = self._data
        start = (
            None if data.start is None else {**data.start.record(), "private_inputs": dict(data.start.private_inputs)}
        )
        return {
            **self._provenance(),
            "init_from": start,
            "private_training_inputs": private_training_inputs(data.split, data.inputs, data.start),
        }

    def _finish(self, steps: int) -> TrainResult:
        out, plugin = self.out_dir, self.plugin
        record = self.record(steps)
        if plugin.primary:
            plugin.export(out / "model")
            rows = self._metrics.publish(out)
        else:  # this run's rows as computed here (rows before a resume are only in process 0's file)
            rows = self._metrics.rows()
        summary = self._summary(record, rows)
        if plugin.primary:
            finish_run(
                out,
                trainer=plugin.name,
                config=dict(self._settings.config),
                seed=plugin.seed,
                inputs=self._data.inputs,
                record=record,
                extra={"steps": steps, "summary": summary, **self._provenance_manifest(), **plugin.manifest_extra()},
            )
            remove_checkpoints(out, keep=self._settings.keep_checkpoints)
        return TrainResult(
            out_dir=out,
            steps=steps,
            epsilon=record.epsilon,
            delta=record.delta,
            final_loss=last_value(rows, "loss"),
            summary=summary,
        )


class _Clock:
    """Wall-clock time since the last sync (the window of a metrics row's examples/s)."""

    def __init__(self) -> None:
        self.window_start = time.perf_counter()

    def restart(self) -> None:
        self.window_start = time.perf_counter()

    def window(self) -> float:
        now = time.perf_counter()
        elapsed, self.window_start = max(now - self.window_start, 1e-9), now
        return elapsed
