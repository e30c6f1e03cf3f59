"""``dpaudit account``: epsilon of a DP-SGD run, calibration of sigma, reverse searches and TAN figures.

Leave exactly one of noise multiplier, steps or batch size out and give ``--target-epsilon``: that
one is solved for (smallest sigma, most steps, largest batch within the budget). Give them all and
the command prints epsilon (and, with a target, whether the run fits). Everything printed is
recomputed from the run's DpEvent by :mod:`dpaudit.accounting`, and printed epsilons and deltas are
rounded UP (:func:`dpaudit.common.figures.format_up`).

``--noise-multiplier`` is sigma as everywhere in dpaudit (``dp_accounting``'s meaning): the noise std
over the bound on one example's contribution, C for per-example clipping and 2C for micro-batch
clipping, exactly what ``privacy.json`` stores in ``noise_multipliers``. So ``--microbatch-size``
changes the noise std (sigma x 2C), not the epsilon of a given sigma; the noise std over C has its
own option, ``--noise-std-over-clip``. ``--fixed-size`` (replace-one adjacency) doubles the bound
once more: its event carries sigma / 2.

The command is split by job: :class:`_Options` (what was given), :func:`_check_options`,
:func:`_setup` (delta, accountants, notes), :func:`_solve_poisson` / :func:`_solve_fixed_size` (the
segments, calibration and reverse searches), :func:`_result` (the epsilons and the JSON object) and
:func:`_render` (text).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

import click

from dpaudit.cli.params import FiniteFloat, NoiseMultiplier
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up

if TYPE_CHECKING:
    from dpaudit.accounting import Accountant

#: Stated in --help (kept in sync with dpaudit.accounting.DEFAULT_DELTA_RULE, which a test checks).
_DELTA_HELP = (
    "delta of the guarantee  [default: min(1e-5, 1/(10 N)): well below 1/N, since a mechanism that "
    "publishes one random row verbatim already satisfies delta = 1/N; a delta >= 1/N is warned about]"
)

EPILOG = """\b
Worked examples (the settings of the papers dpaudit reproduces):
\b
  Anil et al. 2021, BERT-Large, constant batch 65,536 for 20K steps: calibrate sigma for eps 5.36
    dpaudit account -N 346000000 --batch-size 65536 --steps 20000 --delta 2.89e-9 --target-epsilon 5.36
\b
  Anil et al. 2021, batches 262K -> 1M in four stages over 7.5K steps, then 1M up to 20K steps
    dpaudit account -N 346000000 --delta 2.89e-9 --target-epsilon 5.36 \\
      --batch-schedule 1875:262144,1875:458752,1875:655360,1875:851968,12500:1048576
\b
  Dupuy et al. 2021 style eDP-SGD: batch 256 split into micro-batches of 32 (sensitivity 2C),
  sigma 1.2 (noise std 1.2 x 2C) decaying linearly per epoch with a floor, 5 epochs over 450K utterances
    dpaudit account -N 450000 --batch-size 256 --microbatch-size 32 --epochs 5 \\
      --noise-multiplier 1.2 --noise-decay linear:0.1:0.6 --accountant both
\b
  Reverse searches: most steps, or largest batch, that fit epsilon 8
    dpaudit account -N 1000000 --batch-size 4096 --noise-multiplier 1.0 --target-epsilon 8
    dpaudit account -N 1000000 --steps 5000 --noise-multiplier 1.0 --target-epsilon 8
\b
  TAN (Sander et al. 2023) and a cheap NON-PRIVATE simulation of the same run at batch 4096
    dpaudit account -N 346000000 --batch-size 65536 --steps 20000 --noise-multiplier 4 --tan --simulate 4096
