"""Fixture attack directories for the report tests, built from synthetic typed results (no model is trained).

``make_attack_dir`` writes a fake inject directory (canaries.jsonl), a fake train directory
(metrics.jsonl, privacy.json) and an attack directory through the product's own
``write_attack_dir``, with exposure and reconstruction results by frequency and, optionally, a
membership-inference result holding :class:`dpaudit.audit.AuditResult` objects made by
``audit_scores`` on synthetic Gaussian scores (the shape the membership attacks store).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from dpaudit.attacks.results import (
    AttackResult,
    AttackResults,
    CanaryScore,
    DataInfo,
    ExposureParameters,
    ExposureResult,
    ExposureRow,
    JsonRecord,
    ModelInfo,
    ReconstructionParameters,
    ReconstructionResult,
    ReconstructionRow,
    register_result,
)
from dpaudit.audit import AuditResult, audit_scores
from dpaudit.audit.intervals import (
    bootstrap_interval,
    clopper_pearson,
    mann_whitney_greater,
)
from dpaudit.claim import Claim
from dpaudit.claim.record import PrivacyRecord
from dpaudit.files.run_dirs import sha256_file
from dpaudit.stages.attack import write_attack_dir

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
#: Would leave a visible trace in the DOM if it ever ran (the browser test looks for it).
MUTATE = "<script>document.documentElement.setAttribute('data-pwned','1')</script>"


@dataclass(frozen=True, kw_only=True)
class FixtureTask(JsonRecord):
    task: str
    audit: AuditResult
    info: dict = field(default_factory=dict)  # as MiaTaskResult.info: the canaries' frequencies give the unit


@register_result
@dataclass(frozen=True, kw_only=True)
class FixtureMembershipResult(AttackResult):
    """A membership-inference-like result: one AuditResult per task (as the MIA attacks store)."""

    attack: ClassVar[str] = "fixture-loss"
    tasks: tuple[FixtureTask, ...] = ()


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")


def make_attack_dir(
    root: Path,
    name: str = "attack",
    *,
    n_canaries: int = 40,
    frequencies=(1, 2, 4, 16),
    epsilon: float | None = 2.0,
    strength: float = 1.0,
    mia: bool = True,
    evil: bool = True,
    metrics: bool = True,
    seed: int = 0,
    coin_flip: bool = True,
    shuffle: bool = False,
    noise_seed: int | None = None,
    scale_from_private: bool = False,
    evaluation: dict | None = None,
    train_summary: dict | None = None,
) -> Path:
    """Write inject/, train/ and an attack directory under ``root``; return the attack directory.

    The membership result has an examples task (heuristic), a canaries task of the fixture's
    frequencies (a group bound) and, with ``coin_flip``, a coin-flip canaries task inserted once (a
    proof). ``shuffle`` writes a shuffle run's privacy.json (no proven epsilon) while the results still
    carry ``epsilon`` as a claim (as results written before shuffle runs were marked did);
    ``noise_seed`` puts ``--noise-seed`` verbatim in the train manifest (as older manifests did);
    ``scale_from_private`` records eDP-SGD per-layer clip norms computed on private data; ``evaluation`` adds its
    keys (held-out figures, their baselines) to every 50th metrics row, as a trainer's evaluation rows carry them;
    ``train_summary`` is the train manifest's ``summary``.
    """
    rng = np.random.default_rng(seed)
    inject, train, out = root / f"{name}-data", root / f"{name}-model", root / name
    inject.mkdir(parents=True)
    (train / "model").mkdir(parents=True)
    log2_r = 4 * np.log2(10)
    freqs = [0] * (n_canaries // (len(frequencies) + 1))
    freqs += [f for f in frequencies for _ in range((n_canaries - len(freqs)) // len(frequencies))]
    freqs += [0] * (n_canaries - len(freqs))
    canary_rows, scores = [], []
    for i, f in enumerate(freqs):
        secret = f"{rng.integers(0, 10_000):04d}"
        prefix = f"person{i}'s account number is "
        if evil and i == 0:
            prefix, secret = f"{SCRIPT} {IMG} {MUTATE} account ", SCRIPT
        exp = float(np.clip(rng.normal(1.0 + strength * np.log2(1 + f) * 2.5, 1.0), 0, log2_r))
        rank = max(1, round(2 ** (log2_r - exp)))
        exact = rank == 1
        fill = secret if exact else f"{rng.integers(0, 10_000):04d}"
        if evil and i == 1:
            fill = IMG
        dist = 0 if exact else int(rng.integers(1, 5))
        canary_rows.append(
            {
                "id": f"c{i:04d}",
                "prefix": prefix,
                "secret": secret,
                "suffix": ".",
                "text": prefix + secret + ".",
                "format": "digits:4",
                "frequency": f,
                "member": f > 0,
            }
        )
        scores.append(
            CanaryScore(
                id=f"c{i:04d}",
                frequency=f,
                secret=secret,
                fill=fill,
                exact=exact,
                edit_distance=dist,
                normalized_edit_distance=dist / 4,
                rank_low=rank,
                rank_high=rank + (i % 3 == 0 and not exact),
                rank_method="meet-in-the-middle",
                exposure_low=float(log2_r - np.log2(rank + (i % 3 == 0 and not exact))),
                exposure_high=float(log2_r - np.log2(rank)),
            )
        )
    _write_jsonl(inject / "canaries.jsonl", canary_rows)
    (inject / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "dpaudit.inject/1",
                "dpaudit_version": "0.1.0",
                "command": ["dpaudit", "inject", "--corpus", f"line {SCRIPT} {IMG}"],
                "config": {"template": f"{IMG} {{name}}"},
                "seed": 1,
                "inputs": {},
                "outputs": {},
            }
        )
    )
    by_f: dict[int, list[CanaryScore]] = {}
    for c in scores:
        by_f.setdefault(c.frequency, []).append(c)
    controls = np.array([c.exposure_low for c in by_f[0]])
    control_ned = np.array([c.normalized_edit_distance for c in by_f[0]])
    exp_rows, rec_rows = [], []
    for f in sorted(by_f):
        x = np.array([c.exposure_low for c in by_f[f]])
        ned = np.array([c.normalized_edit_distance for c in by_f[f]])
        hits = sum(bool(c.exact) for c in by_f[f])
        test = None if f == 0 else mann_whitney_greater(x, controls)
        exp_rows.append(
            ExposureRow(
                frequency=f,
                n=x.size,
                mean=float(x.mean()),
                mean_ci=bootstrap_interval(x, seed=0),
                median=float(np.median(x)),
                median_ci=None,
                max=float(x.max()),
                vs_controls=test,
            )
        )
        rec_rows.append(
            ReconstructionRow(
                frequency=f,
                n=x.size,
                exact_matches=hits,
                exact_match_rate=hits / x.size,
                exact_match_ci=clopper_pearson(hits, x.size),
                edit_distance_mean=float(ned.mean() * 4),
                normalized_edit_distance_mean=float(ned.mean()),
                normalized_edit_distance_ci=bootstrap_interval(ned, seed=0),
                top_k_hits=None,
                vs_controls=None if f == 0 else mann_whitney_greater(-ned, -control_ned),
            )
        )
    attacks: list[AttackResult] = [
        ExposureResult(
            parameters=ExposureParameters(
                secret_format="digits:4", log2_space_size=float(log2_r), reveal=0, tolerance=1e-9
            ),
            rows=tuple(exp_rows),
        ),
        ReconstructionResult(
            parameters=ReconstructionParameters(secret_format="digits:4", reveal=0, top_k=None, fill="argmax"),
            rows=tuple(rec_rows),
            warnings=(f"fixture warning {SCRIPT}",),
        ),
    ]
    delta = 1e-5
    if mia:
        tasks = []
        specs = [
            ("examples", 0.4 * strength, 2000, False, {}),
            (f"canaries {IMG}", 1.5 * strength, 40, False, {"frequencies": [f for f in frequencies if f > 0]}),
        ]
        if coin_flip:
            specs.append(("coin-flip canaries", 1.2 * strength, 100, True, {"frequencies": [1]}))
        for task, shift, n, flip, info in specs:
            member = rng.normal(shift, 1.0, n)
            nonmember = rng.normal(0.0, 1.0, n)
            tasks.append(
                FixtureTask(
                    task=task,
                    info=info,
                    audit=audit_scores(
                        member,
                        nonmember,
                        delta=delta,
                        claimed_epsilon=epsilon,
                        seed=0,
                        num_bootstrap=200,
                        coin_flip=flip,
                    ),
                )
            )
        attacks.append(FixtureMembershipResult(tasks=tuple(tasks)))
    steps = np.arange(1, 41) * 5
    metric_rows = [
        {
            "step": int(s),
            "loss": float(6 * np.exp(-s / 80) + 1),
            "train_mlm_accuracy": float(1 - np.exp(-s / 90)),
            "grad_snr": float(3 / (1 + s / 50)) if epsilon else None,
            "telemetry_private": True,
            **({"epsilon": float((epsilon or 0) * s / steps[-1])} if s % 50 == 0 and epsilon else {}),
            **(evaluation if evaluation and s % 50 == 0 else {}),
        }
        for s in steps
    ]
    if metrics:
        _write_jsonl(train / "metrics.jsonl", metric_rows)
    event = None
    if epsilon is not None:  # any real event: the report shows the recorded figures, the claim comes from results
        from dp_accounting import dp_event

        from dpaudit.accounting import event_to_json

        event = event_to_json(
            dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 200)
        )
    record = PrivacyRecord(
        trainer="jax-bert",
        private=epsilon is not None,
        privacy_unit="example (add/remove)",
        sampling="shuffle" if shuffle else "poisson",
        mechanism="DP-SGD",
        event=event,
        delta=1e-5 if epsilon is not None else None,
        accountant="pld" if epsilon is not None else None,
        telemetry="telemetry is NOT covered by the epsilon",
        epsilon=None if shuffle else epsilon,
        epsilon_if_poisson=epsilon if shuffle else None,
        details={
            "mode": "edp-sgd",
            "layer_clip_norms_from": "train.jsonl (private; the values are in manifest.json only)",
        }
        if scale_from_private
        else {},
    )
    (train / "privacy.json").write_text(json.dumps(record.to_json()))  # through the product's own writer
    (train / "model" / "model.safetensors").write_bytes(b"weights")
    (train / "manifest.json").write_text(
        json.dumps(
            {
                "schema": "dpaudit.train/1",
                "dpaudit_version": "0.1.0",
                "command": [
                    "dpaudit",
                    "train",
                    "--trainer",
                    "jax-bert",
                    *([] if noise_seed is None else ["--noise-seed", str(noise_seed)]),
                ],
                "config": {
                    "trainer": "jax-bert",
                    "noise_multiplier": 1.1,
                    **({} if noise_seed is None else {"noise_seed": noise_seed}),
                },
                "seed": 0,
                "inputs": {},
                "outputs": {},
                "tokenizer_trained_on": "public.jsonl",
                **({"summary": train_summary} if train_summary is not None else {}),
            }
        )
    )
    claimed = (
        Claim(
            known=True,
            private=True,
            epsilon=epsilon,
            recorded_epsilon=epsilon,
            delta=delta,
            accountant="pld",
            guarantee=f"({epsilon}, {delta})-DP per example",
        )
        if epsilon is not None
        else Claim(known=True, private=False, guarantee="non-private: epsilon = inf.")
    )
    results = AttackResults(
        model=ModelInfo(path=str(train), kind="masked-lm", architecture="BertForMaskedLM"),
        data=DataInfo(
            path=str(inject),
            secret_format="digits:4",
            log2_space_size=float(log2_r),
            canaries=len(freqs),
            controls=freqs.count(0),
            template=f"{{name}} {IMG}",
        ),
        claimed=claimed,
        attacks=tuple(attacks),
        warnings=(f"a canary shares context {SCRIPT}",),
        canaries=tuple(scores),
    )
    inputs = {
        str(train / "model" / "model.safetensors"): sha256_file(train / "model" / "model.safetensors"),
        str(train / "privacy.json"): sha256_file(train / "privacy.json"),
        str(inject / "canaries.jsonl"): sha256_file(inject / "canaries.jsonl"),
    }
    if metrics:
        inputs[str(train / "metrics.jsonl")] = sha256_file(train / "metrics.jsonl")
    write_attack_dir(
        out,
        results,
        config={"attacks": [a.attack for a in attacks], "note": IMG},
        inputs=inputs,
        seed=seed,
        overwrite=False,
        command=[
            "dpaudit",
            "attack",
            "--out",
            str(out),
            SCRIPT,
            *([] if noise_seed is None else [f"--noise-seed={noise_seed + 1}"]),
        ],
    )
    return out


@pytest.fixture(scope="session")
def make_attack():
    """Factory: ``make_attack(root, name, **options)`` -> a fixture attack directory."""
    return make_attack_dir


@pytest.fixture(scope="session")
def attack_dir(tmp_path_factory) -> Path:
    """One fixture attack directory (40 canaries, MIA results, telemetry), read-only for tests."""
    return make_attack_dir(tmp_path_factory.mktemp("report"), "eps2")


class HtmlTags(HTMLParser):
    """Every start tag of a page with its attributes, and its text (the report tests read pages through it)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture
