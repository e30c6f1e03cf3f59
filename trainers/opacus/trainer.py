"""``dpaudit train --trainer opacus``: a Hugging Face classifier (or your own model) trained with Opacus.

The run is Opacus's documented DP-SGD (:mod:`.loop`: ``PrivacyEngine.make_private`` with Poisson sampling, hooks
per-example gradients, flat clipping; the sigma given, or calibrated by Opacus's ``get_noise_multiplier``), on the
inject directory's training rows (a BERT classifier of ``--preset``, its WordPiece tokenizer learned on
``public.jsonl``) or on what ``--setup FILE.py:build`` returns. dpaudit writes the run directory (``model/``,
``metrics.jsonl``, ``privacy.json``, ``manifest.json``, staged then renamed: nothing half-written) and a
``privacy.json`` with dpaudit's accounting of what ran beside Opacus's own claim (:mod:`.privacy`); a mismatch
between them is printed. The trainer is audited white-box through the library's own gradient path
(:class:`dpaudit.training.gradient_path.GradientPathHost`; ``docs/auditing.md``). It does not run on dpaudit's run
skeleton: Opacus owns sampling, clipping, noise and accounting, which is what is under audit.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.opacus.config import OpacusConfig
from dpaudit.trainers.opacus.loop import LibrarySetup, OpacusRun, PrivacySettings, run_opacus
from dpaudit.training.api import TrainResult

__all__ = ["OpacusTrainer"]

#: The contract suite's run: a 2-layer BERT classifier, 4 updates of 16-example batches.
TINY_SETTINGS: dict[str, Any] = {"noise_multiplier": 1.0, "batch_size": 16, "steps": 4, "max_length": 16}


@dataclass
class _Built:
    setup: LibrarySetup
    tokenizer: Any = None
    inputs: dict[str, str] | None = None
    rows: int = 0


def _inject_setup(data_dir: Path, config: OpacusConfig, seed: int) -> _Built:
    """A BERT classifier of ``config.preset`` on the inject directory's training rows (Adam or SGD over it)."""
    from dpaudit.trainers.torch_common.data import encode, load_inject_dir
    from dpaudit.trainers.torch_common.model import build_model, special_ids
    from dpaudit.training.tokenizer import train_wordpiece

    data = load_inject_dir(Path(data_dir), task="classify")
    tokenizer = train_wordpiece(data.public.texts, vocab_size=config.vocab_size)
    model = build_model(
        "classify",
        preset=config.preset,
        vocab_size=tokenizer.get_vocab_size(),
        max_length=config.max_length,
        label_names=data.label_names,
        seed=seed,
        specials=special_ids(tokenizer, where=str(data_dir)),
    )
    encoded = encode(tokenizer, list(data.train.texts), max_length=config.max_length)
    mask = (torch.arange(config.max_length)[None, :] < encoded.lengths[:, None]).long()
    labels = torch.as_tensor(data.label_ids["train"], dtype=torch.long)
    dataset = torch.utils.data.TensorDataset(encoded.input_ids, mask, labels)
    loader = torch.utils.data.DataLoader(dataset, batch_size=config.batch_size)
    # As Opacus's BERT tutorial does: the embeddings stay frozen (their position and token-type tables are looked up
    # with a batch of one, which per-example hooks cannot attribute), the encoder, pooler and head train.
    for p in model.bert.embeddings.parameters():
        p.requires_grad_(False)
    for module in model.modules():  # dropout off, as in every dpaudit trainer (Opacus needs training mode)
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if config.peft == "lora":
        model = with_lora(model, config.lora_rank)
    cls = torch.optim.Adam if config.optimizer == "adam" else torch.optim.SGD
    optimizer = cls([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate)
    setup = LibrarySetup(model, optimizer, loader, canary_inputs=_first_position)
    return _Built(setup, tokenizer, dict(data.inputs), len(dataset))


def _first_position(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask cut to their first position (a canary-only batch's model inputs)."""
    return input_ids[:, :1].contiguous(), attention_mask[:, :1].contiguous()


def with_lora(model: Any, rank: int) -> Any:
    """``model`` with LoRA adapters (peft) of rank ``rank`` on every attention query and value, the classifier head
    trained beside them and everything else frozen (peft's sequence-classification recipe)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise UserInputError("--peft lora needs peft: pip install 'dpaudit[peft]'.") from None
    config = LoraConfig(
        task_type="SEQ_CLS", r=rank, lora_alpha=2 * rank, target_modules=["query", "value"], lora_dropout=0.0
    )
    return get_peft_model(model, config)


def _sigma(config: OpacusConfig, sample_rate: float, delta: float) -> float:
    """The noise multiplier: given, or Opacus's calibration for ``target_epsilon`` (its accountant, its tolerance)."""
    if config.noise_multiplier is not None:
        return float(config.noise_multiplier)
    from opacus.accountants.utils import get_noise_multiplier

    assert config.target_epsilon is not None
    return float(
        get_noise_multiplier(
            target_epsilon=config.target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            steps=config.steps,
            accountant=config.accountant,
        )
    )


def _save_model(folder: Path, model: Any, tokenizer: Any) -> None:
    if hasattr(model, "merge_and_unload"):  # LoRA: the adapters merged into the model, which reloads as it is
        model = model.merge_and_unload()
    if tokenizer is not None:
        from dpaudit.trainers.torch_common.hf_export import save_hf

        save_hf(folder, model, tokenizer)
        return
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))


class OpacusTrainer:
    """The ``opacus`` trainer (entry point ``dpaudit.trainers``)."""

    name: ClassVar[str] = "opacus"
    Config: ClassVar[type] = OpacusConfig
    library: ClassVar[str] = "opacus"

    def tiny_config(self, **overrides: Any) -> OpacusConfig:
        settings = {**TINY_SETTINGS, **overrides}
        if overrides.get("target_epsilon") is not None and "noise_multiplier" not in overrides:
            settings["noise_multiplier"] = None  # a target alone: Opacus calibrates sigma
        return OpacusConfig(**settings)

    def check_setup(self, spec: str) -> None:
        """Import ``--setup``'s file, call its function and check what it returns (a one-line error otherwise)."""
        from dpaudit.trainers.opacus.setup_file import load_setup

        load_setup(spec)

    def train(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> TrainResult:
        run, record = self._run(Path(data_dir), Path(out_dir), config, seed=seed, gains=None)
        return TrainResult(
            out_dir=Path(out_dir),
            steps=run.updates,
            epsilon=record.epsilon,
            delta=record.delta,
            final_loss=run.losses[-1] if run.losses else None,
            summary={"library_epsilon": run.library_epsilon, "claims_agree": record.details["library"]["agrees"]},
        )

    def train_with_gradient_canaries(
        self, data_dir: Path | None, out_dir: Path, config: Any, *, gains: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One run hosting canaries through Opacus's own gradient path (:class:`.canary_layer.CanaryLayer`)."""
        run, _ = self._run(data_dir, Path(out_dir), config, seed=seed, gains=np.asarray(gains, dtype=np.float64))
        assert run.observations is not None and run.final is not None
        return run.observations, run.final

    def _run(
        self, data_dir: Path | None, out: Path, config: OpacusConfig, *, seed: int, gains: np.ndarray | None
    ) -> tuple[OpacusRun, Any]:
        from dpaudit.accounting.guarantees import default_delta
        from dpaudit.files.run_dirs import prepare_output_dir, staged_directory, write_jsonl
        from dpaudit.trainers.library_record import refuse_unsupported_options
        from dpaudit.trainers.opacus.privacy import build_record
        from dpaudit.training.train_dir import finish_run

        prepare_output_dir(out, overwrite=False)  # a bad --out is refused before anything trains
        refuse_unsupported_options(
            config,
            trainer="opacus",
            library="Opacus",
            takes_q="Opacus takes q from the real rows (1 / batches per epoch)",
        )
        if config.setup is not None:
            from dpaudit.trainers.opacus.setup_file import load_setup

            built = _Built(load_setup(config.setup), inputs={})
            built.rows = len(built.setup.loader.dataset)  # type: ignore[arg-type]
            batch = None
        else:
            if data_dir is None:
                raise UserInputError("--data is required unless --setup FILE.py:build gives the training data.")
            built = _inject_setup(data_dir, config, seed)
            batch = config.batch_size
        rows = built.rows + (0 if gains is None else len(gains))
        if batch is not None and batch > rows:
            raise UserInputError(
                f"--batch-size {batch} is larger than the {rows} training rows; choose a smaller batch size."
            )
        q_user = (built.setup.loader.batch_size or 1) / max(1, built.rows)
        expected = batch if batch is not None else max(1, round(q_user * rows))
        sample_rate = 1.0 / math.ceil(rows / expected)
        delta = config.delta if config.delta is not None else default_delta(rows)
        sigma = _sigma(config, sample_rate, delta)
        settings = PrivacySettings(
            noise_multiplier=sigma,
            clip_norm=config.clip_norm,
            steps=config.steps,
            delta=delta,
            accountant=config.accountant,
            grad_sample_mode=config.grad_sample_mode,
            noise_seed=config.noise_seed,
            physical_batch=config.physical_batch,
        )
        from opacus.validators.errors import UnsupportedModuleError

        try:
            run = run_opacus(built.setup, settings, gains=gains, batch_size=batch)
        except (ValueError, NotImplementedError, UnsupportedModuleError) as err:
            if config.setup is None:
                raise
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserInputError(
                f"--setup {config.setup}: Opacus refuses the model ({first}); make it Opacus-compatible "
                "(opacus.validators.ModuleValidator.fix(model)) and build the optimizer after that."
            ) from None
        record = build_record(
            run,
            delta=delta,
            accountant=config.accountant,
            grad_sample_mode=config.grad_sample_mode,
            clipping="flat",
            target_epsilon=config.target_epsilon,
            noise_seed_explicit=config.noise_seed is not None,
            extra={
                **({"setup": config.setup} if config.setup else {}),
                **(
                    {"trained": f"LoRA adapters (rank {config.lora_rank}, query and value) and the head"}
                    if config.peft == "lora" and not config.setup
                    else {}
                ),
            }
            or None,
        )
        if not record.details["library"]["agrees"]:
            print(f"opacus: {record.notes[0]}", file=sys.stderr)
        public = config.to_dict()  # the noise seed redacted
        with staged_directory(out, overwrite=False) as stage:
            _save_model(stage / "model", run.model, built.tokenizer)
            write_jsonl(stage / "metrics.jsonl", [{"step": i + 1, "loss": v} for i, v in enumerate(run.losses)])
            finish_run(stage, trainer=self.name, config=public, seed=seed, inputs=built.inputs or {}, record=record)
        return run, record