\b
Schedule files (--schedule) are JSON or TOML: a list of segments, each with `steps`, one of
`batch_size` or `sampling_probability`, and optionally its own `noise_multiplier` (sigma, as in privacy.json)
(JSON: [{"steps": 1000, "batch_size": 4096}, ...]; TOML: [[segments]] tables).
\b
Example: dpaudit account -N 60000 --batch-size 256 --epochs 15 --noise-multiplier 1.1 --accountant both"""


@dataclass(frozen=True)
class _Plan:
    """What the options describe: segments as a function of the (global) noise multiplier."""

    build: Callable[[float], list]  # sigma -> list[Segment]
    uses_sigma: bool  # False when every segment names its own sigma
    description: str


#: The largest -N accepted: beyond every corpus there is (1e12 examples), the sampling rates become so small
#: that they mean nothing (a q below 1e-12 is round-off for float64 sums of them).
MAX_DATASET_SIZE = 10**12


def _fail(message: str) -> NoReturn:
    raise UserInputError(message)


def _load_schedule(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        _fail(
            f"--schedule {path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
            "save it as UTF-8 JSON or TOML."
        )
    try:
        data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as err:
        _fail(f"--schedule {path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'} ({err}).")
    if isinstance(data, dict):
        data = data.get("segments")
    if not isinstance(data, list) or not data:
        _fail(f"--schedule {path}: expected a non-empty list of segments (or a 'segments' list).")
    allowed = {"steps", "batch_size", "sampling_probability", "noise_multiplier"}
    for index, item in enumerate(data):
        where = f"--schedule {path}: segment {index + 1}"
        if not isinstance(item, dict):
            _fail(f"{where}: expected an object with steps and batch_size or sampling_probability.")
        unknown = sorted(set(item) - allowed)
        if unknown:
            _fail(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")
        if "steps" not in item or (("batch_size" in item) == ("sampling_probability" in item)):
            _fail(f"{where}: needs steps and exactly one of batch_size or sampling_probability.")
        for key, value in item.items():
            integer = key in ("steps", "batch_size")
            kinds = (int,) if integer else (int, float)
            if isinstance(value, bool) or not isinstance(value, kinds):
                kind = "an integer" if integer else "a number"
                _fail(f"{where}: {key} must be {kind}, got {value!r}.")
            if integer and value < 1:
                _fail(f"{where}: {key} must be >= 1, got {value}.")
            if key == "noise_multiplier":  # the range --noise-multiplier takes
                from dpaudit.training.config_types import check_noise_multiplier

                try:
                    check_noise_multiplier(value, "noise_multiplier")
                except ValueError as err:
                    _fail(f"{where}: {err}")
    return data


def _decay(spec: str, epochs: int) -> Callable[[float], list[float]]:
    from dpaudit import accounting as A

    kind, *args = spec.split(":")
    try:
        values = [float(a) for a in args]
    except ValueError:
        values = []
    if kind == "linear" and len(values) == 2:
        from dpaudit.training.config_types import check_noise_multiplier

        try:  # the floor is a noise multiplier: the range --noise-multiplier takes
            check_noise_multiplier(values[1], f"--noise-decay {spec}: SIGMA_MIN", no_noise="")
        except ValueError as err:
            _fail(str(err))
        return lambda s: A.linear_decay_sigmas(s, values[0], epochs, values[1])
    if kind == "exp" and len(values) == 1:
        return lambda s: A.exponential_decay_sigmas(s, values[0], epochs)
    _fail(f"--noise-decay {spec!r}: expected linear:K:SIGMA_MIN or exp:K, e.g. linear:0.1:0.6.")
    raise AssertionError  # unreachable


def _fmt_int(n: int | float) -> str:
    return f"{int(n):,}"


@click.command(epilog=EPILOG, context_settings={"max_content_width": 110})
@click.option(
    "--dataset-size",
    "-N",
    type=click.IntRange(min=1),
    help=f"Number of examples (privacy units) N, at most {MAX_DATASET_SIZE:.0e}.",
)
@click.option("--batch-size", "-B", type=click.IntRange(min=1), help="Expected batch size; q = B / N.")
@click.option(
    "--sampling-probability",
    "-q",
    type=FiniteFloat(0, 1, min_open=True),
    help="Poisson sampling probability q (instead of --batch-size).",
)
@click.option("--steps", "-S", type=click.IntRange(min=1), help="Number of DP-SGD steps.")
@click.option("--epochs", type=click.IntRange(min=1), help="Epochs instead of --steps (ceil(N / B) steps each).")
@click.option(
    "--noise-multiplier",
    "--sigma",
    "noise_multiplier",
    type=NoiseMultiplier(),
    help="Noise multiplier sigma, dp_accounting's: noise std on the summed clipped gradients / the bound on one "
    "example's contribution (C; 2C with --microbatch-size > 1). privacy.json's noise_multipliers.",
)
@click.option(
    "--noise-std-over-clip",
    type=NoiseMultiplier(),
    help="Instead of --noise-multiplier: noise std / C (what Dupuy et al. and Opacus call the noise "
    "multiplier); sigma = this / 2 with --microbatch-size > 1, else this.",
)
@click.option("--delta", type=FiniteFloat(0, 1, min_open=True, max_open=True), help=_DELTA_HELP)
@click.option(
    "--target-epsilon",
    type=FiniteFloat(min=0, min_open=True),
    help="Budget: solve for the one missing quantity (sigma, steps or batch), or check the run against it.",
)
@click.option(
    "--schedule",
    "schedule_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="JSON or TOML list of segments (steps + batch_size or sampling_probability [+ noise_multiplier]).",
)
@click.option(
    "--batch-schedule",
    help='Inline batch-size schedule "STEPS:BATCH,STEPS:BATCH,...", segments in the order '
    "run (any order: increasing as in Anil et al. 2021, or not; each is accounted as given).",
)
@click.option(
    "--noise-decay", help="Per-epoch sigma decay fixed in advance: linear:K:SIGMA_MIN or exp:K (needs --epochs)."
)
@click.option(
    "--microbatch-size",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Micro-batch clipping: any size > 1 doubles one example's bound to 2C (the noise std is sigma x 2C; "
    "the same sigma gives the same epsilon).",
)
@click.option(
    "--fixed-size",
    is_flag=True,
    help="Fixed-size batches sampled without replacement: replace-one adjacency (sensitivity twice one "
    "example's bound: the accountant sees sigma / 2), RDP only (labelled).",
)
@click.option(
    "--noise-reach",
    type=click.FloatRange(min=1.0),
    default=11.596,
    show_default=True,
    metavar="Z",
    help="Reach of the float noise sampler in standard deviations; its tail figure (sum over steps of q P(Z > "
    "Z - 1/sigma)) is counted inside --delta: epsilon is at delta minus it. 11.596: every dpaudit trainer "
    "(Box-Muller with a 96-bit radius uniform); jax.random.normal float32 5.22, torch CPU normal_ 5.768, "
    "CUDA 6.764; inf: an exact sampler, no tail.",
)
@click.option(
    "--accountant",
    type=click.Choice(["pld", "rdp", "both"]),
    default=None,
    help="Accountant of record  [default: pld; rdp with --fixed-size]",
)
@click.option("--tan", is_flag=True, help="Also print eta and eps_TAN (Sander et al.; valid only for sigma > 2).")
@click.option(
    "--simulate",
    type=click.IntRange(min=1),
    metavar="B",
    help="TAN simulation at batch B: same eta_step and steps, labelled NON-PRIVATE.",
)
@click.option(
    "--tolerance",
    type=FiniteFloat(0, 0.1, min_open=True),
    default=1e-3,
    show_default=True,
    help="Relative tolerance of calibrations and reverse searches.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def account(**options: Any) -> None:
    """Compute epsilon for a DP-SGD run, calibrate sigma for a target epsilon, or find the most steps / largest
    batch within a budget. Poisson sampling and add/remove-one adjacency unless --fixed-size."""
    given = _Options(**options)
    try:
        result = _run(given)  # a UserInputError becomes one line and exit 2 in the command group
    except OverflowError:  # dp_accounting's PLD construction: exp() of a tiny sigma's privacy loss, or a huge sigma^2
        which = (
            "the noise multiplier"
            if given.sigma is None
            else f"--noise-multiplier {given.sigma:g}"
            if given.noise_std_over_clip is None
            else f"--noise-std-over-clip {given.noise_std_over_clip:g}"
        )
        if given.sigma is not None and given.sigma > 1:  # huge noise: epsilon is ~0, never "add noise"
            raise UserInputError(
                f"{which} is too large for PLD's float arithmetic (its privacy loss is ~0: epsilon is "
                "effectively 0); give a noise multiplier between 1e-10 and 1e10."
            ) from None
        raise UserInputError(
            f"{which} is too small to account with PLD (its privacy loss overflows a float: epsilon "
            "is effectively unbounded); add noise, or use --accountant rdp."
        ) from None
    if given.as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(_render(result))


@dataclass(frozen=True, kw_only=True)
class _Options:
    """The command line as given (None: not given); see the click options for each meaning."""

    dataset_size: int | None
    batch_size: int | None
    sampling_probability: float | None
    steps: int | None
    epochs: int | None
    noise_multiplier: float | None
    noise_std_over_clip: float | None
    delta: float | None
    target_epsilon: float | None
    schedule_file: Path | None
    batch_schedule: str | None
    noise_decay: str | None
    microbatch_size: int
    fixed_size: bool
    noise_reach: float
    accountant: Literal["pld", "rdp", "both"] | None
    tan: bool
    simulate: int | None
    tolerance: float
    as_json: bool

    @property
    def schedule_mode(self) -> bool:
        """Segments come from a schedule (file, inline batches or a noise decay), not from one constant run."""
        return self.schedule_file is not None or self.batch_schedule is not None or self.noise_decay is not None

    @property
    def clipping_factor(self) -> float:
        """One example's bound in clip norms: 1 per-example, 2 with micro-batch clipping."""
        from dpaudit import accounting as A

        return A.microbatch_sensitivity_factor(self.microbatch_size)

    @property
    def sigma(self) -> float | None:
        """The noise multiplier given: ``--noise-multiplier``, or ``--noise-std-over-clip`` over the clipping factor."""
        if self.noise_std_over_clip is not None:
            return self.noise_std_over_clip / self.clipping_factor
        return self.noise_multiplier

    @property
    def expected_batch(self) -> float | None:
        if self.batch_size is not None:
            return self.batch_size
        if self.sampling_probability is not None and self.dataset_size is not None:
            return self.sampling_probability * self.dataset_size
        return None


