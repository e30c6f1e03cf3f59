"""Exposure by exact rank (Carlini et al. 2019): oracles, closed forms, bracketing bounds, estimates."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.attacks.exposure_rank import RankInterval, exposure_rank, exposure_ranks, sampled_exposure


def brute_force(rows, secret, tol=1e-9):
    """(better, tied) by scoring every candidate with a plain Python sum: the oracle."""
    score = sum(row[k] for row, k in zip(rows, secret))
    better = tied = 0
    for cand in itertools.product(*[range(len(row)) for row in rows]):
        value = sum(row[k] for row, k in zip(rows, cand))
        if value > score + tol:
            better += 1
        elif value >= score - tol:
            tied += 1
    return better, tied - 1  # the secret itself is not a tie


def random_table(rng, positions, alphabet, concentration=0.5):
    return np.log(rng.dirichlet(np.full(alphabet, concentration), size=positions))


# ---------------------------------------------------------------------------------------------
# Oracles


@pytest.mark.parametrize("positions,alphabet", [(4, 10), (5, 6), (3, 25), (8, 3), (1, 17)])
def test_exact_and_enumerate_equal_brute_force(positions, alphabet):
    rng = np.random.default_rng(positions * 100 + alphabet)
    for _ in range(5):
        table = random_table(rng, positions, alphabet)
        secret = rng.integers(0, alphabet, positions)
        oracle = brute_force(table.tolist(), secret.tolist())
        for method in ("enumerate", "exact"):
            got = exposure_rank(table, secret, method=method)
            assert (got.better, got.tied) == oracle, (method, got, oracle)
            assert got.space_size == alphabet**positions and got.method == method


@st.composite
def spaces(draw):
    """Random per-position distributions over alphabets of differing sizes, sometimes quantized."""
    sizes = draw(st.lists(st.integers(1, 7), min_size=1, max_size=6).filter(lambda s: math.prod(s) <= 3000))
    seed = draw(st.integers(0, 2**32 - 1))
    quantize = draw(st.sampled_from([None, 0.25, 1.0]))  # dyadic steps: sums exact, ties forced
    rng = np.random.default_rng(seed)
    rows = [np.log(rng.dirichlet(np.full(n, 0.7))) for n in sizes]
    if quantize:
        rows = [np.round(r / quantize) * quantize for r in rows]
    secret = [int(rng.integers(0, n)) for n in sizes]
    return rows, secret


@settings(max_examples=60, deadline=None)
@given(spaces(), st.sampled_from([1e-9, 0.0]))
def test_property_all_methods_agree_with_the_oracle(space, tol):
    rows, secret = space
    if tol == 0.0:  # without tolerance only exact sums (dyadic values) have one true order
        rows = [np.round(r * 4) / 4 for r in rows]
    oracle = brute_force([r.tolist() for r in rows], secret, tol)
    enum = exposure_rank(rows, secret, method="enumerate", tolerance=tol)
    exact = exposure_rank(rows, secret, method="exact", tolerance=tol)
    assert (enum.better, enum.tied) == oracle
    assert (exact.better, exact.tied) == oracle
    for cells in (8, 1024):
        bounds = exposure_rank(rows, secret, method="bounds", grid_cells=cells, tolerance=tol)
        assert bounds.rank_low <= exact.rank_low and exact.rank_high <= bounds.rank_high, (bounds, exact)
        assert bounds.exposure_low <= exact.exposure_low <= exact.exposure_high <= bounds.exposure_high
    assert auto_method(rows) == "enumerate"
    assert exposure_rank(rows, secret, tolerance=tol) == enum


def _halves(rows, secret, tol):
    """The exact method's two halves and thresholds, as `_exact` forms them."""
    from dpaudit.attacks import exposure_rank as module

    sizes = [r.size for r in rows]
    part_a, part_b = module._split(sizes)
    if math.prod(sizes[i] for i in part_a) > math.prod(sizes[i] for i in part_b):
        part_a, part_b = part_b, part_a
    part_b = sorted(part_b, key=lambda i: -sizes[i])
    y_last, y_base, own_y = module._half(rows, secret, part_a)
    x_last, x_base, own_x = module._half(rows, secret, part_b)
    score = own_y + own_x
    _halves.parts = (y_last, y_base)
    return np.add.outer(y_last, y_base), x_last, x_base, score + tol, score - tol


