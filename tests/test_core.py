"""The trainer-neutral core: privacy plan, privacy record, train run directory, and import hygiene.

Golden values are worked out here with plain ``dp_accounting`` and the sensitivity derived in the
test, never by feeding the code's own event back to the accountant.
"""

from __future__ import annotations

import json
import subprocess
import sys

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from dpaudit import accounting
from dpaudit.accounting.ledger import BudgetExceededError
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.training.privacy_plan import decay_schedule, new_ledger, plan_privacy
from dpaudit.training.train_dir import (
    MetricsLog,
    check_out_dir,
    check_resume,
    remove_checkpoints,
)


def _pld_epsilon(event, delta: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def test_core_modules_import_neither_jax_nor_torch():
    code = (
        "import sys\n"
        "import dpaudit.accounting, dpaudit.training.privacy_plan, dpaudit.claim.record, dpaudit.training.train_dir\n"
        "import dpaudit.inject_dir.reader, dpaudit.files.run_dirs, dpaudit.training.api, dpaudit.training.noise_source, dpaudit.audit\n"
        "import dpaudit.accounting.ledger, dpaudit.training.config_types, dpaudit.training.tokenizer, dpaudit.training.presets\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'jax', 'jaxlib', 'flax', 'transformers'})\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY=\n" in out, out


def test_micro_batch_plan_is_accounted_at_sigma_with_noise_two_sigma_c():
    # Micro-batch clipping: one example moves the clipped sum by 2C, the step adds std sigma * 2C, so
    # the Gaussian mechanism's noise multiplier (std / sensitivity) is sigma: worked out here directly.
    n, batch, steps, sigma = 1000, 50, 40, 1.3
    plan = plan_privacy(
        dataset_size=n,
        stages=[(steps, batch)],
        non_private=False,
        noise_multiplier=sigma,
        target_epsilon=None,
        delta=1e-5,
        sensitivity_factor=2.0,
    )
    assert plan.noise_std(0, clip_norm=0.5) == pytest.approx(sigma * 2.0 * 0.5)
    expected = _pld_epsilon(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(batch / n, dp_accounting.GaussianDpEvent(sigma)), steps
        ),
        1e-5,
    )
    assert plan.planned_epsilon == pytest.approx(expected, rel=1e-9)
    # What an accounting that ignores the factor would claim for the same noise (std/C = 2 sigma): smaller.
    naive = accounting.epsilon(plan.event(accounted_factor=1.0), 1e-5)
    assert naive == pytest.approx(
        _pld_epsilon(
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(batch / n, dp_accounting.GaussianDpEvent(2 * sigma)), steps
            ),
            1e-5,
        ),
        rel=1e-9,
    )
    assert naive < plan.planned_epsilon


def test_decayed_plan_composes_one_segment_per_epoch_and_calibrates_to_the_target():
    n, batch, per_epoch, epochs = 2000, 100, 20, 3
    plan = plan_privacy(
        dataset_size=n,
        stages=[(per_epoch, batch)] * epochs,
        non_private=False,
        noise_multiplier=None,
        target_epsilon=3.0,
        delta=1e-5,
        sensitivity_factor=1.0,
        noise_schedule=decay_schedule("exp", epochs=epochs, rate=0.3),
    )
    assert plan.noise_calibrated and plan.sigmas[0] > plan.sigmas[1] > plan.sigmas[2]
    event = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(batch / n, dp_accounting.GaussianDpEvent(s)), per_epoch
            )
            for s in plan.sigmas
        ]
    )
    eps = _pld_epsilon(event, 1e-5)
    assert eps <= 3.0 and eps == pytest.approx(3.0, rel=2e-2)
    assert plan.sigma_at(per_epoch) == plan.sigmas[1] and plan.batch_at(2 * per_epoch) == batch