@dataclass(frozen=True, kw_only=True)
class _Setup:
    """What the options fix before anything is solved: delta, the accountants (of record first), the notes."""

    delta: float
    accountants: list[Accountant]
    notes: list[str]

    @property
    def primary(self) -> Accountant:
        return self.accountants[0]


@dataclass(frozen=True, kw_only=True)
class _Solution:
    """The run that is accounted: its event and segments, sigma, and what was solved for."""

    event: Any
    segments: list
    sigma: float | None
    sensitivity_factor: float  # L2 sensitivity of the noised sum under the adjacency, over C
    batch_size: int | None
    solved: dict[str, Any]


def _run(o: _Options) -> dict[str, Any]:
    """Check the options, fix delta and the accountants, solve for the missing quantity, compute."""
    _check_options(o)
    setup = _setup(o)
    solution = _solve_fixed_size(o) if o.fixed_size else _solve_poisson(o, setup)
    return _result(o, setup, solution)


def _check_options(o: _Options) -> None:
    """Refuse contradictory or out-of-range options, each with one line naming them."""
    n = o.dataset_size
    for flag, value in (
        ("--target-epsilon", o.target_epsilon),
        ("--noise-multiplier", o.noise_multiplier),
        ("--noise-std-over-clip", o.noise_std_over_clip),
        ("--delta", o.delta),
        ("--sampling-probability", o.sampling_probability),
        ("--tolerance", o.tolerance),
    ):
        if value is not None and not math.isfinite(value):  # click's FloatRange lets inf and nan through
            _fail(f"{flag} must be a finite number, got {value}.")
    if math.isnan(o.noise_reach):
        _fail("--noise-reach must be a number of standard deviations (inf for an exact sampler), got nan.")
    if o.noise_multiplier is not None and o.noise_std_over_clip is not None:
        _fail(
            "--noise-multiplier and --noise-std-over-clip both given; pass one (sigma = noise std / C / the "
            "sensitivity factor)."
        )
    if n is not None and n > MAX_DATASET_SIZE:
        _fail(
            f"--dataset-size/-N {n:,} is above the limit of {MAX_DATASET_SIZE:,} examples (10^12); pass the number of "
            "privacy units of the training set."
        )
    if o.microbatch_size > 1 and o.expected_batch is not None and o.microbatch_size > o.expected_batch:
        _fail(
            f"--microbatch-size {o.microbatch_size} is larger than the (expected) batch size {o.expected_batch:g}: a "
            "micro-batch is a part of one batch; pass a size <= the batch size (1 for per-example clipping)."
        )
    if o.batch_size is not None and o.sampling_probability is not None:
        _fail("--batch-size and --sampling-probability both given; pass one (q = B / N).")
    if o.batch_size is not None and n is None:
        _fail("--batch-size needs --dataset-size/-N (q = B / N); or pass --sampling-probability/-q.")
    if o.batch_size is not None and n is not None and o.batch_size > n:  # (a batch size without n: refused above)
        _fail(f"--batch-size {o.batch_size} is larger than --dataset-size {n}.")
    if o.steps is not None and o.epochs is not None:
        _fail("--steps and --epochs both given; pass one.")
    if o.delta is None and n is None:
        _fail("--delta is required without --dataset-size (its default is min(1e-5, 1/(10 N))).")
    if o.schedule_file is not None and o.batch_schedule is not None:
        _fail("--schedule and --batch-schedule both given; pass one.")
    if o.schedule_file is not None or o.batch_schedule is not None:
        clashing = [
            name
            for name, value in (
                ("--batch-size/-B", o.batch_size),
                ("--sampling-probability/-q", o.sampling_probability),
                ("--steps/-S", o.steps),
                ("--epochs", o.epochs),
            )
            if value is not None
        ]
        if clashing:
            which = "--schedule" if o.schedule_file is not None else "--batch-schedule"
            _fail(f"{which} sets every segment's steps and batch; remove {' and '.join(clashing)} (or drop {which}).")