def _merged_and_searched(rows, secret, tol):
    from dpaudit.attacks import exposure_rank as module

    y, x_last, x_base, t_hi, t_lo = _halves(rows, secret, tol)
    y_last, y_base = _halves.parts
    merged = module._merged_counts(y_last, y_base, x_last, x_base, t_hi, t_lo)
    searched = module._searched_counts(np.sort(y.ravel(), kind="stable"), x_last, x_base, t_hi, t_lo)
    return merged, searched


@st.composite
def merge_spaces(draw):
    """Log-prob tables as a model gives them: float64, float32-rounded (exact sums, repeated
    values) or dyadic (ties forced); secrets anywhere from the top to the bottom."""
    sizes = draw(st.lists(st.integers(1, 10), min_size=2, max_size=8).filter(lambda s: math.prod(s) <= 200_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    rows = [np.log(rng.dirichlet(np.full(n, draw(st.sampled_from([0.3, 1.0, 5.0]))))) for n in sizes]
    kind = draw(st.sampled_from(["float64", "float32", "dyadic"]))
    if kind == "float32":
        rows = [r.astype(np.float32).astype(np.float64) for r in rows]
    elif kind == "dyadic":
        rows = [np.minimum(np.round(r * 8) / 8, -0.125) for r in rows]
    which = draw(st.sampled_from(["random", "top", "bottom"]))
    secret = [
        int(rng.integers(0, r.size)) if which == "random" else int(r.argmax() if which == "top" else r.argmin())
        for r in rows
    ]
    return rows, secret, kind


@settings(max_examples=80, deadline=None)
@given(merge_spaces(), st.sampled_from([1e-9, 1e-6, 0.0, 0.05]))
def test_property_merged_counts_equal_the_binary_searches(space, tol):
    # The exact method's merge of integer keys must count exactly what the binary searches count
    # (better pairs, tied pairs), for every kind of table; it may only decline (None).
    rows, secret, kind = space
    merged, searched = _merged_and_searched(rows, secret, tol)
    y_max = _halves(rows, secret, tol)[0].max()
    if kind != "dyadic" and y_max < -2 * tol - 1e-9:  # thresholds below 0, few near-ties: merged
        assert merged is not None
    if merged is not None:
        assert merged == searched


def test_merged_counts_at_a_trillion_equal_the_binary_searches():
    # digits:12 as a model gives it (float32 softmax): the secret in the bulk (hundreds of ties
    # within 1e-9 among 10^12) and near the top; both paths give the same better and tied counts.
    rng = np.random.default_rng(0)
    rows = list(np.log(rng.dirichlet(np.ones(10), size=12)).astype(np.float32).astype(np.float64))
    bulk = [int(k) for k in rng.integers(0, 10, 12)]
    near_top = [int(r.argmax()) for r in rows]
    near_top[0] = int(np.argsort(rows[0])[-2])
    for secret in (bulk, near_top):
        for tol in (1e-9, 1e-7):
            merged, searched = _merged_and_searched(rows, secret, tol)
            assert merged is not None and merged == searched, (secret, tol)
    assert searched[1] > 0  # ties did occur


def auto_method(rows):
    return exposure_rank(rows, [0] * len(rows)).method


def test_ties_reported_as_an_interval():
    # Uniform digits:12: every candidate scores the same, so all 10^12 - 1 others tie.
    rows = np.log(np.full((12, 10), 0.1))  # digits:12, uniform
    got = exposure_rank(rows, [3] * 12, method="exact")
    assert (got.better, got.tied) == (0, 10**12 - 1)
    assert got.rank_low == 1 and got.rank_high == 10**12
    assert got.exposure_high == 12 * math.log2(10) and got.exposure_low == 0.0


@pytest.mark.parametrize("k", [0, 7, 20, 40])
def test_exact_at_a_trillion_matches_the_binomial_closed_form(k):
    # 40 binary positions scoring 0 or -1: |R| = 2^40 ~ 1.1e12; a candidate's score is -(its ones).
    # Candidates with fewer ones are better: sum_{j<k} C(40, j); those with k ones tie.
    rows = np.tile([0.0, -1.0], (40, 1))
    secret = [1] * k + [0] * (40 - k)
    got = exposure_rank(rows, secret, method="exact")
    assert got.space_size == 2**40
    assert got.better == sum(math.comb(40, j) for j in range(k))
    assert got.tied == math.comb(40, k) - 1
    bounds = exposure_rank(rows, secret, method="bounds")
    assert bounds.rank_low <= got.rank_low and got.rank_high <= bounds.rank_high


def test_tolerance_absorbs_summation_order():
    # 0.1 + 0.2 + 0.3 differs from 0.3 + 0.2 + 0.1 in the last bit; within tolerance they tie.
    rows = [np.array([0.1, 0.3]), np.array([0.2, 0.2]), np.array([0.3, 0.1])]
    loose = exposure_rank(rows, [0, 0, 0], method="exact")
    # (1,*,0) score 0.8: better. (0,*,0) and (1,*,1) score 0.6 as real numbers, as the secret does,
    # but 0.3+0.2+0.1 is not 0.1+0.2+0.3 in float64: within tolerance they are ties.
    assert loose.better == 2 and loose.tied == 3
    assert 0.3 + 0.2 + 0.1 != 0.1 + 0.2 + 0.3
    strict = exposure_rank(rows, [0, 0, 0], method="enumerate", tolerance=0.0)
    # without tolerance the last bit decides: 0.3+0.2+0.1 = 0.6 < 0.1+0.2+0.3 = 0.6000000000000001
    assert (strict.better, strict.tied) == (2, 1)


def test_zero_tolerance_keeps_the_secret_out_of_its_own_ties():
    # fl(fl(0.1 + 0.2) - 0.2) > 0.1: the meet-in-the-middle threshold for the secret's own pair
    # rounds past it; the secret must still be neither better than nor tied with itself.
    rows = [np.array([0.1, -5.0]), np.array([0.2, -5.0])]
    for method in ("enumerate", "exact"):
        got = exposure_rank(rows, [0, 0], method=method, tolerance=0.0)
        assert (got.better, got.tied) == (0, 0), method


# ---------------------------------------------------------------------------------------------
# Bounds bracket exact on spaces too large to enumerate


@pytest.mark.parametrize("positions,alphabet", [(8, 10), (3, 200)])  # digits:8, words:3 over 200 words
def test_bounds_bracket_exact(positions, alphabet):
    rng = np.random.default_rng(positions)
    table = random_table(rng, positions, alphabet, concentration=1.0)
    top = table.argmax(axis=1)
    secrets = [top, table.argmin(axis=1)] + [rng.integers(0, alphabet, positions) for _ in range(3)]
    for secret in secrets:
        exact = exposure_rank(table, secret, method="exact")
        for cells in (64, 4096):
            bounds = exposure_rank(table, secret, method="bounds", grid_cells=cells)
            assert bounds.method == "bounds" and bounds.space_size == alphabet**positions
            assert bounds.rank_low <= exact.rank_low <= exact.rank_high <= bounds.rank_high, (cells, bounds, exact)
        fine = exposure_rank(table, secret, method="bounds", grid_cells=1 << 14)
        assert fine.exposure_high - fine.exposure_low < 0.1  # a fine grid gives a tight bracket


def test_bounds_on_spaces_beyond_2_to_63():
    rng = np.random.default_rng(20)
    digits = random_table(rng, 20, 10)
    got = exposure_rank(digits, rng.integers(0, 10, 20))  # auto: |R| = 1e20 > 1e14
    assert got.method == "bounds" and got.space_size == 10**20
    assert 0 <= got.exposure_low <= got.exposure_high <= 20 * math.log2(10)
    assert got.exposure_high - got.exposure_low < 0.2
    words = random_table(rng, 6, 1695)
    got = exposure_rank(words, rng.integers(0, 1695, 6))
    assert got.method == "bounds" and got.space_size == 1695**6 > 2**63
    assert got.exposure_high - got.exposure_low < 0.2


# ---------------------------------------------------------------------------------------------
# A secret ranked first has exposure exactly log2 |R|


@pytest.mark.parametrize("positions,method", [(4, "enumerate"), (12, "exact"), (20, "bounds"), (4, "bounds")])
def test_top_ranked_secret_has_exposure_log2_space(positions, method):
    rng = np.random.default_rng(positions)
    table = random_table(rng, positions, 10)
    got = exposure_rank(table, table.argmax(axis=1), method=method)
    assert got.better == 0
    assert got.exposure_high == math.log2(10**positions)
    if method != "bounds":
        assert got.tied == 0 and got.exposure_low == got.exposure_high


# ---------------------------------------------------------------------------------------------
# Sampled estimates against the exact rank


@pytest.mark.parametrize("quantile", [0.5, 0.9, 0.99])
def test_sampled_estimates_track_exact(quantile):
    rng = np.random.default_rng(int(quantile * 100))
    positions, alphabet, m = 8, 10, 20_000
    table = random_table(rng, positions, alphabet, concentration=2.0)
    refs_idx = rng.integers(0, alphabet, (m, positions))  # uniform candidates from R
    refs = table[np.arange(positions), refs_idx].sum(axis=1)
    # a secret at the given quantile of the score distribution
    pool = rng.integers(0, alphabet, (2000, positions))
    pool_scores = table[np.arange(positions), pool].sum(axis=1)
    secret = pool[np.argsort(pool_scores)[int(quantile * (len(pool) - 1))]]
    exact = exposure_rank(table, secret, method="exact")
    score = float(table[np.arange(positions), secret].sum())
    interp = sampled_exposure(score, refs, 10**positions)
    skew = sampled_exposure(score, refs[:5000], 10**positions, method="skewnorm")  # the fit is slow at large m
    assert interp.method == "sampled-interpolation" and skew.method == "sampled-skewnorm"
    # b ~ m * 10^-exposure references beat the secret: the log2 error is ~ 1/(ln2 sqrt(b)) bits
    b = max(1.0, m * 2.0**-exact.exposure_high)
    assert abs(interp.exposure_high - exact.exposure_high) < 4 / (math.log(2) * math.sqrt(b)) + 0.05
    assert abs(skew.exposure_high - exact.exposure_high) < 0.35


def test_interpolation_caps_at_log2_m_and_skewnorm_extrapolates():
    rng = np.random.default_rng(5)
    refs = rng.normal(size=1000)
    interp = sampled_exposure(50.0, refs, 10**12)  # beats every reference
    assert interp.exposure_high == pytest.approx(math.log2(1000), abs=1e-6)
    skew = sampled_exposure(50.0, refs, 10**12, method="skewnorm")
    assert skew.exposure_high == math.log2(10**12)  # extrapolated past 1 in 10^12: ranked first
    worst = sampled_exposure(-50.0, refs, 10**12)
    assert worst.rank_high == 10**12 and worst.exposure_low == 0.0


# ---------------------------------------------------------------------------------------------
# API contracts


def test_batched_api_matches_single_calls():
    rng = np.random.default_rng(3)
    tables = np.stack([random_table(rng, 7, 10) for _ in range(4)])
    secrets = rng.integers(0, 10, (4, 7))
    single = [exposure_rank(t, s) for t, s in zip(tables, secrets)]
    assert exposure_ranks(tables, secrets) == single
    assert exposure_ranks(tables, secrets, workers=2) == single
    ragged = [[np.zeros(3), np.log([0.5, 0.25, 0.25])], [np.zeros(2), np.zeros(4)]]  # alphabets differ
    assert [r.space_size for r in exposure_ranks(ragged, [[0, 1], [1, 3]])] == [9, 8]


def test_rank_interval_json_round_trip_keeps_big_ints():
    rank = RankInterval(better=26588729198744178688, tied=5, space_size=10**20, method="bounds")
    data = json.loads(json.dumps(rank.to_json()))
    assert RankInterval.from_json(data) == rank
    assert data["space_size"] == 10**20 and data["rank_high"] == 26588729198744178694
    assert data["exposure_low"] == math.log2(10**20) - math.log2(26588729198744178694)
    with pytest.raises(ValueError, match="inconsistent"):
        RankInterval.from_json({**data, "rank_low": 1})
    with pytest.raises(ValueError, match="exceeds space_size"):
        RankInterval(better=10, tied=0, space_size=10, method="exact")
    with pytest.raises(ValueError, match="method"):
        RankInterval(better=0, tied=0, space_size=10, method="guess")


@pytest.mark.parametrize(
    "log_probs,secret,match",
    [
        (np.zeros((3, 10)), [1, 2], "secret has 2 positions but log_probs has 3"),
        (np.zeros((3, 10)), [1, 2, 10], r"secret position 2 is symbol 10, outside the alphabet \[0, 10\)"),
        (np.zeros((3, 10)), [1, -1, 0], "secret position 1 is symbol -1"),
        (np.array([[0.0, np.nan], [0.0, 0.0]]), [0, 0], "position 0, symbol 1 is nan"),
        (np.array([[0.0, np.inf], [0.0, 0.0]]), [0, 0], "must be finite"),
        (np.zeros((2, 3, 4)), [0, 0], r"must be \[positions, alphabet\]"),
        (np.zeros((2, 3)), [0.5, 1.0], "symbol indices"),
        ([np.zeros(3), np.zeros((2, 2))], [0, 0], "position 1 must be a non-empty 1-D array"),
        ([], [], "no positions"),
    ],
)
def test_invalid_input_is_a_clear_value_error(log_probs, secret, match):
    with pytest.raises(ValueError, match=match):
        exposure_rank(log_probs, secret)


def test_invalid_options_are_value_errors():
    table = np.zeros((2, 3))
    with pytest.raises(ValueError, match="tolerance"):
        exposure_rank(table, [0, 0], tolerance=-1.0)
    with pytest.raises(ValueError, match="method must be"):
        exposure_rank(table, [0, 0], method="sampled")
    with pytest.raises(ValueError, match="too many"):
        exposure_rank(np.zeros((9, 10)), [0] * 9, method="enumerate")
    with pytest.raises(ValueError, match="use 'bounds'"):
        exposure_rank(np.zeros((20, 10)), [0] * 20, method="exact")
    with pytest.raises(ValueError, match="canaries, positions, alphabet"):
        exposure_ranks(table, [[0, 0]])
    with pytest.raises(ValueError, match="workers"):
        exposure_ranks(table[None], [[0, 0]], workers=0)
    with pytest.raises(ValueError, match="space_size"):
        sampled_exposure(0.0, np.zeros(5), 0)
    with pytest.raises(ValueError, match="finite"):
        sampled_exposure(0.0, np.array([0.0, np.nan]), 10)
    with pytest.raises(ValueError, match="not all equal"):
        sampled_exposure(0.0, np.zeros(5), 10, method="skewnorm")
    with pytest.raises(ValueError, match="interpolation"):
        sampled_exposure(0.0, np.zeros(5), 10, method="exact")


@pytest.mark.parametrize(
    "space, m, better", [(1000, 10, 0), (10_000, 100, 2), (10_000, 10_000, 5400), (10**5, 5000, 0)]
)
def test_interpolated_rank_that_is_an_integer_is_not_rounded_past_it(space, m, better):
    """|R| (b + 1) / m exact (1000 / 10 = 100) comes back from the log2 round trip as 100.00000000000004: the rank
    interval is [100, 100], not [100, 101] (a ceiling of the float error) nor [99, ...] (a floor of 99.99...)."""
    refs = np.r_[np.full(better, 2.0), np.zeros(m - better)]  # b references beat the secret's 1.0, none tie it
    got = sampled_exposure(1.0, refs, space)
    assert got.rank_low == got.rank_high == space * (better + 1) // m and got.tied == 0
    half = sampled_exposure(1.0, np.r_[2.0, np.zeros(2)], 1000)  # 1000 * 2 / 3 = 666.67: rounded out, both ways
    assert (half.rank_low, half.rank_high) == (666, 667)
