"""The claim of a model trained with Opacus: its accountant's history, accounted here.

Opacus's accountants (RDP, PRV, GDP) keep a ``history`` of (noise multiplier, sample rate, steps): what its DP-SGD ran
and assumed (Poisson sampling, per-example clipping to C, noise std sigma C, add/remove adjacency). dpaudit reads that
history from the accountant's saved ``state_dict()`` and accounts it by PLD itself, so the epsilon it tests is
computed here, and the claim states its mechanism (its segments) like a dpaudit run's.
"""

from __future__ import annotations

import os
from pathlib import Path

from dpaudit.claim.claim import Claim
from dpaudit.common.errors import UserInputError

__all__ = ["opacus_claim", "opacus_history"]


def opacus_history(path: str | os.PathLike[str]) -> list[tuple[float, float, int]]:
    """The ``history`` of an Opacus accountant's saved state: ``[(noise_multiplier, sample_rate, steps), ...]``.

    The file is ``json.dump(accountant.state_dict(), f)`` or ``torch.save(accountant.state_dict(), path)`` (read
    with ``weights_only=True``: plain numbers and lists only, never an arbitrary pickle).

    Raises:
        UserInputError: unreadable, or not an accountant's state.
    """
    import json

    where = f"--claimed-from-opacus {path}"
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        try:
            import torch

            state = torch.load(path, weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable file is one line
            raise UserInputError(
                f"{where}: neither JSON nor a torch-saved state dict ({type(err).__name__}); save it "
                "with json.dump(accountant.state_dict(), f)."
            ) from None
    except OSError as err:
        raise UserInputError(f"{where}: cannot read it ({err.strerror or err}).") from None
    except ValueError as err:
        raise UserInputError(f"{where}: not valid JSON ({err}).") from None
    history = state.get("history") if isinstance(state, dict) else None
    if not isinstance(history, (list, tuple)) or not history:
        raise UserInputError(
            f"{where}: no 'history' of (noise_multiplier, sample_rate, steps); pass the state_dict() "
            "of an Opacus RDP, PRV or GDP accountant after training."
        )
    rows: list[tuple[float, float, int]] = []
    for i, row in enumerate(history):
        try:
            sigma, q, steps = row
            rows.append((float(sigma), float(q), int(steps)))
        except (TypeError, ValueError):
            raise UserInputError(
                f"{where}: history entry {i} is {row!r}, not (noise_multiplier, sample_rate, steps)."
            ) from None
    return rows


def opacus_claim(path: str | os.PathLike[str], delta: float) -> Claim:
    """The claim of a model trained with Opacus, from its accountant's history: Poisson-sampled Gaussian steps
    (what Opacus's DP-SGD runs and its accountants assume: add/remove adjacency, one example's clipped gradient of
    norm at most C, noise std sigma C), accounted here by PLD at ``delta`` (not copied from Opacus)."""
    from dpaudit import accounting
    from dpaudit.accounting.segment import Segment
    from dpaudit.common.figures import format_up

    try:
        segments = [
            Segment(steps=steps, sampling_probability=q, noise_multiplier=sigma)
            for sigma, q, steps in opacus_history(path)
        ]
    except ValueError as err:
        raise UserInputError(f"--claimed-from-opacus {path}: {err}") from None
    event = accounting.schedule_event(segments)
    epsilon = float(accounting.epsilon(event, delta))
    steps = sum(s.steps for s in segments)
    return Claim(
        known=True,
        private=True,
        source="opacus",
        epsilon=epsilon,
        recorded_epsilon=epsilon,
        delta=float(delta),
        accountant="pld",
        sampling="poisson",
        segments=tuple(segments),
        guarantee=(
            f"({format_up(epsilon)}, {format_up(delta, 2)})-DP for one example (add/remove), accounted by dpaudit "
            f"(PLD) from the Opacus accountant's history in {path}: {steps} Poisson-sampled "
            "Gaussian steps. It holds if the training ran what that history says (per-example "
            "clipping, Poisson sampling, secret noise); dpaudit did not see the training."
        ),
    )