def _setup(o: _Options) -> _Setup:
    """delta (default min(1e-5, 1/(10 N))), the accountants and the notes every output carries."""
    from dpaudit import accounting as A

    if o.delta is None:
        assert o.dataset_size is not None  # _check_options refused --delta and -N both missing
        delta = A.default_delta(o.dataset_size)
    else:
        delta = o.delta
    tiny_delta = delta < A.PLD_MIN_DELTA  # PLD's FFT round-off exceeds such a delta: RDP is the accountant of record
    by_option: dict[str | None, list[Accountant]] = {
        "pld": ["pld"],
        "rdp": ["rdp"],
        "both": ["pld", "rdp"],
        None: ["rdp" if o.fixed_size or tiny_delta else "pld"],
    }
    accountants = by_option[o.accountant]
    if tiny_delta and "pld" in accountants:
        _fail(
            f"--delta {delta:g} is below {A.PLD_MIN_DELTA:g}, where the PLD accountant is not reliable (FFT "
            f"round-off can exceed delta); use --accountant rdp (the default there)."
        )
    if o.fixed_size and "pld" in accountants:
        _fail(
            "--fixed-size is accounted by RDP only (replace-one adjacency); use --accountant rdp or drop --accountant."
        )
    notes: list[str] = []
    delta_warning = A.delta_warning(delta, o.dataset_size)
    if delta_warning:
        click.echo(f"warning: {delta_warning}", err=True)
        notes.append(f"warning: {delta_warning}")
    if o.clipping_factor != 1.0:
        notes.append(
            f"micro-batch clipping (micro-batch size {o.microbatch_size}): one example moves one clipped "
            f"micro-batch sum by up to 2C, so the noise std is sigma x 2C; sigma is the noise multiplier of "
            f"that bound (dp_accounting's), and the same sigma gives the same epsilon as per-example clipping"
        )
    if o.clipping_factor != 1.0 and o.noise_multiplier is not None:
        changed = (
            "--noise-multiplier is sigma, the noise std over one example's bound (2C here), as privacy.json "
            "stores it since dpaudit.privacy/3; before, with --microbatch-size it meant std/C: for that, pass "
            "--noise-std-over-clip"
        )
        click.echo(f"warning: {changed}", err=True)
        notes.append(f"warning: {changed}")
    if o.fixed_size:
        notes.append(A.FIXED_SIZE_LABEL)
    if tiny_delta and o.accountant is None:
        notes.append(
            f"delta below {A.PLD_MIN_DELTA:g}: epsilon by RDP, a valid bound at any delta (the PLD "
            f"accountant's FFT round-off can exceed such a delta)"
        )
    return _Setup(delta=delta, accountants=accountants, notes=notes)


