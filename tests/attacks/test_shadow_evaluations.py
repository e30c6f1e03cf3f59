"""The shadow estimate prices the held-out evaluations each shadow model really runs (dpaudit.attacks.shadow_cost).

A shadow evaluates its held-out rows once before its first step (a private run from ``init_from``) and once per epoch:
the estimate prices them. LiRA's shadows of a causal LM on labelled data once evaluated up to ``eval_examples`` rows
of the audit universe they did not train on (a third of each tiny shadow's CPU, missing from the estimate); they now
evaluate the target's own held-out texts they did not train on, as the target did. Here LiRA's own ``run`` trains two
shadows of a tiny DP causal LM (in process, under a second each); a wrapper around the trainers' real ``evaluate``
counts each shadow's evaluations and rows, and the estimate's own count (what ``train_shadows`` handed it) must be
the same.
"""

from __future__ import annotations

import pytest

from dpaudit.attacks import shadow_cost


@pytest.fixture(scope="module")
def causal_target(data_dir, tiny_causal_dir, tmp_path_factory):
    """A tiny DP causal LM (dp-sgd at a given noise: no calibration) fine-tuned from the shared tiny causal start."""
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    target = tmp_path_factory.mktemp("shadow-evaluations") / "target"
    config = EdpSgdConfig(
        task="clm",
        init_from=str(tiny_causal_dir),
        mode="dp-sgd",
        noise_multiplier=1.0,
        epochs=2,
        batch_size=16,
        max_length=16,
        eval_examples=30,
        noise_seed=1,
    )
    EdpSgdTrainer().train(data_dir, target, config, seed=0)
    return target


def test_the_estimate_counts_the_evaluations_lira_causal_shadows_run(causal_target, data_dir, tmp_path, monkeypatch):
    from dpaudit.attacks.base import AttackContext
    from dpaudit.attacks.lira import LiraAttack
    from dpaudit.attacks.registry import AttackOptions
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import load, resolve_model
    from dpaudit.trainers.torch_common import loop

    priced: list[tuple[dict, int]] = []
    real_lines = shadow_cost.in_process_lines

    def lines(trainer, config, steps, *, todo, heldout_rows=0, **_):
        priced.append((config, heldout_rows))  # this machine's speed is no part of the count: not probed
        return real_lines(trainer, config, steps, todo=todo, heldout_rows=heldout_rows, speed=1.0, load=0.0, cores=2)

    ran: dict[int, list[int]] = {}  # per trainer run: the rows of each evaluation
    real_evaluate = loop.TorchPlugin.evaluate

    def evaluate(self):
        out = real_evaluate(self)
        ran.setdefault(id(self), []).append(int(out.get("heldout_rows_evaluated", 0)))
        return out

    monkeypatch.setattr(shadow_cost, "in_process_lines", lines)
    monkeypatch.setattr(loop.TorchPlugin, "evaluate", evaluate)
    run = load_inject_run(data_dir)
    options = AttackOptions(
        shadow_models=2, shadow_cache=str(tmp_path / "cache"), mia_examples=16, blind_baseline=False
    )
    scorer = load(resolve_model(causal_target), batch_size=32, device="cpu", progress=False)
    context = AttackContext(scorer=scorer, canaries=list(run.canaries), space=run.space, options=options, data=run)
    LiraAttack().run(context)  # the attack's own shadows, trained as dpaudit attack trains them
    assert len(priced) == 1 and len(ran) == 2, (priced, ran)
    config, heldout_rows = priced[0]
    evaluations, rows = shadow_cost.in_process_evaluations(config, heldout_rows)
    # the start's utility, then one per epoch, on the target's held-out rows the shadow did not train on (LiRA's
    # shadows train on about half of the universe: train and held-out rows)
    heldout = len(run.split("heldout.jsonl").texts)
    assert evaluations == 3 and 0 < rows < heldout == 24, (evaluations, rows)
    assert list(ran.values())[0] == [rows] * evaluations, ran
    assert all(len(set(each)) == 1 and 0 < each[0] < heldout for each in ran.values()), ran
    priced_cpu = shadow_cost.in_process_cpu("edp-sgd", config, None, heldout_rows=heldout_rows)
    unpriced_cpu = shadow_cost.in_process_cpu("edp-sgd", config, None)
    assert priced_cpu is not None and unpriced_cpu is not None
    rate = shadow_cost.IN_PROCESS["causal-dp"]
    assert priced_cpu[0] - unpriced_cpu[0] == pytest.approx(rate.evaluation * evaluations * rows * 16)
