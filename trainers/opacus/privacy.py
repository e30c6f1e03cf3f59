"""``privacy.json`` of an Opacus run: the library's own claim beside dpaudit's recomputation of what ran.

Opacus's accountant (PRV by default, RDP or GDP as configured) keeps a history of (noise multiplier, sample rate,
steps) that its optimizer hook appends to; its epsilon is what an Opacus user is told. dpaudit does not copy it: the
record's event and epsilon are accounted here (PLD, :mod:`dpaudit.accounting`) from the mechanism that ran, read off
the objects that ran (the data loader's sampler and its rate, the optimizer updates counted by a hook on the
wrapped optimizer's own step, the noise multiplier the optimizer used). The library's claim (its history, epsilon
and accountant) is stored beside it in ``details.library``; when the two mechanisms differ (another sampler, another
rate, steps counted per micro-step, another sigma) the record says so in ``details.library.agrees`` and a note, and
the trainer prints it. The record itself is built by the library trainers' shared
:mod:`dpaudit.trainers.library_record`. See ``docs/trainers.md`` ("opacus").
"""

from __future__ import annotations

from typing import Any

from dpaudit.claim.record import PrivacyRecord
from dpaudit.trainers.library_record import LibraryRun, build_library_record, library_mismatches
from dpaudit.trainers.opacus.loop import OpacusRun

__all__ = ["build_record", "library_run", "mismatches"]


def library_run(run: OpacusRun) -> LibraryRun:
    """The facts of an Opacus run in the shared shape of :mod:`dpaudit.trainers.library_record`."""
    return LibraryRun(
        library="opacus",
        version=run.library_version,
        accountant="",
        library_epsilon=run.library_epsilon,
        history=list(run.history),
        updates=run.updates,
        sample_rate=run.sample_rate,
        dataset_size=run.dataset_size,
        noise_multiplier=run.noise_multiplier,
        clip_norm=run.clip_norm,
        normalizer=run.normalizer,
        sampling="poisson" if run.poisson else "non-poisson",
    )


def mismatches(run: OpacusRun) -> list[str]:
    """How the library's accounted mechanism differs from the one that ran (empty: they agree)."""
    return library_mismatches(library_run(run), name="Opacus")


def build_record(
    run: OpacusRun,
    *,
    delta: float,
    accountant: str,
    grad_sample_mode: str,
    clipping: str,
    target_epsilon: float | None,
    noise_seed_explicit: bool,
    extra: dict[str, Any] | None = None,
) -> PrivacyRecord:
    """The record of a finished Opacus run (dpaudit's accounting of what ran, the library's claim beside it)."""
    facts = library_run(run)
    facts.accountant = accountant
    return build_library_record(
        facts,
        trainer="opacus",
        display="Opacus",
        delta=delta,
        mechanism=(
            f"Opacus {run.library_version} DP-SGD (PrivacyEngine.make_private, grad_sample_mode {grad_sample_mode}, "
            f"{clipping} clipping to C = {run.clip_norm:g}): "
            + ("Poisson" if run.poisson else "non-Poisson")
            + f" sampling at q = {run.sample_rate:g}, Gaussian noise of std sigma C on the clipped sum, divided by "
            f"the expected batch size {run.normalizer:g}."
        ),
        randomness=(
            "sampling and noise from torch generators seeded by --noise-seed (explicit: reproducible, secret only as "
            "long as the seed is)"
            if noise_seed_explicit
            else "sampling and noise from torch generators seeded from OS entropy (secret, never written)"
        ),
        noise_seed_explicit=noise_seed_explicit,
        target_epsilon=target_epsilon,
        library_details={"grad_sample_mode": grad_sample_mode, "clipping": clipping},
        notes=[
            "caveat: the noise is torch.normal's float sampler, not characterised: its tail is not counted in delta."
        ],
        extra=extra,
        public_parameters=f"q = {run.sample_rate:g} from Opacus's DPDataLoader (1 / batches per epoch) over N = "
        f"{run.dataset_size}; N is treated as public.",
    )
