"""The fast privacy-loss-distribution builders and their caches (bit-identical to dp_accounting's)."""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Literal, Protocol, TypeAlias, TypeVar, cast

import numpy as np
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
)
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from dp_accounting.privacy_accountant import NeighboringRelation
from numpy.typing import NDArray

from dpaudit.common.errors import UserInputError

#: ``PLDAccountant``'s default value discretization: the final epsilon is always computed at it.
PLD_DISCRETIZATION = 1e-4


#: Coarser PLD used only to locate roots before the accountant of record is called.
_PLD_MEDIUM_DISCRETIZATION = 1e-3


#: Most points any one PLD array may hold while an event is accounted (single step, self-composed
#: segment, or the composition of segments). Composing costs ~85 bytes per point at its peak, so this
#: bounds one PLD evaluation at ~0.4 GB and a few seconds. Realistic runs stay far below it (Anil et
#: al.'s 20K steps at sigma 0.49: ~0.5M points; q = 0.01, sigma 0.5, 10K steps, epsilon 43: 1.2M);
#: it is passed only at small noise multipliers, where the privacy loss spans ~1 / (sigma^2 x
#: discretization) points and epsilon is in the hundreds (q = 0.3, sigma 0.6, 1K steps: RDP 665).
PLD_MAX_GRID_POINTS = 2**22


#: dp_accounting's tail mass truncated at each (self-)composition (its default).
_TAIL_MASS_TRUNCATION = 1e-15


#: Smallest delta at which PLD epsilons are computed. dp_accounting composes PLDs by FFT in double
#: precision: each grid point carries round-off of ~1e-16, summed over up to millions of points, and
#: every truncated tail (1e-15 per composition) is sent to infinite loss. Below ~1e-10 these errors
#: reach a visible share of delta. Checked against the closed form of a composed Gaussian (q = 1):
#: at delta 1e-12 and 1e-15 PLD gave epsilons BELOW the exact value (unsound), and at delta <= 1e-15
#: "inf" for runs with plenty of noise. There RDP (exact arithmetic of a valid bound,
#: at any delta) is the accountant of record; PLD refuses with this reason.
PLD_MIN_DELTA = 1e-10


_ADD_OR_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


_REPLACE_ONE = NeighboringRelation.REPLACE_ONE


#: The composition items ``PLDAccountant`` builds (:func:`_flatten_for_pld`): a non-private step, ``count``
#: Gaussian steps at sigma, or ``count`` Poisson-subsampled Gaussian steps at (q, sigma).
_NonPrivateItem: TypeAlias = tuple[Literal["nonprivate"]]
_GaussianItem: TypeAlias = tuple[Literal["gaussian"], float, int]
_PoissonItem: TypeAlias = tuple[Literal["poisson"], float, float, int]
_NoisyItem: TypeAlias = _GaussianItem | _PoissonItem
_PldItem: TypeAlias = _NonPrivateItem | _NoisyItem
#: An accountant level of :func:`dpaudit.accounting.accountants._value`: PLD at a discretization, or RDP at some orders
#: (None: dp_accounting's defaults).
_Level: TypeAlias = tuple[Literal["pld"], float] | tuple[Literal["rdp"], tuple[float, ...] | None]


class PldGridTooLargeError(UserInputError):
    """The PLD of an event would exceed :data:`PLD_MAX_GRID_POINTS` (a noise multiplier far too small).

    A :class:`UserInputError`: the command line shows it as a one-line error instead of letting the
    accountant exhaust memory.
    """

    def __init__(self, points: int, discretization: float, sigma: float) -> None:
        super().__init__(
            f"PLD accounting of this run would need ~{points:,} grid points (limit {PLD_MAX_GRID_POINTS:,}) at "
            f"discretization {discretization:g}: noise multiplier {sigma:.4g} is too small for it (its epsilon is "
            f"enormous anyway); add noise, or use the RDP accountant."
        )
        self.points = points