def parse_html() -> Callable[[str], HtmlTags]:
    """``parse_html(html)`` -> :class:`HtmlTags` of the page."""

    def parse(html: str) -> HtmlTags:
        parser = HtmlTags()
        parser.feed(html)
        return parser

    return parse


def split_attack_dir(attack: Path, root: Path) -> tuple[Path, Path]:
    """Two attack directories of ``attack``'s model, as a user makes by attacking it twice: its exposure and
    reconstruction results in one, its membership result in the other (same model files in both manifests)."""
    import dataclasses

    from dpaudit.attacks.run import read_attack_dir
    from dpaudit.files.run_dirs import load_manifest

    results, inputs = read_attack_dir(attack), load_manifest(attack)["inputs"]
    canary = tuple(a for a in results.attacks if a.attack in ("exposure", "reconstruction"))
    member = tuple(a for a in results.attacks if a.attack not in ("exposure", "reconstruction"))
    out = []
    for name, attacks in (("canary-attack", canary), ("membership-attack", member)):
        out.append(
            write_attack_dir(
                root / name,
                dataclasses.replace(results, attacks=attacks),
                config={},
                inputs=inputs,
                seed=0,
                overwrite=False,
                command=["dpaudit", "attack", "--out", name],
            )
        )
    return out[0], out[1]