def _solve_fixed_size(o: _Options) -> _Solution:
    """Fixed-size batches without replacement: replace-one, the event carries sigma / 2 (no calibration)."""
    from dpaudit import accounting as A

    n, batch_size, steps, sigma = o.dataset_size, o.batch_size, o.steps, o.sigma
    if o.schedule_mode or n is None or batch_size is None:
        _fail("--fixed-size needs --dataset-size and --batch-size (no schedules).")
    if o.epochs is not None:
        steps = o.epochs * math.ceil(n / batch_size)
    if steps is None or sigma is None:
        _fail("--fixed-size needs --steps (or --epochs) and --noise-multiplier (no calibration).")
    event = A.fixed_size_event(dataset_size=n, batch_size=batch_size, steps=steps, noise_multiplier=sigma)
    factor = o.clipping_factor * A.REPLACE_ONE_FACTOR  # what the segments (and --tan/--simulate) must see
    # The segment states the accountant's sigma under replace-one (std over the 2x bound): sigma / 2.
    segments = [
        A.Segment(
            steps=steps,
            sampling_probability=batch_size / n,
            noise_multiplier=sigma / A.REPLACE_ONE_FACTOR,
            sensitivity_factor=factor,
        )
    ]
    return _Solution(
        event=event, segments=segments, sigma=sigma, sensitivity_factor=factor, batch_size=batch_size, solved={}
    )