_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class _Lru(Generic[_K, _V]):
    """A tiny least-recently-used map (functools.lru_cache cannot key on unhashable DpEvents)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.data: collections.OrderedDict[_K, _V] = collections.OrderedDict()

    def get(self, key: _K) -> _V | None:
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key: _K, value: _V) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def clear(self) -> None:
        self.data.clear()


#: (event key, kind, value, accountant level or replace-one PLD's) of a result of :mod:`dpaudit.accounting.accountants`.
_ResultKey: TypeAlias = tuple[str, str, float, _Level | tuple[Literal["pld-replace-one"], float]]
_RESULTS: _Lru[_ResultKey, float] = _Lru(512)  # result key -> float


#: (q, sigma, discretization) -> PLD of one step
_SINGLE_STEP_PLDS: _Lru[tuple[float, float, float], pld_lib.PrivacyLossDistribution] = _Lru(32)


#: (q, sigma, count, discretization, composed by the restated self_compose) -> PLD of `count` steps
_SEGMENT_PLDS: _Lru[tuple[float, float, int, float, bool], pld_lib.PrivacyLossDistribution] = _Lru(16)


#: (tuple of items, discretization, composed by the restated self_compose) -> composed PLD
_PREFIX_PLDS: _Lru[tuple[tuple[_NoisyItem, ...], float, bool], pld_lib.PrivacyLossDistribution] = _Lru(8)


#: item -> its privacy-loss span (no PLD built; see _item_loss_span)
_GRID_POINTS: _Lru[_NoisyItem, tuple[float, float, float]] = _Lru(256)


def clear_caches() -> None:
    """Forget every cached PLD and result (benchmarks use this to time cold calls)."""
    for cache in (_RESULTS, _SINGLE_STEP_PLDS, _SEGMENT_PLDS, _PREFIX_PLDS, _GRID_POINTS):
        cache.clear()


class _NotFlat(Exception):
    pass


def _flatten_for_pld(event: DpEvent, count: int, out: list[_PldItem]) -> None:
    """Mirror ``PLDAccountant._maybe_compose``: the composition items it would build, in order.

    Items: ("poisson", q, sigma, count), ("gaussian", sigma, count) or ("nonprivate",).
    """
    if isinstance(event, NoOpDpEvent):
        return
    if isinstance(event, NonPrivateDpEvent):
        out.append(("nonprivate",))
    elif isinstance(event, SelfComposedDpEvent):
        _flatten_for_pld(event.event, event.count * count, out)
    elif isinstance(event, ComposedDpEvent):
        for sub in event.events:
            _flatten_for_pld(sub, count, out)
    elif isinstance(event, GaussianDpEvent):
        out.append(
            ("nonprivate",) if event.noise_multiplier == 0 else ("gaussian", float(event.noise_multiplier), count)
        )
    elif isinstance(event, PoissonSampledDpEvent) and type(event.event) is GaussianDpEvent:
        if event.sampling_probability == 0:
            return
        if event.event.noise_multiplier == 0:
            out.append(("nonprivate",))
        else:
            out.append(("poisson", float(event.sampling_probability), float(event.event.noise_multiplier), count))
    else:
        raise _NotFlat


#: A function of a whole array of values, element by element.
_ArrayMap: TypeAlias = Callable[[NDArray[np.float64]], NDArray[np.float64]]


class _VectorizedGaussianPrivacyLoss(plm.GaussianPrivacyLoss):
    """``GaussianPrivacyLoss`` whose hockey-stick divergence is evaluated on a whole grid at once.

    Building the single-step PLD of a Poisson-subsampled Gaussian is ~90% one Python-level list
    comprehension in ``AdditiveNoisePrivacyLoss.get_delta_for_epsilon``: a scalar
    ``inverse_privacy_loss`` call per grid point (~160K of them at discretization 1e-4). This class
    performs the same floating-point operations as that scalar path (dp_accounting 0.6's
    ``_inverse_privacy_loss_add/remove`` and ``common.log_a_times_exp_b_plus_c``, transcribed
    operation for operation) over numpy arrays, then hands the cutoffs to dp_accounting's own
    ``mu_upper_cdf``/``mu_lower_log_cdf``. The resulting PLD is bit-identical to
    ``from_gaussian_mechanism``'s (``tests/accounting/test_accounting.py`` compares every probability), 7-15x
    sooner. Anything other than a subsampled add/remove grid goes to the library's own code.
    """

    def get_delta_for_epsilon(self, epsilon: float | Sequence[float]) -> float | Sequence[float]:  # as the parent
        q = self.sampling_prob
        add = self.adjacency_type == plm.AdjacencyType.ADD
        replace = self.adjacency_type == plm.AdjacencyType.REPLACE
        if q == 1.0 or not (add or replace or self.adjacency_type == plm.AdjacencyType.REMOVE) or np.ndim(epsilon) != 1:
            return super().get_delta_for_epsilon(epsilon)
        epsilons = np.asarray(epsilon, dtype=float)
        if replace:  # every epsilon is inverted (the parent's REPLACE branch)
            cutoffs = self._inverse_replace_losses(epsilons)
            deltas = self.mu_upper_cdf(cutoffs) - np.exp(epsilons + self.mu_lower_log_cdf(cutoffs))
            return cast("Sequence[float]", np.clip(deltas, 0, 1))
        deltas = np.zeros_like(epsilons)
        if add:
            inverse = epsilons < -math.log1p(-q)
        else:
            inverse = epsilons > math.log1p(-q)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        eps = epsilons[inverse]
        cutoffs = self._inverse_privacy_losses(eps, add)
        deltas[inverse] = self.mu_upper_cdf(cutoffs) - np.exp(eps + self.mu_lower_log_cdf(cutoffs))
        # an array, as the parent returns for list-like epsilons (its annotation says Sequence)
        return cast("Sequence[float]", np.clip(deltas, 0, 1))

    def _inverse_replace_losses(self, losses: NDArray[np.float64]) -> NDArray[np.float64]:
        """dp_accounting 0.6's ``_inverse_privacy_loss_replace`` (with ``common.log_sinh`` and ``common.asinh_exp``)
        for every loss at once: its libm calls (``math.exp``, ``math.log1p``) per loss, its numpy ``logaddexp`` on
        the array."""
        q, std, sensitivity = self.sampling_prob, self._standard_deviation, self.sensitivity
        log_alpha = 0.5 * (sensitivity / std) ** 2 + math.log1p(-q) - math.log(q)
        half = (np.abs(losses) / 2).tolist()
        log_sinh = np.array([a + math.log1p(-math.exp(-2 * a)) - math.log(2) if a != 0 else 0.0 for a in half])
        a = log_alpha + log_sinh
        sign = np.where(losses >= 0, 1.0, -1.0)  # asinh_exp(a, -sign): |b| = 1, so log|b| + a = a
        asinh = -sign * np.logaddexp(0.5 * np.logaddexp(0, 2 * a), a)
        return np.where(losses == 0, 0.0, std**2 / sensitivity * (asinh - losses / 2))

    def _inverse_privacy_losses(self, losses: NDArray[np.float64], add: bool) -> NDArray[np.float64]:
        q = self.sampling_prob
        edge = -math.log(1 - q) if add else math.log(1 - q)
        # loss without subsampling = +-log(a exp(b) + c) with a = 1/q, b = -+loss, c = 1 - 1/q < 0.
        b = -losses if add else losses
        a, c = 1 / q, 1 - 1 / q
        d = b + np.log(a)
        log_minus_c = np.log(-c)
        if np.any(log_minus_c >= d[b != 0]):
            raise ValueError("privacy loss outside the subsampled Gaussian's range")
        with np.errstate(divide="ignore"):
            unsampled = np.where(b == 0, np.log(a + c), d + np.log1p(-np.exp(log_minus_c - d)))
        close = np.abs(losses - edge) <= 1e-9 * np.maximum(np.abs(losses), abs(edge))  # math.isclose
        # dp_accounting annotates these two for one float; their arithmetic is numpy's, so they take a whole array.
        if add:
            inverse = cast(_ArrayMap, self._inverse_privacy_loss_without_subsampling_add)
            return inverse(np.where(close, math.inf, -unsampled))
        inverse = cast(_ArrayMap, self._inverse_privacy_loss_without_subsampling_remove)
        return inverse(np.where(close, -math.inf, unsampled))


class _CreatePmf(Protocol):
    """dp_accounting's ``_create_pld_pmf_from_monotone_privacy_loss``, as it is called here."""

    def __call__(
        self,
        monotone_privacy_loss: plm.MonotonePrivacyLoss,
        *,
        pessimistic_estimate: bool,
        value_discretization_interval: float,
        use_connect_dots: bool,
    ) -> pld_pmf.PLDPmf: ...