@pytest.fixture(scope="session")
def models_page(attack_dir, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """A comparison page (``dpaudit report`` through the CLI) of three models, read-only for tests: the ``eps2`` model
    of :func:`attack_dir` attacked twice (canary attacks in one directory, membership in another: one model, one
    row), ``nonprivate`` (labelled "non-private" with --label) and ``eps8``, whose canaries sit with the controls."""
    from click.testing import CliRunner

    from dpaudit.cli import cli

    root = tmp_path_factory.mktemp("models")
    canary, member = split_attack_dir(attack_dir, root)
    dirs = {
        "eps2-canary": canary,
        "eps2-membership": member,
        "nonprivate": make_attack_dir(
            root,
            "nonprivate",
            epsilon=None,
            evil=False,
            seed=1,
            strength=2.0,
            mia=False,
            evaluation={"mlm_accuracy": 0.45, "heldout_mlm_accuracy_baseline": 0.05},
        ),
        "eps8": make_attack_dir(root, "eps8", epsilon=8.0, evil=False, seed=2, strength=0.0, mia=False),
    }
    page = root / "page.html"
    args = [
        "report",
        *(str(d) for d in dirs.values()),
        "--label",
        f"non-private={dirs['nonprivate']}",
        "--out",
        str(page),
    ]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return page, dirs
