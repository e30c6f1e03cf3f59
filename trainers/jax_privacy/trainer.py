"""``dpaudit train --trainer jax-privacy``: jax-bert's Flax BERT masked LM (or your own JAX model) trained with JAX
Privacy 2.0's DP-SGD.

The run is composed of JAX Privacy's own components as its documentation shows them (:mod:`.loop`: a batch
selection strategy, Poisson or fixed-size; ``clipped_grad``; ``gaussian_privatizer``; its accountant), on the inject
directory's training rows (jax-bert's :class:`~dpaudit.trainers.jax_bert.model.FlaxBertForMaskedLM` of
``--preset``, its WordPiece tokenizer learned on ``public.jsonl``, each row masked once by the public ``--seed``) or
on what ``--setup FILE.py:build`` returns. dpaudit writes the run directory (``model/``, ``metrics.jsonl``,
``privacy.json``, ``manifest.json``, staged then renamed: nothing half-written), with dpaudit's accounting of what
ran beside JAX Privacy's own claim (:mod:`.privacy`); a mismatch between them is printed. The trainer is audited
white-box through the library's own gradient path (:class:`dpaudit.training.gradient_path.GradientPathHost`,
:mod:`.canary`; ``docs/auditing.md``). It does not run on dpaudit's run skeleton: JAX Privacy owns sampling,
clipping, noise and accounting, which is what is under audit.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.jax_privacy.config import JaxPrivacyConfig
from dpaudit.trainers.jax_privacy.loop import JaxPrivacyRun, JaxSetup, Settings, run_jax_privacy
from dpaudit.training.api import TrainResult

__all__ = ["JaxPrivacyTrainer"]

#: The contract suite's run: a 2-layer Flax BERT masked LM, 4 updates of 16-example batches.
TINY_SETTINGS: dict[str, Any] = {"noise_multiplier": 1.2, "batch_size": 16, "steps": 4, "max_length": 16}
#: The masked-LM recipe of the inject path (BERT's: 15% of the tokens, at most this many per row).
MASK_PROB, MAX_PREDICTIONS = 0.15, 4
#: Rows masked per call of the compiled masking function (:func:`_masked_rows`).
MASK_BLOCK = 256


@dataclass
class _Built:
    setup: JaxSetup
    tokenizer: Any = None
    bert_config: Any = None
    inputs: dict[str, str] | None = None


@functools.lru_cache(maxsize=8)
def _mlm_loss(bert_config: Any) -> Any:
    """The masked-LM loss of a batch (jax-bert's ``batch_mlm_loss``), one function per architecture so that JAX
    Privacy's clipped gradient compiles once per process."""
    from dpaudit.trainers.jax_bert.model import FlaxBertForMaskedLM, batch_mlm_loss

    model = FlaxBertForMaskedLM(bert_config)

    def loss(params: Any, batch: dict[str, Any]) -> Any:
        return batch_mlm_loss(params, batch, model=model)[0]

    return loss


def _inject_setup(data_dir: Path, config: JaxPrivacyConfig, seed: int) -> _Built:
    """jax-bert's Flax BERT masked LM of ``config.preset`` on the inject directory's training rows."""
    import jax

    from dpaudit.inject_dir.reader import TRAIN
    from dpaudit.trainers.jax_bert.model import init_params, preset_config
    from dpaudit.trainers.jax_bert.trainer import load_inject_dir
    from dpaudit.training.tokenizer import train_wordpiece

    data = load_inject_dir(Path(data_dir))
    tokenizer = train_wordpiece(data.public_texts, vocab_size=config.vocab_size)
    bert = preset_config(
        config.preset, vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=config.max_length
    )
    rows = _masked_rows(list(data.split(TRAIN).texts), tokenizer, bert, config, seed)
    params = init_params(bert, jax.random.fold_in(jax.random.PRNGKey(seed), 0), seq_len=config.max_length)
    setup = JaxSetup(loss=_mlm_loss(bert), params=params, data=rows, batch_size=config.batch_size)
    return _Built(setup, tokenizer, bert, dict(data.inputs))


def _masked_rows(
    texts: list[str], tokenizer: Any, bert: Any, config: JaxPrivacyConfig, seed: int
) -> dict[str, np.ndarray]:
    """The training rows as the loss reads them: ``texts`` tokenized, each masked once (BERT's recipe) by a key of
    the public ``seed`` and the row's own content (jax-bert's content keys), never by its index: one row joining or
    leaving must not change another row's mask (docs/privacy.md, "One example's contribution"). The rows are masked
    in blocks of :data:`MASK_BLOCK` (the last one padded, its padding dropped) by one compiled function, so any
    number of rows compiles once."""
    import jax
    import jax.numpy as jnp

    from dpaudit.trainers.jax_bert.data import encode_texts
    from dpaudit.training.tokenizer import special_token_ids

    encoded = encode_texts(tokenizer, texts, max_length=config.max_length)
    specials = special_token_ids(tokenizer)
    mask = _mask_block(
        specials["mask"], bert.vocab_size, tuple(sorted(specials.values())), min(MAX_PREDICTIONS, config.max_length)
    )
    base = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
    inputs = [np.asarray(encoded[k]) for k in ("content_key", "input_ids", "attention_mask")]
    n = len(inputs[0])
    blocks: list[dict[str, np.ndarray]] = []
    for start in range(0, max(n, 1), MASK_BLOCK):  # no rows: one empty block (the fields keep their shapes)
        block = [x[start : start + MASK_BLOCK] for x in inputs]
        padded = [np.pad(x, [(0, MASK_BLOCK - len(x))] + [(0, 0)] * (x.ndim - 1)) for x in block]
        out = mask(base, *(jnp.asarray(x) for x in padded))
        blocks.append({k: np.asarray(v)[: len(block[0])] for k, v in out.items()})
    return {k: np.concatenate([b[k] for b in blocks]) for k in blocks[0]}


@functools.lru_cache(maxsize=8)
def _mask_block(mask_id: int, vocab_size: int, special_ids: tuple[int, ...], max_predictions: int) -> Any:
    """jax-bert's ``mask_tokens`` vmapped over a block of rows, each keyed by ``base`` and its content key, jitted
    once per tokenizer and recipe (eager, its hundreds of small operations compiled one by one took seconds)."""
    import jax
    import jax.numpy as jnp

    from dpaudit.trainers.jax_bert.data import mask_tokens

    mask = functools.partial(
        mask_tokens,
        mask_token_id=mask_id,
        vocab_size=vocab_size,
        special_ids=jnp.asarray(special_ids, jnp.int32),
        mask_prob=MASK_PROB,
        max_predictions=max_predictions,
    )

    def block(base: Any, words: Any, ids: Any, attention: Any) -> Any:
        keys = jax.vmap(lambda w: jax.random.fold_in(jax.random.fold_in(base, w[0]), w[1]))(words.astype(jnp.uint32))
        return jax.vmap(mask)(keys, ids, attention)

    return jax.jit(block)


def _sigma(config: JaxPrivacyConfig, rows: int, batch: int, delta: float) -> float:
    """The noise multiplier: given, or JAX Privacy's ``calibrate_noise_multiplier`` for ``target_epsilon`` (its
    accountant). That function accounts Poisson sampling only (it builds ``DpParams`` without a sampling method);
    for fixed-size batches, which JAX Privacy accounts as Poisson steps of sigma / 2, the calibrated sigma is
    doubled so that its own fixed-size accounting meets the target."""
    if config.noise_multiplier is not None:
        return float(config.noise_multiplier)
    from jax_privacy import accounting

    assert config.target_epsilon is not None
    inner = accounting.PldAccountantConfig() if config.accountant == "pld" else accounting.RdpAccountantConfig()
    sigma = accounting.calibrate_noise_multiplier(
        target_epsilon=config.target_epsilon,
        accountant=accounting.DpsgdTrainingAccountant(inner),
        batch_sizes=batch,
        num_updates=config.steps,
        num_samples=rows,
        target_delta=delta,
    )
    return float(sigma) * (2.0 if config.sampling == "fixed" else 1.0)


def _save_model(folder: Path, built: _Built, params: Any) -> None:
    if built.tokenizer is not None:
        from dpaudit.trainers.jax_bert.hf_io import save_pretrained

        save_pretrained(folder, params, built.bert_config, built.tokenizer)
        return
    import jax
    from safetensors.numpy import save_file

    flat = {
        "/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path): np.ascontiguousarray(np.asarray(v))
        for path, v in jax.tree_util.tree_flatten_with_path(params)[0]
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(folder / "model.safetensors"))


class JaxPrivacyTrainer:
    """The ``jax-privacy`` trainer (entry point ``dpaudit.trainers``)."""

    name: ClassVar[str] = "jax-privacy"
    Config: ClassVar[type] = JaxPrivacyConfig
    library: ClassVar[str] = "jax_privacy"

    def tiny_config(self, **overrides: Any) -> JaxPrivacyConfig:
        settings = {**TINY_SETTINGS, **overrides}
        if overrides.get("target_epsilon") is not None and "noise_multiplier" not in overrides:
            settings["noise_multiplier"] = None  # a target alone: JAX Privacy calibrates sigma
        return JaxPrivacyConfig(**settings)

    def check_setup(self, spec: str) -> None:
        """Import ``--setup``'s file, call its function and check what it returns (a one-line error otherwise)."""
        from dpaudit.trainers.jax_privacy.setup_file import load_setup

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

    def gradient_path_adjacency(self, config: Any) -> str:
        """The adjacency this run will claim: replace-one for fixed-size batches (the audit then signs its canaries,
        :func:`dpaudit.whitebox.gradient_path.signed_gains`), add/remove for Poisson sampling."""
        return "replace_one" if config.sampling == "fixed" else "add_remove"

    def train_with_gradient_canaries(
        self, data_dir: Path | None, out_dir: Path, config: Any, *, gains: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """One run hosting canaries through JAX Privacy's own gradient path (:mod:`.canary`); a canary of negative gain
        is clipped to -C along its row (the signed canaries of a fixed-size run)."""
        run, _ = self._run(data_dir, Path(out_dir), config, seed=seed, gains=np.asarray(gains, dtype=np.float64))
        assert run.observations is not None and run.final is not None
        return run.observations, run.final

    def _run(
        self, data_dir: Path | None, out: Path, config: JaxPrivacyConfig, *, seed: int, gains: np.ndarray | None
    ) -> tuple[JaxPrivacyRun, Any]:
        from dpaudit.accounting.guarantees import default_delta
        from dpaudit.files.run_dirs import prepare_output_dir, staged_directory, write_jsonl
        from dpaudit.trainers.jax_privacy.privacy import build_record
        from dpaudit.trainers.library_record import refuse_unsupported_options
        from dpaudit.training.train_dir import finish_run

        prepare_output_dir(out, overwrite=False)  # a bad --out is refused before anything trains
        refuse_unsupported_options(
            config,
            trainer="jax-privacy",
            library="JAX Privacy",
            takes_q="JAX Privacy's accountant takes N from the real rows (q = batch / N)",
        )
        if config.setup is not None:
            from dpaudit.trainers.jax_privacy.setup_file import load_setup

            built = _Built(load_setup(config.setup), inputs={})
            batch = None
        else:
            if data_dir is None:
                raise UserInputError("--data is required unless --setup FILE.py:build gives the training data.")
            built = _inject_setup(data_dir, config, seed)
            batch = config.batch_size
        n_real = len(next(iter(built.setup.data.values())))
        rows = n_real + (0 if gains is None else len(gains))
        if batch is not None and batch > rows:
            raise UserInputError(
                f"--batch-size {batch} is larger than the {rows} training rows; choose a smaller batch size."
            )
        expected = batch if batch is not None else max(1, round(built.setup.batch_size / n_real * rows))
        delta = config.delta if config.delta is not None else default_delta(rows)
        settings = Settings(
            noise_multiplier=_sigma(config, rows, expected, delta),
            clip_norm=config.clip_norm,
            steps=config.steps,
            delta=delta,
            accountant=config.accountant,
            sampling=config.sampling,
            noise_seed=config.noise_seed,
            physical_batch=config.physical_batch,
            learning_rate=config.learning_rate,
            optimizer=config.optimizer,
        )
        # the noise tail is checked before anything trains: a refused run writes nothing
        option = (
            "--noise-multiplier" if config.target_epsilon is None else f"--target-epsilon {config.target_epsilon:g}"
        )
        _check_tail(settings, expected / rows, config.accept_noise_tail, option)
        run = run_jax_privacy(built.setup, settings, gains=gains, batch_size=expected)
        record = build_record(
            run,
            delta=delta,
            accountant=config.accountant,
            target_epsilon=config.target_epsilon,
            accept_noise_tail=config.accept_noise_tail,
            extra={"setup": config.setup} if config.setup else None,
        )
        if not record.details["library"]["agrees"]:
            print(f"jax-privacy: {record.notes[0]}", file=sys.stderr)
        public = config.to_dict()  # the noise seed redacted
        with staged_directory(out, overwrite=False) as stage:
            _save_model(stage / "model", built, run.params)
            write_jsonl(stage / "metrics.jsonl", [{"step": i + 1, "loss": v} for i, v in enumerate(run.losses)])
            finish_run(stage, trainer=self.name, config=public, seed=seed, inputs=built.inputs or {}, record=record)
        return run, record


def _check_tail(settings: Settings, q: float, accept: bool, option: str) -> None:
    """Refuse (one line naming ``option``, the setting that made sigma) a run whose noise sampler's tail figure alone
    reaches delta, unless accepted (JAX Privacy's float32 noise reaches only 5.22 sigma: at epsilon 4 over a few
    steps at q = 0.25 its figure is already about delta = 1e-5)."""
    from dpaudit.accounting import noise_tail
    from dpaudit.trainers.jax_privacy.privacy import NOISE_SAMPLER
    from dpaudit.trainers.library_record import tail_figure

    sigma = settings.noise_multiplier
    if not (math.isfinite(sigma) and sigma > 0):
        raise UserInputError(f"--noise-multiplier must be > 0 for a private run, got {sigma:g}.")
    tail = tail_figure(
        steps=settings.steps,
        sample_rate=q,
        noise_multiplier=sigma,
        sampling=settings.sampling,
        noise_sampler=NOISE_SAMPLER,
    )
    noise_tail.split_delta(settings.delta, tail, accept=accept, option=option)
