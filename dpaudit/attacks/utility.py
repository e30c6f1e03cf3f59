"""The held-out utility of a model trained elsewhere, measured by ``dpaudit attack`` beside its trivial baseline.

A dpaudit train run logs its held-out figure and the best constant prediction on the same rows and positions
(``metrics.jsonl``, :mod:`dpaudit.training.baselines`); the report shows both, because an audit of a model that
learned nothing says little. A model trained elsewhere comes without that record, though the inject run's
``heldout.jsonl`` is there and the attack scores its rows: this measures the same figure on them, scored the way
the trainers score theirs, with the same baseline rule.

- classifier: accuracy on the held-out rows whose label the model has (its ``id2label``), beside always predicting
  the majority class of those rows; rows with another label are left out and counted;
- masked LM: accuracy at the positions the loss attack masks (the scorer's seeded 15% masking), each row's accuracy
  averaged over the rows, beside always predicting the most frequent masked token;
- causal LM: next-token accuracy over each row's tokens after the first, averaged over the rows, beside always
  predicting the most frequent next token.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpaudit.attacks.results import HeldoutUtility
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM
from dpaudit.training.baselines import UTILITY_KINDS, constant_prediction_accuracy, majority_class_accuracy

#: The UTILITY_KINDS entry each model kind's figure is reported as (the trainers' names and rules).
_KIND = {MASKED_LM: "held-out MLM accuracy", CAUSAL_LM: "held-out next-token accuracy", CLASSIFIER: "held-out accuracy"}


def measure_heldout_utility(scorer: Any, run: Any, *, seed: int, label_set: Any = None) -> HeldoutUtility | None:
    """The model's held-out accuracy on ``heldout.jsonl`` and its trivial baseline (module docstring), or None when
    there is nothing to measure (no held-out row; a classifier and unlabelled rows, or none with a label it has).

    Args:
        scorer: the loaded target (:class:`dpaudit.scoring.Scorer`).
        run: the verified inject run.
        seed: the attack's public seed (the masked LM's masking, as the loss attack's).
        label_set: a classifier's labels (:meth:`dpaudit.scoring.ModelSource.label_set`).
    """
    from dpaudit.inject_dir.reader import HELDOUT

    held = run.split(HELDOUT)
    texts = list(held.texts)
    total = len(texts)
    if not total:
        return None
    kind = next(k for k in UTILITY_KINDS if k.name == _KIND[scorer.kind])
    left_out = None
    labels = None
    if scorer.kind == CLASSIFIER:
        if held.labels is None or label_set is None:
            return None
        ids = [label_set.id_of(label) for label in held.labels]
        keep = [i for i, x in enumerate(ids) if x is not None]
        if len(keep) < total:
            left_out = f"{total - len(keep)} left out: their label is not among the model's {len(label_set.names)}"
        if not keep:
            return None
        texts, labels = [texts[i] for i in keep], [ids[i] for i in keep]
    targets, hits = scorer.prediction_hits(texts, labels, seed=seed)
    if scorer.kind == CLASSIFIER:
        assert labels is not None  # (a classifier's rows have labels: set above)
        value = float(np.mean([h[0] for h in hits]))
        baseline = majority_class_accuracy(labels)
    else:  # each row's accuracy, averaged over the rows (a row with nothing to predict counts as 0, as in the baseline)
        value = float(np.mean([h.mean() if h.size else 0.0 for h in hits]))
        width = max((t.size for t in targets), default=0)
        padded = np.zeros((len(targets), max(width, 1)), dtype=np.int64)
        weights = np.zeros(padded.shape, dtype=np.float64)
        for i, t in enumerate(targets):
            padded[i, : t.size], weights[i, : t.size] = t, 1.0
        baseline = constant_prediction_accuracy(padded, weights, per_example=True)
    return HeldoutUtility(
        name=kind.name,
        value=value,
        baseline=baseline,
        rule=kind.rule,
        rows=len(texts),
        heldout_rows=total,
        predictions=int(sum(h.size for h in hits)),
        left_out=left_out,
    )