def test_budget_caps_the_plan_and_the_ledger_refuses_the_next_step():
    plan = plan_privacy(
        dataset_size=500, stages=[(400, 50)], non_private=False, noise_multiplier=1.0, target_epsilon=2.0, delta=1e-5
    )
    assert 0 < plan.affordable_steps < 400 and plan.planned_epsilon <= 2.0
    ledger = new_ledger(plan)
    for step in range(plan.affordable_steps):
        plan.record_step(ledger, step)
    with pytest.raises(BudgetExceededError):
        for step in range(plan.affordable_steps, 400):
            plan.record_step(ledger, step)
    assert ledger.epsilon() <= 2.0


def test_plan_refuses_a_batch_larger_than_the_data_and_defaults_delta_below_one_over_n():
    with pytest.raises(UserInputError, match="--batch-size: expected batch 600 exceeds the 500"):
        plan_privacy(
            dataset_size=500,
            stages=[(10, 600)],
            non_private=False,
            noise_multiplier=1.0,
            target_epsilon=None,
            delta=None,
        )
    plan = plan_privacy(
        dataset_size=500, stages=[(10, 50)], non_private=False, noise_multiplier=1.0, target_epsilon=None, delta=None
    )
    assert plan.delta == pytest.approx(1e-5) and plan.delta < 1 / 500


def _record(**overrides) -> PrivacyRecord:
    event = accounting.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.01, steps=10)
    values = dict(
        trainer="t",
        private=True,
        mechanism="Poisson-subsampled Gaussian",
        accountant="pld",
        event=accounting.event_to_json(event),
        epsilon=accounting.epsilon(event, 1e-5),
        delta=1e-5,
    )
    return PrivacyRecord(**{**values, **overrides})


def test_privacy_record_round_trips_and_recomputes_its_epsilon():
    record = _record()
    again = PrivacyRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.recompute_epsilon() == record.epsilon


def test_privacy_record_refuses_a_proven_epsilon_for_shuffled_batches_and_bad_files():
    with pytest.raises(ValueError, match="epsilon_if_poisson"):
        _record(sampling="shuffle")
    assert _record(sampling="shuffle", epsilon=None, epsilon_if_poisson=0.5).epsilon is None
    with pytest.raises(UserInputError, match="schema"):
        PrivacyRecord.from_json({"schema": "dpaudit.privacy/1"})
    with pytest.raises(UserInputError, match="unknown field"):
        PrivacyRecord.from_json({**_record().to_json(), "surprise": 1})


def test_metrics_log_keeps_only_rows_the_checkpoint_covers(tmp_path):
    log = MetricsLog(tmp_path / "checkpoints")
    for step in range(1, 7):
        log.append({"step": step, "loss": float(step)})
    log.flush()
    resumed = MetricsLog(tmp_path / "checkpoints")
    resumed.restore(4)
    resumed.append({"step": 5, "loss": 0.5})
    rows = resumed.publish(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[-1]["loss"] == 0.5
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 5


def test_out_dir_and_resume_checks(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    with pytest.raises(UserInputError, match="holds no t checkpoint"):
        check_out_dir(tmp_path / "other", trainer="t", resumable=False)
    check_out_dir(tmp_path / "new", trainer="t", resumable=False)
    stored = {"trainer": "t", "config": {"lr": 1.0}, "seed": 0, "data": "abc"}
    check_resume(out=tmp_path, checkpoint=tmp_path / "c", trainer="t", stored=stored, current=dict(stored))
    with pytest.raises(UserInputError, match=r"--lr 1.0 -> 2.0"):
        check_resume(
            out=tmp_path,
            checkpoint=tmp_path / "c",
            trainer="t",
            stored=stored,
            current={**stored, "config": {"lr": 2.0}},
        )
    with pytest.raises(UserInputError, match="different --data"):
        check_resume(
            out=tmp_path, checkpoint=tmp_path / "c", trainer="t", stored=stored, current={**stored, "data": "x"}
        )


def test_checkpoints_are_removed_unless_kept_with_a_warning(tmp_path, capsys):
    (tmp_path / "checkpoints").mkdir()
    remove_checkpoints(tmp_path, keep=True)
    assert (tmp_path / "checkpoints").is_dir() and "secret" in capsys.readouterr().err
    remove_checkpoints(tmp_path, keep=False)
    assert not (tmp_path / "checkpoints").exists()
