"""What the demo's stages will cost, said before the first one runs.

Each stage of the plan becomes a :class:`dpaudit.common.cost_model.Work` (its kind and units of work, from the
demo's sizes: the same numbers its commands carry), and :func:`dpaudit.common.cost_model.estimate` prices them with
the measured table, this machine's speed on a short probe and the current load. The table, the runs it was fitted
from and its spread are in :mod:`dpaudit.common.cost_model`'s docstring.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpaudit.common.cost_model import Work
from dpaudit.demo.plan import AUDIT_SUFFIX, DemoSizes, Stage

__all__ = ["stage_work", "plan_work"]

#: Share of an inject directory's corpus in train.jsonl (the rest is heldout.jsonl).
TRAIN_SHARE = 0.9


def _secrets(sizes: DemoSizes) -> int:
    kind, _, digits = sizes.secret_format.partition(":")
    return 10 ** int(digits) if kind == "digits" and digits.isdigit() else 10_000


def _rows(sizes: DemoSizes, corpus: int, frequencies: tuple[int, ...]) -> tuple[int, int, int]:
    """Train rows (corpus share plus every insertion), held-out rows, canaries with their never-inserted controls."""
    train = int(TRAIN_SHARE * corpus) + sizes.per_frequency * sum(frequencies)
    return train, corpus - int(TRAIN_SHARE * corpus), sizes.per_frequency * (len(frequencies) + 1)


def _causal_rows(sizes: DemoSizes) -> tuple[int, int, int]:
    """:func:`_rows` of the causal LMs' inject directory: their own (``causal_corpus_size``, its held-out rows and
    canaries per insertion count) or the masked LMs'."""
    if not sizes.causal_corpus_size:
        return _rows(sizes, sizes.corpus_size, sizes.frequencies)
    per = sizes.causal_per_frequency or sizes.per_frequency
    held = sizes.causal_heldout_size or sizes.causal_corpus_size - int(TRAIN_SHARE * sizes.causal_corpus_size)
    return sizes.causal_corpus_size - held + per * sum(sizes.frequencies), held, per * (len(sizes.frequencies) + 1)


def stage_work(stage: Stage, sizes: DemoSizes) -> Work:
    """The kind and units of one stage (by its name, as :func:`dpaudit.demo.plan.build_plan` names them)."""
    name = stage.name
    tokens = sizes.max_length
    mlm_train, mlm_held, mlm_canaries = _rows(sizes, sizes.corpus_size, sizes.frequencies)
    clf_train, clf_held, _ = _rows(sizes, sizes.classifier_corpus_size, sizes.classifier_frequencies)
    exposure = mlm_train + mlm_held + mlm_canaries * _secrets(sizes)
    clm_train, clm_held, clm_canaries = _causal_rows(sizes)
    if name == "report":
        return Work("report", units=len(stage.inputs))
    if name == "inject":
        return Work("inject", units=sizes.corpus_size + sizes.public_size)
    if name == "inject-classifier":
        return Work("inject", units=sizes.classifier_corpus_size + sizes.classifier_public_size)
    if name == "inject-causal":
        return Work("inject", units=sizes.causal_corpus_size + sizes.public_size)
    if name == "inject-audit":
        return Work("inject", units=sizes.corpus_size + sizes.audit_canaries)
    if name == "train-public":
        return Work("public-mlm", units=sizes.public_steps * sizes.batch_size * tokens)
    if name == "train-clf-public":
        return Work("classifier", units=sizes.classifier_public_epochs * sizes.classifier_public_size * tokens)
    if name == "train-clm-public":
        return Work("causal", units=sizes.causal_public_epochs * sizes.public_size * tokens)
    private = bool({"dp", "edp"} & set(name.split("-")))  # train-dp-eps8, train-clf-dp-sgd, train-clf-edp-sgd
    if name.startswith("train-clf-"):
        return Work("classifier-dp" if private else "classifier", units=sizes.classifier_epochs * clf_train * tokens)
    if name.startswith("train-clm-"):
        return Work("causal-dp" if private else "causal", units=sizes.causal_epochs * clm_train * tokens)
    if name.startswith("train-") and name.endswith(AUDIT_SUFFIX):
        steps = sizes.audit_steps or sizes.steps
        return Work("audit", units=steps * (sizes.audit_batch_size or sizes.batch_size) * tokens)
    if name.startswith("train-"):
        steps = sizes.masked_dp_run_steps if private else sizes.steps
        return Work("mlm-dp" if private else "mlm", units=steps * sizes.batch_size * tokens)
    if name.startswith("attack-clf-"):
        trains = stage_work(
            Stage(
                name="train-" + name.removeprefix("attack-"), title="", output=stage.output, schema_prefix=None, args=()
            ),
            sizes,
        )
        shadows = sizes.shadow_models if {"shadow", "lira", "rmia"} & set(sizes.classifier_attacks) else 0
        return Work(
            "attack-shadows" if shadows else "attack", units=clf_train + clf_held, shadows=shadows, trains=trains
        )
    if name.startswith("attack-") and name.endswith(AUDIT_SUFFIX):
        return Work("attack", units=sizes.corpus_size + sizes.audit_canaries)
    if name.startswith("attack-clm-"):
        return Work("attack", units=clm_train + clm_held + clm_canaries * _secrets(sizes))
    if name.startswith("attack-"):
        return Work("attack", units=exposure)
    raise ValueError(f"no cost model for the demo stage {name!r}")


def plan_work(stages: Sequence[Stage], sizes: DemoSizes) -> list[Work]:
    """The work of ``stages`` (those still to run), in order."""
    return [stage_work(stage, sizes) for stage in stages]