#: dp_accounting's own PMF construction from a monotone privacy loss (private; absent -> slow path).
_CREATE_PMF: _CreatePmf | None = getattr(pld_lib, "_create_pld_pmf_from_monotone_privacy_loss", None)


def subsampled_gaussian_pld(
    noise_multiplier: float, sampling_probability: float, discretization: float = PLD_DISCRETIZATION
) -> pld_lib.PrivacyLossDistribution:
    """``pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q)`` (add/remove, connect-the-dots,
    pessimistic), bit for bit, built with :class:`_VectorizedGaussianPrivacyLoss`."""
    return _gaussian_pld(noise_multiplier, sampling_probability, discretization, pessimistic=True)


def optimistic_subsampled_gaussian_pld(
    noise_multiplier: float, sampling_probability: float, discretization: float = PLD_DISCRETIZATION
) -> pld_lib.PrivacyLossDistribution:
    """``pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, pessimistic_estimate=False,
    use_connect_dots=False)`` (add/remove, the privacy-buckets rounding down: a LOWER estimate of every delta), bit
    for bit, its grid's inverse privacy losses computed in one array operation (:func:`_privacy_buckets_pmf`)."""
    return _gaussian_pld(noise_multiplier, sampling_probability, discretization, pessimistic=False)


def _gaussian_pld(
    noise_multiplier: float,
    sampling_probability: float,
    discretization: float,
    *,
    pessimistic: bool,
    replace_one: bool = False,
) -> pld_lib.PrivacyLossDistribution:
    """The builds above: dp_accounting's ``from_gaussian_mechanism`` with ``pessimistic_estimate`` and
    ``use_connect_dots`` both ``pessimistic``, add/remove-one (a remove and an add PMF) or ``replace_one`` (one
    symmetric PMF); q = 1, or a dp_accounting without the private PMF hook, is the library's own build."""
    sigma, q = float(noise_multiplier), float(sampling_probability)
    if q == 1.0 or _CREATE_PMF is None:
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=sigma,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=discretization,
            sampling_prob=q,
            use_connect_dots=pessimistic,
            neighboring_relation=_REPLACE_ONE if replace_one else _ADD_OR_REMOVE,
        )
    create = _CREATE_PMF

    def pmf(adjacency: plm.AdjacencyType) -> pld_pmf.PLDPmf:
        loss = _VectorizedGaussianPrivacyLoss(
            sigma, pessimistic_estimate=pessimistic, sampling_prob=q, adjacency_type=adjacency
        )
        # the optimistic grid's walk on whole arrays; None (an edge of the range) and the pessimistic build: the
        # library's own construction over the vectorized loss
        built = None if pessimistic else _privacy_buckets_pmf(loss, discretization)
        if built is not None:
            return built
        return create(
            loss,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=discretization,
            use_connect_dots=pessimistic,
        )

    if replace_one:
        return pld_lib.PrivacyLossDistribution(pmf(plm.AdjacencyType.REPLACE))
    return pld_lib.PrivacyLossDistribution(pmf(plm.AdjacencyType.REMOVE), pmf(plm.AdjacencyType.ADD))


