"""What an (epsilon, delta) claim means for users: the default delta rule and group privacy for repeated rows."""

from __future__ import annotations

import math

from dpaudit.accounting.segment import _require_int, _require_real

#: The default-delta rule, as stated in every ``--help``.
DEFAULT_DELTA_RULE = (
    "default min(1e-5, 1/(10 N)): well below 1/N, since a mechanism that publishes one "
    "random row verbatim already satisfies delta = 1/N"
)


def default_delta(dataset_size: int) -> float:
    """min(1e-5, 1 / (10 N)): delta well below 1/N (see :data:`DEFAULT_DELTA_RULE`).

    A delta of 1/N admits "publish a random row verbatim" as (0, 1/N)-DP, so delta must be much
    smaller than 1/N (Dwork & Roth 2014, section 2.3; Ponomareva et al. 2023, "How to DP-fy ML",
    section 5.2); 1e-5 caps it for small N.
    """
    n = _require_int("dataset_size", dataset_size, 1)
    return min(1e-5, 1.0 / (10.0 * n))


def delta_warning(delta: float, dataset_size: int | None) -> str | None:
    """A one-line warning when ``delta >= 1/N`` (None when delta is small enough or N is unknown)."""
    if dataset_size is None or delta < 1.0 / dataset_size:
        return None
    return (
        f"delta {delta:.3g} >= 1/N = {1.0 / dataset_size:.3g}: a mechanism that publishes one random training row "
        f"verbatim satisfies this delta; use a delta well below 1/N ({DEFAULT_DELTA_RULE})."
    )


#: Which group-privacy bound :func:`group_privacy` gives (stated next to every figure it produces).
GROUP_PRIVACY_BOUND = (
    "group privacy of (epsilon, delta)-DP for a group of f rows, by chaining the definition f "
    "times: (f * epsilon, delta * sum_{i<f} e^(i * epsilon)), which is at most "
    "(f * epsilon, f * e^((f-1) * epsilon) * delta) (Dwork & Roth 2014, Thm 2.2; Vadhan 2017, "
    "Lemma 2.2); a delta >= 1 means no guarantee"
)


def group_privacy(epsilon: float, delta: float, group_size: int) -> tuple[float, float]:
    """(epsilon, delta) for ``group_size`` rows changed together: see :data:`GROUP_PRIVACY_BOUND`.

    A canary inserted f times is f rows of the training data: the per-row guarantee protects it only
    through this bound. Composing the per-row event f times in an accountant would NOT be group
    privacy (it models f independent releases, not f rows inside one release). The returned delta
    may exceed 1, meaning no guarantee (callers print it as such).
    """
    eps = _require_real("epsilon", epsilon)
    d = _require_real("delta", delta)
    f = _require_int("group_size", group_size, 1)
    if eps < 0 or not 0 <= d <= 1:
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1], got ({epsilon}, {delta}).")
    if eps == 0:
        return 0.0, d * f
    log_geometric = f * eps + math.log(-math.expm1(-f * eps)) - math.log(math.expm1(eps))  # log sum_{i<f} e^(i eps)
    return f * eps, (math.inf if log_geometric + math.log(d or 1e-300) > 700 else d * math.exp(log_geometric))