def _solve_poisson(o: _Options, setup: _Setup) -> _Solution:
    """Poisson sampling: the segments of the options, with the one missing quantity solved for the target."""
    from dpaudit import accounting as A

    n, factor, sigma, batch_size = o.dataset_size, o.clipping_factor, o.sigma, o.batch_size
    q = (
        o.sampling_probability
        if o.sampling_probability is not None
        else (batch_size / n if batch_size and n is not None else None)  # (a batch size without n: refused)
    )
    plan = _plan(
        n=n,
        q=q,
        steps=o.steps,
        epochs=o.epochs,
        schedule_file=o.schedule_file,
        batch_schedule=o.batch_schedule,
        noise_decay=o.noise_decay,
        factor=factor,
    )
    missing = _missing(plan=plan, q=q, steps=o.steps, epochs=o.epochs, sigma=sigma, n=n)
    target, delta, solved = o.target_epsilon, setup.delta, {}
    if missing and target is None:
        _fail(f"missing {missing}: pass it, or pass --target-epsilon to solve for it.")
    if missing == "--noise-multiplier":
        assert target is not None  # refused just above
        click.echo("calibrating the noise multiplier ...", err=True)
        sigma = A.calibrate_noise(
            lambda s: A.schedule_event(plan.build(s)),
            target,
            delta,
            accountant=setup.primary,
            tolerance=o.tolerance,
            noise_reach=o.noise_reach,
        )
        solved["noise_multiplier"] = sigma
    elif missing == "--steps":
        assert q is not None and sigma is not None and target is not None  # _missing: only the steps are missing
        steps = A.max_steps(
            sampling_probability=q,
            noise_multiplier=sigma,
            target_epsilon=target,
            delta=delta,
            accountant=setup.primary,
            tolerance=o.tolerance,
            noise_reach=o.noise_reach,
        )
        if steps == 0:
            _fail(f"not even one step fits epsilon {target:g}; add noise or sample less.")
        solved["steps"] = steps
        plan = _plan(
            n=n, q=q, steps=steps, epochs=None, schedule_file=None, batch_schedule=None, noise_decay=None, factor=factor
        )
    elif missing == "--batch-size":
        # _missing: only the batch size is missing, with -N and --steps given
        assert n is not None and o.steps is not None and sigma is not None and target is not None
        batch_size = A.max_batch_size(
            dataset_size=n,
            steps=o.steps,
            noise_multiplier=sigma,
            target_epsilon=target,
            delta=delta,
            accountant=setup.primary,
            tolerance=o.tolerance,
            noise_reach=o.noise_reach,
        )
        if batch_size == 0:
            _fail(f"not even a batch of 1 fits epsilon {target:g} in {o.steps} steps; add noise.")
        solved["batch_size"] = batch_size
        plan = _plan(
            n=n,
            q=batch_size / n,
            steps=o.steps,
            epochs=None,
            schedule_file=None,
            batch_schedule=None,
            noise_decay=None,
            factor=factor,
        )
    if plan.uses_sigma and sigma is None:
        _fail("--noise-multiplier is required.")
    segments = plan.build(sigma if sigma is not None else 1.0)
    return _Solution(
        event=A.schedule_event(segments),
        segments=segments,
        sigma=sigma,
        sensitivity_factor=factor,
        batch_size=batch_size,
        solved=solved,
    )


def _result(o: _Options, setup: _Setup, solution: _Solution) -> dict[str, Any]:
    """Epsilon by each accountant, from the event, at delta minus the noise sampler's tail figure (Poisson sampling;
    none is defined for fixed-size batches), and the ``dpaudit.account/3`` object (with TAN figures)."""
    from dpaudit import accounting as A

    sigma, segments = solution.sigma, solution.segments
    tail = None if o.fixed_size else A.tail_figure(segments, o.noise_reach)
    accountant_delta = setup.delta - (tail or 0.0)
    if accountant_delta <= 0.0:  # the tail alone reaches delta: no epsilon holds there
        epsilons = {name: math.inf for name in setup.accountants}
    else:
        epsilons = {name: A.epsilon(solution.event, accountant_delta, name) for name in setup.accountants}
    result: dict[str, Any] = {
        "schema": "dpaudit.account/3",
        "sampling": "without_replacement" if o.fixed_size else "poisson",
        "adjacency": "replace one example" if o.fixed_size else "add/remove one example",
        "dataset_size": o.dataset_size,
        "delta": setup.delta,
        # the float noise sampler's tail figure counted inside delta, and the delta the epsilons are computed at
        "noise_tail": None
        if tail is None
        else {"z_max": o.noise_reach, "figure": tail, "formula": "sum over steps of q P(Z > z_max - 1/sigma)"},
        # None when the tail alone reaches delta: no epsilon holds there (every epsilon is then inf, said why)
        "accountant_delta": accountant_delta if accountant_delta > 0.0 else None,
        "epsilon_infinite_because": (
            None
            if accountant_delta > 0.0 and all(math.isfinite(e) for e in epsilons.values())
            else "the noise sampler's tail alone reaches delta"
            if accountant_delta <= 0.0
            else "no noise: not differentially private"
        ),
        # dp_accounting's sigma: noise std over one example's bound (C, or 2C with micro-batches), as privacy.json.
        "noise_multiplier": sigma,
        "noise_std_over_clip": None if sigma is None else sigma * o.clipping_factor,
        "microbatch_size": o.microbatch_size,
        # L2 sensitivity of the noised sum / C under the adjacency: the event carries noise_std_over_clip / this.
        "sensitivity_factor": solution.sensitivity_factor,
        "default_delta": A.DEFAULT_DELTA_RULE,
        "steps": sum(s.steps for s in segments),
        "segments": [s.to_json() for s in segments],
        "epsilon": {k: (v if math.isfinite(v) else None) for k, v in epsilons.items()},
        "target_epsilon": o.target_epsilon,
        "within_target": None if o.target_epsilon is None else epsilons[setup.primary] <= o.target_epsilon,
        "solved": solution.solved or None,
        "event": A.event_to_json(solution.event),
        "notes": setup.notes,
        "tan": _tan(segments, setup.delta) if o.tan else None,
        "simulation": None,
    }
    if o.simulate is not None:
        result["simulation"] = _simulation(o, solution, o.simulate)
    return result