def replace_one_gaussian_pld(
    noise_multiplier: float, sampling_probability: float, discretization: float = PLD_DISCRETIZATION
) -> pld_lib.PrivacyLossDistribution:
    """``pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, neighboring_relation=REPLACE_ONE)`` (one symmetric
    PMF, connect-the-dots, pessimistic), bit for bit, its grid's inverse privacy losses computed on whole arrays
    (:class:`_VectorizedGaussianPrivacyLoss`)."""
    return _gaussian_pld(noise_multiplier, sampling_probability, discretization, pessimistic=True, replace_one=True)


def _gaussian_steps_pld(
    noise_multiplier: float, count: int, discretization: float, relation: NeighboringRelation
) -> pld_lib.PrivacyLossDistribution:
    """``count`` Gaussian steps of noise multiplier sigma on sensitivity 1, composed: one Gaussian of std
    sigma / sqrt(count), as the library's accountant composes a ``GaussianDpEvent`` repeated ``count`` times."""
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier / math.sqrt(count),
        value_discretization_interval=discretization,
        neighboring_relation=relation,
    )


def replace_one_epsilon(items: Sequence[_PldItem], delta: float, discretization: float) -> float:
    """``PLDAccountant(REPLACE_ONE)``'s epsilon at ``delta`` of the event whose items (:func:`_flatten_for_pld`) are
    ``items``: the same PLDs composed in the same order by the library (its ``self_compose`` and ``compose``) and read
    by the library, each Poisson step built by :func:`replace_one_gaussian_pld` (bit for bit, 5x sooner)."""
    noisy = _noisy(items)
    if noisy is None:
        return math.inf  # the accountant's answer for an event with a non-private step
    pld = pld_lib.identity(value_discretization_interval=discretization)
    for item in noisy:
        if item[0] == "gaussian":
            _, sigma, count = item
            step = _gaussian_steps_pld(sigma, count, discretization, _REPLACE_ONE)
        else:
            _, q, sigma, count = item
            step = replace_one_gaussian_pld(sigma, q, discretization).self_compose(count)
        pld = pld.compose(step)
    return float(pld.get_epsilon_for_delta(delta))


#: The largest PMF dp_accounting keeps sparse (``pld_pmf.create_pmf``); larger ones are dense arrays.
_MAX_SPARSE: int = getattr(pld_pmf, "_MAX_PMF_SPARSE_SIZE", 1000)


def _privacy_buckets_pmf(loss: _VectorizedGaussianPrivacyLoss, discretization: float) -> pld_pmf.PLDPmf | None:
    """dp_accounting 0.6's privacy-buckets PMF of ``loss`` rounded down (``_create_pld_pmf_from_monotone_privacy_loss``
    with ``pessimistic_estimate=False, use_connect_dots=False``), restated: the library walks the grid of losses
    ``d x r`` (r = floor(loss(lower_x) / d), r - 1, ...) one scalar ``inverse_privacy_loss`` at a time until a
    cutoff reaches ``upper_x``; here every cutoff of that walk is computed at once (the same floating-point operations,
    :meth:`_VectorizedGaussianPrivacyLoss._inverse_privacy_losses`) and the walk's stop is found in the array. The
    masses go into the same dictionary in the same order. None where the walk is not the plain one (an empty
    range, a loss outside the mechanism's range): the caller lets the library build it."""
    add = loss.adjacency_type == plm.AdjacencyType.ADD
    d = discretization
    tail = loss.privacy_loss_tail()
    lower_x, upper_x = tail.lower_x_truncation, tail.upper_x_truncation
    if not lower_x < upper_x:
        return None
    masses: collections.defaultdict[int, float] = collections.defaultdict(lambda: 0)
    infinity_mass = tail.tail_probability_mass_function.get(math.inf, 0)
    for privacy_loss, mass in tail.tail_probability_mass_function.items():
        if privacy_loss != math.inf:
            masses[math.floor(privacy_loss / d)] += mass
    first = math.floor(loss.privacy_loss(lower_x) / d)
    upper_loss = loss.privacy_loss(upper_x)
    last = math.floor(upper_loss / d)  # the walk's last r: the first with d x r <= loss(upper_x), where x = upper_x
    while d * (last + 1) <= upper_loss:
        last += 1
    while d * last > upper_loss:
        last -= 1
    rounded = np.arange(first, min(last, first) - 1, -1, dtype=np.int64)
    cutoffs = np.empty(rounded.size)
    cutoffs[-1] = upper_x
    try:
        cutoffs[:-1] = loss._inverse_privacy_losses(d * rounded[:-1].astype(np.float64), add)  # noqa: SLF001
    except ValueError:
        return None
    stop = int(np.flatnonzero(~(cutoffs < upper_x))[0])  # the walk ends at the first cutoff not below upper_x
    cdf = np.asarray(loss.mu_upper_cdf(np.concatenate(([lower_x], cutoffs[: stop + 1]))), dtype=np.float64)
    keys, grid_masses = rounded[: stop + 1], cdf[1:] - cdf[:-1]  # the walk's key is floor(r + 0.5) = r
    top, bottom = int(keys[0]), int(keys[-1])
    if keys.size > _MAX_SPARSE and all(bottom <= k <= top for k in masses):
        # create_pmf's dense branch: the masses on keys bottom..top (contiguous), each tail mass added first
        probs = grid_masses.copy()
        for k, mass in masses.items():
            probs[top - k] = mass + probs[top - k]
        return pld_pmf.DensePLDPmf(d, bottom, np.ascontiguousarray(probs[::-1]), infinity_mass, False)
    for r, mass in zip(keys.tolist(), grid_masses):
        masses[r] += mass
    return pld_pmf.create_pmf(dict(masses), d, infinity_mass, pessimistic_estimate=False)