def _simulation(o: _Options, solution: _Solution, simulate: int) -> dict[str, Any]:
    """TAN's cheap NON-PRIVATE simulation of the one constant segment at batch ``simulate`` (``--simulate``)."""
    from dpaudit import accounting as A

    n, segments = o.dataset_size, solution.segments
    if o.schedule_mode or n is None or solution.batch_size is None or len(segments) != 1:
        _fail("--simulate needs one constant segment with --dataset-size and --batch-size (or a solved batch).")
    if simulate > n:
        _fail(f"--simulate {simulate} is larger than --dataset-size {n}.")
    return A.tan_simulate(
        dataset_size=n,
        batch_size=solution.batch_size,
        noise_multiplier=segments[0].noise_multiplier,
        steps=segments[0].steps,
        simulated_batch_size=simulate,
    ).to_json()


def _plan(*, n, q, steps, epochs, schedule_file, batch_schedule, noise_decay, factor) -> _Plan:
    from dpaudit import accounting as A

    def checked(build: Callable[[float], list], where: str) -> Callable[[float], list]:
        def wrapped(sigma: float) -> list:
            try:
                return build(sigma)
            except ValueError as err:
                if isinstance(err, UserInputError):
                    raise
                raise UserInputError(f"{where}: {err}") from None

        return wrapped

    if schedule_file is not None:
        items = _load_schedule(schedule_file)
        if any("batch_size" in item for item in items) and n is None:
            _fail(f"--schedule {schedule_file}: batch_size needs --dataset-size/-N.")
        uses_sigma = any("noise_multiplier" not in item for item in items)

        def build(sigma: float) -> list:
            out = []
            for item in items:
                q_i = item["sampling_probability"] if "sampling_probability" in item else item["batch_size"] / n
                out.append(
                    A.Segment(
                        steps=item["steps"],
                        sampling_probability=q_i,
                        noise_multiplier=item.get("noise_multiplier", sigma),
                        sensitivity_factor=factor,
                    )
                )
            return out

        return _Plan(checked(build, f"--schedule {schedule_file}"), uses_sigma, f"schedule file {schedule_file}")
    if batch_schedule is not None:
        if n is None:
            _fail("--batch-schedule needs --dataset-size/-N (q = batch / N).")
        try:
            pairs = A.parse_batch_schedule(batch_schedule)
        except ValueError as err:
            _fail(str(err))
        return _Plan(
            checked(
                lambda s: A.batch_schedule_segments(
                    dataset_size=n, schedule=pairs, noise_multiplier=s, sensitivity_factor=factor
                ),
                "--batch-schedule",
            ),
            True,
            "batch-size schedule",
        )
    if noise_decay is not None:
        if epochs is None or q is None:
            _fail("--noise-decay needs --epochs and --batch-size or --sampling-probability.")
        sigmas = _decay(noise_decay, epochs)
        per_epoch = math.ceil(1.0 / q - 1e-9)
        return _Plan(
            checked(
                lambda s: A.noise_schedule_segments(
                    sampling_probability=q, steps_per_epoch=per_epoch, sigmas=sigmas(s), sensitivity_factor=factor
                ),
                "--noise-decay",
            ),
            True,
            f"noise decay {noise_decay}",
        )
    if epochs is not None and q is not None:
        steps = epochs * math.ceil(1.0 / q - 1e-9)
    if q is None or steps is None:
        return _Plan(lambda s: [], True, "incomplete")
    return _Plan(
        checked(
            lambda s: [A.Segment(steps=steps, sampling_probability=q, noise_multiplier=s, sensitivity_factor=factor)],
            "options",
        ),
        True,
        "constant",
    )


def _missing(*, plan: _Plan, q, steps, epochs, sigma, n) -> str | None:
    if plan.description != "incomplete":
        return "--noise-multiplier" if plan.uses_sigma and sigma is None else None
    gaps = []
    if q is None:
        gaps.append("--batch-size")
    if steps is None and epochs is None:
        gaps.append("--steps")
    if sigma is None:
        gaps.append("--noise-multiplier")
    if len(gaps) > 1:
        _fail(f"missing {' and '.join(gaps)}: at most one can be solved for (with --target-epsilon).")
    if gaps == ["--batch-size"] and n is None:
        _fail("solving for the batch size needs --dataset-size/-N.")
    if gaps == ["--batch-size"] and steps is None:
        _fail("solving for the batch size needs --steps (epochs depend on the batch size).")
    if gaps == ["--steps"] and sigma is None:
        _fail("missing --noise-multiplier.")
    return gaps[0] if gaps else None


def _tan(segments: list, delta: float) -> dict[str, Any]:
    from dpaudit import accounting as A

    return dataclasses.asdict(A.tan_report(segments, delta))


def _render(r: dict[str, Any]) -> str:
    lines = []
    head = (
        "Privacy accounting: Poisson sampling, add/remove-one adjacency"
        if r["sampling"] == "poisson"
        else "Privacy accounting: FIXED-SIZE sampling without replacement, replace-one adjacency"
    )
    lines.append(head)
    if r["dataset_size"] is not None:
        lines.append(f"  dataset size N       {_fmt_int(r['dataset_size'])}")
    lines.append(f"  delta                {format_up(r['delta'], 3)}")
    if r["noise_tail"] is not None and r["noise_tail"]["figure"] > 0:
        tail = r["noise_tail"]
        lines.append(
            f"  noise tail           {format_up(tail['figure'], 2)} inside delta (reach {tail['z_max']:g} sigma); "
            f"epsilon at delta - tail{'' if r['accountant_delta'] is not None else ' <= 0: none holds'}"
        )
    fixed = r["sampling"] != "poisson"
    if r["sensitivity_factor"] != 1.0:
        why = "replace-one: the accountant sees sigma / 2" if fixed else "noise std = sigma x this"
        lines.append(f"  sensitivity          {r['sensitivity_factor']:g}C ({why})")
    if r["noise_multiplier"] is not None:
        lines.append(
            f"  noise multiplier     sigma = {r['noise_multiplier']:.5g} (noise std / C = "
            f"{r['noise_std_over_clip']:.5g})"
        )
    for i, s in enumerate(r["segments"]):
        label = "schedule" if i == 0 else ""
        batch = (
            f" (batch {_fmt_int(round(s['sampling_probability'] * r['dataset_size']))})" if r["dataset_size"] else ""
        )
        lines.append(
            f"  {label:20s} {_fmt_int(s['steps'])} steps at q = {s['sampling_probability']:.4g}{batch}, "
            f"{'sigma / 2' if fixed else 'sigma'} = {s['noise_multiplier']:.5g}"
        )
    if len(r["segments"]) > 1:
        lines.append(f"  {'total steps':20s} {_fmt_int(r['steps'])}")
    solved = r["solved"] or {}
    if "noise_multiplier" in solved:
        lines.append(
            f"  calibrated sigma     {solved['noise_multiplier']:.6g}  (smallest within epsilon "
            f"{r['target_epsilon']:g}, to a relative tolerance)"
        )
    if "steps" in solved:
        lines.append(f"  most steps           {_fmt_int(solved['steps'])}  (within epsilon {r['target_epsilon']:g})")
    if "batch_size" in solved:
        lines.append(
            f"  largest batch        {_fmt_int(solved['batch_size'])}  (within epsilon {r['target_epsilon']:g})"
        )
    for name, value in r["epsilon"].items():
        text = (
            format_up(value, 5)
            if value is not None
            else (
                "inf (no noise: not differentially private)"
                if r["accountant_delta"] is not None
                else "inf (the noise sampler's tail alone reaches delta)"
            )
        )
        lines.append(f"  {'epsilon (' + name.upper() + ')':20s} {text}")
    if r["within_target"] is not None:
        lines.append(
            f"  target epsilon       {r['target_epsilon']:g}: {'within budget' if r['within_target'] else 'EXCEEDED'}"
        )
    if r["tan"] is not None:
        t = r["tan"]
        eps = "inf" if t["epsilon_tan"] is None else format_up(t["epsilon_tan"], 5)
        lines.append(
            f"  TAN                  eta = {t['eta']:.5g}, eps_TAN = {eps} (an approximation; PLD is the claim)"
        )
        if t["warning"]:
            lines.append(f"  warning: {t['warning']}")
    if r["simulation"] is not None:
        s = r["simulation"]
        lines.append(
            f"  TAN simulation       batch {_fmt_int(s['simulated_batch_size'])}, sigma = "
            f"{s['simulated_noise_multiplier']:.5g}, {_fmt_int(s['steps'])} steps, eta_step = "
            f"{s['eta_step']:.4g}, {s['compute_saving']:.4g}x cheaper"
        )
        lines.append(f"  {s['label']}")
    for note in r["notes"]:
        lines.append(f"  {note}" if note.startswith("warning:") else f"  note: {note}")
    lines.append("  (printed epsilon and delta are rounded up)")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(account())