def self_compose(
    pld: pld_lib.PrivacyLossDistribution, count: int, tail_mass_truncation: float = _TAIL_MASS_TRUNCATION
) -> pld_lib.PrivacyLossDistribution:
    """``pld.self_compose(count)``, bit for bit, its dense PMFs' truncation range found by
    :func:`_self_convolve_bounds` (dp_accounting's Chernoff bounds in fewer array passes); a sparse PMF, or a
    dp_accounting without the dense layout, is composed by the library itself. Used for the optimistic PLDs the
    white-box bounds read their epsilon from; a claim's epsilon is composed by the library (``_item_pld``)."""

    def one(pmf: pld_pmf.PLDPmf) -> pld_pmf.PLDPmf:
        if count <= 0 or not isinstance(pmf, pld_pmf.DensePLDPmf):
            return pmf.self_compose(count, tail_mass_truncation)
        return _dense_self_compose(pmf, count, tail_mass_truncation)

    remove = one(pld._pmf_remove)  # noqa: SLF001
    if pld._symmetric:  # noqa: SLF001
        return pld_lib.PrivacyLossDistribution(remove)
    return pld_lib.PrivacyLossDistribution(remove, one(pld._pmf_add))  # noqa: SLF001


def epsilon_for_delta(pld: pld_lib.PrivacyLossDistribution, delta: float) -> float:
    """``pld.get_epsilon_for_delta(delta)``, bit for bit, a dense PMF's walk done on whole arrays
    (:func:`_dense_epsilon_for_delta`); a sparse PMF, or a dp_accounting without the dense layout, is walked by the
    library itself. Used for the optimistic PLDs the white-box bounds read their epsilon from and for the extent of a
    claim curve's grid (:func:`privacy_profile`); the epsilon a claim states is read by the library."""

    def one(pmf: pld_pmf.PLDPmf) -> float:
        if isinstance(pmf, pld_pmf.DensePLDPmf) and hasattr(pmf, "_probs"):
            return _dense_epsilon_for_delta(pmf, delta)
        return float(pmf.get_epsilon_for_delta(delta))

    remove = one(pld._pmf_remove)  # noqa: SLF001
    if pld._symmetric:  # noqa: SLF001
        return remove
    return max(remove, one(pld._pmf_add))  # noqa: SLF001


#: Losses :func:`_dense_epsilon_for_delta` reads at once (the walk usually stops long before the end of the PMF).
_WALK_CHUNK = 1 << 15


def _dense_epsilon_for_delta(pmf: pld_pmf.DensePLDPmf, delta: float) -> float:
    """dp_accounting 0.6's ``DensePLDPmf.get_epsilon_for_delta`` (``pld_pmf._get_epsilon_for_delta`` over the losses
    from the largest down), the same floats from whole arrays: the loop's running sums are sequential cumulative
    sums (``np.cumsum`` adds in order, as the loop does), its losses the same repeated subtraction
    (``itertools.count`` with a float step), each ``exp(-loss)`` the loop's own ``math.exp``, and its stopping test
    ``log((upper - delta) / lower) >= loss`` found among the candidates numpy's ``log`` marks (a margin of ~1e-12
    relative, far beyond the ulps numpy and libm may differ by) and decided by ``math.log`` in loop order."""
    infinity_mass = float(pmf._infinity_mass)  # noqa: SLF001
    if infinity_mass > delta:
        return math.inf
    d = pmf._discretization  # noqa: SLF001
    probs = np.flip(np.asarray(pmf._probs, dtype=np.float64))  # noqa: SLF001
    n = probs.size
    loss = (pmf._lower_loss + n - 1) * d  # noqa: SLF001 - the first (largest) loss, as the library computes it
    upper, lower = infinity_mass, 0.0
    for start in range(0, n, _WALK_CHUNK):
        p = probs[start : start + _WALK_CHUNK]
        k = p.size
        losses = np.cumsum(np.concatenate([[loss], np.full(k - 1, -d)])) if k > 1 else np.array([loss])
        try:
            weights = np.fromiter(map(math.exp, (-losses).tolist()), dtype=np.float64, count=k) * p
        except OverflowError:  # a loss below -709: the library's own walk, which raises only if it reaches one
            return float(pmf.get_epsilon_for_delta(delta))
        uppers = np.cumsum(np.concatenate([[upper], p]))  # uppers[i]: before item i; uppers[k]: after the chunk
        lowers = np.cumsum(np.concatenate([[lower], weights]))
        # the stopping test before item i (upper > delta, lower > 0, log((upper - delta) / lower) >= loss)
        live = (uppers[:-1] > delta) & (lowers[:-1] > 0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ratio = np.where(live, (uppers[:-1] - delta) / np.where(live, lowers[:-1], 1.0), 1.0)
            near = live & (np.log(ratio) >= losses - 1e-12 * np.maximum(1.0, np.abs(losses)))
        stop = next(
            (i for i in np.flatnonzero(near).tolist() if math.log(float(ratio[i])) >= float(losses[i])),
            None,
        )
        # the return after item i: upper >= delta while lower is still 0 (exp(-loss) underflowed)
        zero = np.flatnonzero((uppers[1:] >= delta) & (lowers[1:] == 0.0))
        end = k if stop is None else stop
        if zero.size and int(zero[0]) < end:
            return float(max(0, float(losses[int(zero[0])])))
        upper, lower = float(uppers[end]), float(lowers[end])
        if stop is not None:
            break
        loss = float(losses[-1]) - d
    if upper <= lower + delta:
        return 0.0
    return math.log((upper - delta) / lower)


def _dense_self_compose(pmf: pld_pmf.DensePLDPmf, count: int, tail_mass_truncation: float) -> pld_pmf.DensePLDPmf:
    """dp_accounting 0.6's ``DensePLDPmf.self_compose`` and ``common.self_convolve``, restated with
    :func:`_self_convolve_bounds`: the same FFT, the same truncation, the same infinity mass."""
    from scipy import fft

    probs_in = pmf._probs  # noqa: SLF001
    low, high = _self_convolve_bounds(probs_in, count, tail_mass_truncation)
    output_len = high - low + 1
    fast_len = fft.next_fast_len(max(output_len, len(probs_in)))
    convolved = np.real(fft.ifft(fft.fft(probs_in, fast_len) ** count))
    probs = np.array(np.roll(convolved, -low)[:output_len])
    infinity = tail_mass_truncation - math.expm1(count * math.log1p(-pmf._infinity_mass))  # noqa: SLF001
    return pld_pmf.DensePLDPmf(
        pmf._discretization,  # noqa: SLF001
        pmf._lower_loss * count + low,  # noqa: SLF001
        probs,
        infinity,
        pmf._pessimistic_estimate,  # noqa: SLF001
    )


def _self_convolve_bounds(probs: NDArray[np.float64], count: int, tail_mass_truncation: float) -> tuple[int, int]:
    """dp_accounting 0.6's ``common.compute_self_convolve_bounds``: the Chernoff bounds on the composed PMF's support at
    40 orders, each from the log moment generating function log sum_k p_k e^(k order), which the library computes with
    ``scipy.special.logsumexp`` (two exponentials per point, a dozen array passes). Here the same floating-point
    operations of logsumexp's stable branch, in five passes: with k x order monotone in k, the maximum of the
    exponents is at the last (order > 0) or first (order < 0) point of nonzero mass, whose term logsumexp takes out of
    the sum (set to 0 here, in place) and whose mass is its ``m``. A non-finite value is left to logsumexp itself."""
    from scipy import special

    n = len(probs)
    upper_bound, lower_bound = (n - 1) * count, 0
    if tail_mass_truncation == 0:
        return lower_bound, upper_bound
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n
    nonzero = np.flatnonzero(probs != 0)
    ks = np.arange(n, dtype=np.float64)
    for order in orders:
        log_mgf: float
        if nonzero.size == 0:
            log_mgf = float(special.logsumexp(np.arange(n) * order, b=probs))
        else:
            top = int(nonzero[-1] if order > 0 else nonzero[0])
            a_max = ks[top] * order
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                terms = probs * np.exp(ks * order - a_max)
                terms[top] = 0.0
                m = probs[top]
                total = np.sum(terms, dtype=np.float64)
                total = total if total == 0 else total / m
                log_mgf = float(np.log1p(total) + np.log(m) + a_max)  # nan when m < 0 or total < -1: below
            if not math.isfinite(log_mgf):
                log_mgf = float(special.logsumexp(np.arange(n) * order, b=probs))
        bound = (count * log_mgf + math.log(2 / tail_mass_truncation)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper_bound = min(upper_bound, math.ceil(bound))
        if order < 0:
            lower_bound = max(lower_bound, math.floor(bound))
    return lower_bound, upper_bound


def _chernoff_range(probs: NDArray[np.float64], count: int, tail_mass: float) -> int:
    """Length of the range ``pld_common.compute_self_convolve_bounds`` keeps when self-composing `probs`
    `count` times (:func:`_self_convolve_bounds`)."""
    lower, upper = _self_convolve_bounds(probs, count, tail_mass)
    return upper - lower + 1


#: Relative grid of the sigmas at which :func:`_item_loss_span` is measured.
_SPAN_SIGMA_STEP = math.log1p(0.04)


def _item_loss_span(item: _NoisyItem) -> tuple[float, float, float]:
    """(lowest, highest single-step privacy loss on the PLD grid, width in loss units of the self-composed
    PLD's kept range). No PLD is built at the accountant's discretization: the single step's bounds are
    dp_accounting's connect-the-dots bounds, and the composed width is dp_accounting's Chernoff range
    (:func:`_chernoff_range`) measured on the same PLD built on a grid of ~1K points and scaled back."""
    cached = _GRID_POINTS.get(item)
    if cached is not None:
        return cached
    losses: list[plm.GaussianPrivacyLoss]
    if item[0] == "gaussian":
        losses = [plm.GaussianPrivacyLoss(item[1] / math.sqrt(item[2]))]
        count, q = 1, 1.0
    else:
        _, q, sigma, count = item
        losses = [
            _VectorizedGaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
            for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD)
        ]
    bounds = [loss.connect_dots_bounds() for loss in losses]
    # a continuous privacy loss always sets its epsilon bounds (dp_accounting leaves them None for discrete ones)
    low = min(cast(float, b.epsilon_lower) for b in bounds)
    high = max(cast(float, b.epsilon_upper) for b in bounds)
    width = (high - low) * count
    if count > 1 and _CREATE_PMF is not None and q < 1.0:
        coarse = (high - low) / 1024
        try:
            width = 0.0
            for loss in losses:
                pmf = _CREATE_PMF(
                    loss, pessimistic_estimate=True, value_discretization_interval=coarse, use_connect_dots=True
                )
                dense = pmf if hasattr(pmf, "_probs") else pmf.to_dense_pmf()
                probs = dense._probs  # pylint: disable=protected-access
                width = max(width, _chernoff_range(probs, count, _TAIL_MASS_TRUNCATION) * coarse)
        except OverflowError:  # a sigma so small that exp(coarse step) overflows: the span without the tail cut
            width = (high - low) * count
    span = (low, high, width)
    _GRID_POINTS.put(item, span)
    return span


def _item_grid_points(item: _NoisyItem, discretization: float) -> int:
    """Points of the item's PLD at `discretization` once self-composed, estimated without building it.

    The span is measured at sigma rounded down to a 4% grid: a slight over-estimate (the grid grows as
    sigma falls), shared by the nearby sigmas a calibration evaluates, so that it is measured about
    once per calibration.
    """
    sigma = item[-2]
    rounded = math.exp(math.floor(math.log(sigma) / _SPAN_SIGMA_STEP) * _SPAN_SIGMA_STEP)
    at_rounded: _NoisyItem = (
        ("gaussian", rounded, item[2]) if item[0] == "gaussian" else ("poisson", item[1], rounded, item[3])
    )
    low, high, width = _item_loss_span(at_rounded)
    single = math.ceil(high / discretization) - math.floor(low / discretization) + 1
    count = item[-1] if item[0] == "poisson" else 1
    return min(max(single, math.ceil(width / discretization) + 1), (single - 1) * count + 1)


def _check_grid(items: Sequence[_PldItem], discretization: float) -> None:
    """Raise :class:`PldGridTooLargeError` if some PLD array of this composition would be too large.

    Composing two PMFs convolves them (the lengths add before the tails are truncated), so the running
    sum of the items' sizes bounds every array along the way.
    """
    total = 1
    for item in items:
        if item[0] == "nonprivate":
            continue
        total += _item_grid_points(item, discretization) - 1
        if total > PLD_MAX_GRID_POINTS:
            sigma = min(it[-2] for it in items if it[0] != "nonprivate")
            raise PldGridTooLargeError(total, discretization, sigma)


def _item_pld(item: _NoisyItem, discretization: float, restated: bool = False) -> pld_lib.PrivacyLossDistribution:
    """One item's PLD; a Poisson segment's ``count`` steps composed by dp_accounting (the claim's epsilon) or, with
    ``restated``, by :func:`self_compose` (the same PMF bit for bit, for the audits' claim curves)."""
    if item[0] == "gaussian":
        _, sigma, count = item
        return _gaussian_steps_pld(sigma, count, discretization, _ADD_OR_REMOVE)
    _, q, sigma, count = item
    key = (q, sigma, count, discretization, restated)
    composed = _SEGMENT_PLDS.get(key)
    if composed is None:
        single = _SINGLE_STEP_PLDS.get((q, sigma, discretization))
        if single is None:
            single = subsampled_gaussian_pld(sigma, q, discretization)
            _SINGLE_STEP_PLDS.put((q, sigma, discretization), single)
        # The claim's own composition is dp_accounting's: an epsilon the tool states comes from the library's
        # code; the restated :func:`self_compose` (bit for bit on the tested PMFs) serves the audits' lower bounds
        # and claim curves, cached apart.
        composed = self_compose(single, count) if restated else single.self_compose(count)
        _SEGMENT_PLDS.put(key, composed)
    return composed


def _noisy(items: Sequence[_PldItem]) -> list[_NoisyItem] | None:
    """The items, all of them noisy steps; None when one is a non-private step (no PLD to build)."""
    noisy = [item for item in items if item[0] != "nonprivate"]
    return noisy if len(noisy) == len(items) else None


def _composed_pld(
    items: tuple[_NoisyItem, ...], discretization: float, restated: bool = False
) -> pld_lib.PrivacyLossDistribution:
    """identity.compose(item_1).compose(item_2)... exactly as PLDAccountant does, reusing prefixes (``restated``:
    each segment's steps composed by :func:`self_compose`, see :func:`_item_pld`)."""
    start, pld = 0, None
    for end in range(len(items), 0, -1):
        pld = _PREFIX_PLDS.get((items[:end], discretization, restated))
        if pld is not None:
            start = end
            break
    if pld is None:
        pld = pld_lib.identity(value_discretization_interval=discretization)
    for end in range(start + 1, len(items) + 1):
        pld = pld.compose(_item_pld(items[end - 1], discretization, restated))
        if end >= len(items) - 1:  # keep the full run and the run minus its last segment (ledger growth)
            _PREFIX_PLDS.put((items[:end], discretization, restated), pld)
    return pld


def _check_pld_delta(delta: float) -> None:
    if delta < PLD_MIN_DELTA:
        raise UserInputError(
            f"delta {delta:g} is below {PLD_MIN_DELTA:g}, where the PLD accountant is not reliable (its FFT "
            f"round-off, ~1e-16 per grid point, can exceed delta and even make epsilon too small); use the RDP "
            f"accountant, a valid bound at any delta, or a larger delta."
        )


def _pld_value(event: DpEvent, kind: str, value: float, discretization: float) -> float:
    if kind == "epsilon":
        _check_pld_delta(value)
    items: list[_PldItem] = []
    try:
        _flatten_for_pld(event, 1, items)
    except _NotFlat:
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

        accountant = PLDAccountant(_ADD_OR_REMOVE, value_discretization_interval=discretization)
        accountant.compose(event)
        return float(accountant.get_epsilon(value) if kind == "epsilon" else accountant.get_delta(value))
    noisy = _noisy(items)
    if noisy is None:
        return math.inf if kind == "epsilon" else 1.0
    if _PREFIX_PLDS.get((tuple(noisy), discretization, False)) is None:
        _check_grid(noisy, discretization)
    pld = _composed_pld(tuple(noisy), discretization)
    return float(pld.get_epsilon_for_delta(value) if kind == "epsilon" else pld.get_delta_for_epsilon(value))


def privacy_profile(
    event: DpEvent, *, reach_delta: float, points: int = 200, discretization: float = PLD_DISCRETIZATION
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(epsilons, delta(epsilon)) of ``event`` (add/remove-one, both directions) from one PLD, on a grid
    from 0 to 3 x epsilon(reach_delta) + 4 (linear, plus a geometric part near 0).

    The PLD is dp_accounting's pessimistic estimate, so every delta is an upper bound on the true
    hockey-stick divergence at any discretization: a coarser one is faster and only looser. Each segment's steps are
    composed by :func:`self_compose` (dp_accounting's PMF bit for bit, its truncation range found faster: an audit
    builds hundreds of these curves), cached apart from the PLDs a claim's epsilon is read from. The
    trade-off curve built from these points (:class:`dpaudit.audit.tradeoff.TradeOff`) is then never
    above the mechanism's own, which is what an audit that tests the claim needs.
    """
    items: list[_PldItem] = []
    _flatten_for_pld(event, 1, items)  # _NotFlat: an event no trainer of ours produces
    noisy = _noisy(items)
    if noisy is None:
        return np.zeros(1), np.ones(1)
    _check_grid(noisy, discretization)
    pld = _composed_pld(tuple(noisy), discretization, restated=True)
    top = min(3.0 * epsilon_for_delta(pld, reach_delta) + 4.0, 700.0)  # e^700 is still a finite double
    grid = np.unique(np.concatenate([np.linspace(0.0, top, points), np.geomspace(1e-3, top, max(points // 4, 2))]))
    try:
        deltas = np.maximum(_hockey_stick(pld._pmf_remove, grid), _hockey_stick(pld._pmf_add, grid))  # noqa: SLF001
    except AttributeError:  # another dp_accounting layout: its own (slower) evaluation, same numbers
        deltas = np.asarray(pld.get_delta_for_epsilon(cast("Sequence[float]", grid)), dtype=np.float64)  # takes arrays
    return grid, np.clip(deltas, 0.0, 1.0)


def _hockey_stick(pmf: pld_pmf.PLDPmf, epsilons: NDArray[np.float64]) -> NDArray[np.float64]:
    """delta(eps) = P[L = inf] + sum_{l > eps} p(l) (1 - e^(eps - l)) of a PLD pmf, for every eps >= 0 at once:
    suffix sums over the losses above 0, one searchsorted (dp_accounting's formula, without its
    per-element work)."""
    dense = pmf.to_dense_pmf()
    losses = (dense._lower_loss + np.arange(dense._probs.size)) * dense._discretization  # noqa: SLF001
    probs, inf_mass = np.asarray(dense._probs, dtype=np.float64), float(dense._infinity_mass)  # noqa: SLF001
    keep = losses > 0
    losses, probs = losses[keep], probs[keep]
    tail = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    weighted = np.concatenate([np.cumsum((probs * np.exp(-losses))[::-1])[::-1], [0.0]])
    k = np.searchsorted(losses, epsilons, side="right")  # first loss above eps
    deltas: NDArray[np.float64] = inf_mass + np.maximum(tail[k] - np.exp(epsilons) * weighted[k], 0.0)
    return deltas
