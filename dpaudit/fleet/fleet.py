"""Fleets of models trained side by side: shadow and reference models, the runs of a multi-run audit.

LiRA (Carlini et al. 2022) wants 64 or more shadow models, RMIA (Zarifzadeh et al. 2024) a handful of
reference models, and a many-run white-box audit (Nasr et al. 2023) R runs of one trainer: each model
is trained on its own, so the fleet is embarrassingly parallel. :func:`run_fleet` trains a list of
:class:`FleetJob` (a registered trainer, its Config's fields, an inject directory, a run directory) on
one of three engines:

- ``"ray"``: a Ray task per model (Moritz et al. 2018, "Ray: a distributed framework for emerging AI
  applications"), on a local Ray instance started for the call (``num_cpus=workers``, no dashboard,
  shut down at the end) or on a cluster (``ray_address``: its nodes must see the job's directories
  and have dpaudit installed);
- ``"process"``: without Ray, a local pool of ``spawn`` processes (a program that calls it from its
  own script needs the usual ``if __name__ == "__main__":`` guard);
- ``"inline"``: in this process, one model after the other (what one worker means; a jax trainer then
  compiles its step once for the whole fleet).

``"auto"`` takes Ray when it is installed, else the process pool, and runs inline when only one model
at a time would train anyway (one worker, or one model left to train, and no cluster).

Workers are processes of their own, never the caller's, so torch and jax trainers alike give their
memory back when one ends. A worker trains up to ``models_per_worker`` models (:data:`MODELS_PER_WORKER`;
Ray's ``max_calls``, the pool's ``maxtasksperchild``), one after the other as the inline engine and
``train_shadows`` always did (a trainer keeps no state between runs), and is then replaced by a fresh
one, at once when its peak RSS passed half its memory bound; ``models_per_worker=1`` gives a fresh
process to every model. Each worker uses one thread (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``torch.set_num_threads(1)``): the fleet's parallelism is across models. Workers run at the caller's priority (a local
Ray instance is started with ``worker_niceness`` 0: :func:`local_ray_options`).

Memory per worker is bounded by ``worker_memory_gb`` (default :data:`WORKER_MEMORY_GB`, about 3x the
peak RSS measured of a shipped trainer's worker at the demo's sizes; ``$DPAUDIT_WORKER_MEMORY_GB`` sets
another default): the process pool runs no more workers than the free memory holds at that size, Ray
schedules each task with that ``memory`` resource (a node runs no more of them at once than its memory
holds), and in both a watchdog thread in the worker stops the job when the process's resident memory
passes the bound (a one-line error naming the job) instead of letting it push the machine into swap or
the kernel's OOM killer. Resident memory, not address space: a GPU run maps far more than it holds.

The cache is the caller's: each job's ``out_dir`` is keyed by the content of what it trains (trainer,
config, rows, seed). A job whose ``out_dir`` already holds a finished, verified train run is never
trained again (:func:`finished_run_dir`; ``cached=True``); an interrupted one is resumed by its trainer
from its checkpoints, as rerunning ``dpaudit train`` on the same ``--out`` does; two jobs with one
``out_dir`` train once. Each job holds the run directory's lock (:func:`dpaudit.files.run_dirs.run_dir_lock`)
while it trains, so two fleets sharing a cache never write one model together.

A job that fails stops the fleet: the other running jobs are interrupted (they keep their checkpoints
and resume on the next call; the trainers write their run directory atomically, so nothing half-written
is left) and a :class:`~dpaudit.common.errors.UserInputError` names the job's label and the trainer's message.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import re
import resource
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.common.errors import UserInputError

__all__ = [
    "ENGINES",
    "MODELS_PER_WORKER",
    "RAY_CONNECT_TIMEOUT_S",
    "WORKER_MEMORY_GB",
    "FleetJob",
    "FleetOutcome",
    "check_ray_address",
    "finished_run_dir",
    "run_fleet",
]

#: The engines :func:`run_fleet` knows ("auto" picks one of the others).
ENGINES = ("auto", "ray", "process", "inline")

#: Default memory bound of one worker, GiB: about 3x the peak RSS measured of a worker (``benchmarks/bench_fleet.py``:
#: the demo's edp-sgd classifier, 640-702 MiB over 1 to 8 models; jax-bert's tiny contract run, 736 MiB).
WORKER_MEMORY_GB = 2.0

#: Models one worker process trains before a fresh process replaces it (Ray's ``max_calls``, the pool's
#: ``maxtasksperchild``); a worker whose peak RSS passes half its memory bound is replaced at once. Measured on
#: the demo's classifier (``benchmarks/bench_fleet.py``): a fresh process spends longer importing torch and
#: transformers and building its first model than training a whole shadow, so one process per model ran 3x
#: slower than one process for all.
MODELS_PER_WORKER = 8

#: Each worker runs one thread: the fleet's parallelism is across models.
_THREAD_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
_GIB = 1 << 30
_CANCEL_GRACE_S = 30.0  # how long an interrupted worker gets to clean up before it is killed


@dataclass(frozen=True)
class FleetJob:
    """One model to train through the trainer registry.

    Attributes:
        trainer: the registry name (``dpaudit.trainers`` entry point), e.g. ``"edp-sgd"``.
        config: the trainer Config's fields (JSON-serializable), rebuilt in the worker as ``Config(**config)``.
        data_dir: an inject-format directory, already written by the caller.
        out_dir: the train run directory: the cache entry (content-hashed by the caller).
        seed: the public seed.
        label: how progress lines and errors name the job, e.g. ``"shadow 3/64"``.
        runner: ``"module:function"`` called as ``function(job)`` in the worker instead of the trainer's
            ``train`` (it must leave a finished run in ``out_dir``): a run the trainer's ``train`` cannot express,
            e.g. the white-box audit's runs hosting gradient canaries (:func:`dpaudit.whitebox.harness.run_job`).
            None: ``trainer.train``.
        runner_args: what the runner needs beyond the job (picklable; never written anywhere by the fleet).
    """

    trainer: str
    config: dict[str, Any]
    data_dir: Path
    out_dir: Path
    seed: int
    label: str
    runner: str | None = None
    runner_args: dict[str, Any] | None = None


@dataclass(frozen=True)
class FleetOutcome:
    """A finished job.

    Attributes:
        job: the job.
        cached: True when ``out_dir`` already held a finished, verified run (or another job of this call
            with the same ``out_dir`` trained it).
        seconds: wall time of this job in its worker (0 for a cached one).
        peak_rss_mb: peak resident memory of the worker process that trained it, MiB (None when cached; for
            the inline engine, this process's peak so far).
    """

    job: FleetJob
    cached: bool
    seconds: float
    peak_rss_mb: float | None = None


def finished_run_dir(out_dir: str | os.PathLike[str]) -> bool:
    """Whether ``out_dir`` holds a finished train run whose files match its manifest (a cache hit)."""
    from dpaudit.files.run_dirs import MANIFEST_NAME, verify_run_dir

    if not (Path(out_dir) / MANIFEST_NAME).is_file():
        return False
    try:
        verify_run_dir(out_dir, schema_prefix="dpaudit.train/")
    except UserInputError:
        return False
    return True


#: Seconds :func:`check_ray_address` waits for the cluster's port to answer (``$DPAUDIT_RAY_CONNECT_TIMEOUT_S``).
RAY_CONNECT_TIMEOUT_S = 5.0

_RAY_FORMS = (
    "HOST:PORT (the head node's GCS address, e.g. 10.0.0.5:6379) or ray://HOST:PORT (the Ray Client "
    "server, port 10001 by default)"
)
_HOST_PORT = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})$")


def check_ray_address(address: str, *, option: str = "--ray-address", timeout_s: float | None = None) -> str:
    """``address`` checked before anything starts: the one check of every ``--ray-address`` (``attack``,
    ``audit-trainer``, :func:`run_fleet`).

    Ray itself answers a malformed address with a traceback (``ValueError: Invalid address format``), a
    ``ray://`` address without the Ray Client installed with another, and an address where nothing listens by
    retrying for minutes. Here each is one line: the form is checked (``HOST:PORT``, ``ray://HOST:PORT`` or
    ``auto``), Ray (and for ``ray://`` its client, ``grpc``) must be installed, and the host's port must accept a
    TCP connection and answer the HTTP/2 handshake of a gRPC server (Ray's GCS and Client server are gRPC
    services) within ``timeout_s`` seconds (default :data:`RAY_CONNECT_TIMEOUT_S`): a port where something else
    listens would leave ``ray.init`` retrying for minutes.

    Returns:
        The address as Ray takes it (whitespace stripped).

    Raises:
        UserInputError: naming ``option``, the address and what to do.
    """
    from dpaudit.common.extras import MissingExtraError, install_command, installed

    text = str(address).strip()
    if not text:
        raise UserInputError(f"{option} is empty; give {_RAY_FORMS}.")
    if not installed("ray"):
        raise MissingExtraError(
            f"{option} {text} needs the fleet extra (ray is not installed): {install_command(['fleet'])}."
        )
    if text == "auto":  # the cluster this machine runs ($RAY_ADDRESS, else the last `ray start`)
        return _check_auto(option, timeout_s)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    elif scheme != "ray":
        raise UserInputError(f"{option} {text}: {scheme}:// is not a Ray cluster address; give {_RAY_FORMS}.")
    match = _HOST_PORT.match(rest)
    port = int(match["port"]) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise UserInputError(f"{option} {text!r} is not a Ray cluster address; give {_RAY_FORMS}.")
    if scheme == "ray" and not installed("grpc"):
        raise MissingExtraError(
            f"{option} {text}: a ray:// address connects through the Ray Client, which is not "
            "installed: pip install 'ray[client]' (or give the head node's GCS address "
            "HOST:6379)."
        )
    _probe(option, text, match["ip6"] or match["host"], port, timeout_s, client=scheme == "ray")
    return text


def _check_auto(option: str, timeout_s: float | None) -> str:
    """``auto``: the address Ray would pick ($RAY_ADDRESS, else the cluster last started here), probed as given."""
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env and env != "auto":
        check_ray_address(env, option=f"{option} auto (RAY_ADDRESS)", timeout_s=timeout_s)
        return "auto"
    try:
        from ray._private.services import canonicalize_bootstrap_address  # Ray's own lookup of a local cluster

        found = canonicalize_bootstrap_address("auto")
    except ImportError:
        return "auto"  # another Ray layout: ray.init's own lookup decides
    except (ConnectionError, ValueError, RuntimeError):
        found = None
    if not found:
        raise UserInputError(
            f"{option} auto: no running Ray cluster found on this machine; start one (ray start "
            f"--head) or give {_RAY_FORMS}."
        )
    host, _, port = str(found).rpartition(":")
    _probe(f"{option} auto", str(found), host.strip("[]"), int(port), timeout_s)
    return "auto"


def _probe(option: str, text: str, host: str, port: int, timeout_s: float | None, *, client: bool = False) -> None:
    """A TCP connection to ``host:port`` answering the gRPC (HTTP/2) handshake within the timeout, or the one line
    saying why not."""
    import socket

    if timeout_s is None:
        env = os.environ.get("DPAUDIT_RAY_CONNECT_TIMEOUT_S")
        try:
            timeout_s = RAY_CONNECT_TIMEOUT_S if env is None else float(env)
        except ValueError:
            raise UserInputError(
                f"DPAUDIT_RAY_CONNECT_TIMEOUT_S={env!r} is not a number of seconds; e.g. 10."
            ) from None
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            # Ray's GCS and its Client server speak gRPC (HTTP/2): the client preface and an empty SETTINGS frame
            # are answered by a SETTINGS frame (type 4). Anything else on that port would leave ray.init retrying.
            conn.sendall(_HTTP2_PREFACE)
            reply = _read(conn, 9)
    except socket.gaierror as err:
        raise UserInputError(
            f"{option} {text}: cannot resolve host {host!r} ({err.strerror}); check the address."
        ) from None
    except (socket.timeout, TimeoutError):
        raise UserInputError(
            f"{option} {text}: no answer from {host}:{port} within {timeout_s:g} s; check that the Ray "
            "head runs there and that its port is reachable from here (firewall)."
        ) from None
    except OSError as err:
        start = (
            "ray start --head; its Ray Client server listens on port 10001"
            if client
            else f"ray start --head --port={port}"
        )
        raise UserInputError(
            f"{option} {text}: nothing accepts connections at {host}:{port} "
            f"({err.strerror or err}); start the cluster there ({start}) or correct the address."
        ) from None
    if len(reply) < 9 or reply[3] != 4:
        what = "Ray Client server (port 10001 by default)" if client else "Ray head's GCS port (6379 by default)"
        raise UserInputError(
            f"{option} {text}: {host}:{port} accepts connections but does not answer as a Ray cluster "
            f"(no gRPC handshake); give the {what}."
        )


#: The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, sections 3.4 and 6.5).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _read(conn: Any, size: int) -> bytes:
    """Up to ``size`` bytes from ``conn`` (fewer when it closes first); its timeout raises ``socket.timeout``."""
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def run_fleet(
    jobs: Sequence[FleetJob],
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    engine: str = "auto",
    progress: bool = True,
    desc: str = "models",
    max_minutes: float | None = None,
    worker_memory_gb: float | None = None,
    models_per_worker: int | None = None,
) -> list[FleetOutcome]:
    """Train every job not already finished in its ``out_dir``; resume unfinished ones; return outcomes in job order.

    Args:
        jobs: the models to train (jobs sharing an ``out_dir`` must be the same job: it trains once).
        workers: models trained at once (default: the usable CPUs here, or the cluster's CPUs with
            ``ray_address``); fewer when the free memory holds fewer workers of ``worker_memory_gb``.
        ray_address: a Ray cluster to run on (``ray://host:10001`` or ``host:6379``); default a local instance.
        engine: ``"auto"``, ``"ray"``, ``"process"`` or ``"inline"`` (module docstring).
        progress: one progress bar for the fleet on stderr (plain lines, one per model, when stderr is
            not a terminal).
        desc: what the models are called on the bar (e.g. ``"shadow models"``).
        max_minutes: start no new job once this many minutes have passed since the call and at least one
            model is finished (cached ones count); the jobs already running finish. The skipped jobs are
            missing from the result: the caller says so.
        worker_memory_gb: memory bound of one worker, GiB (default ``$DPAUDIT_WORKER_MEMORY_GB``, else
            :data:`WORKER_MEMORY_GB`).
        models_per_worker: models one worker process trains before a fresh one replaces it (default
            :data:`MODELS_PER_WORKER`; 1: a fresh process for every model).

    Returns:
        One outcome per finished job, in job order (every job, unless ``max_minutes`` stopped the fleet).

    Raises:
        UserInputError: a job failed (naming its label and the trainer's message), or a bad option.
    """
    jobs = list(jobs)
    if engine not in ENGINES:
        raise UserInputError(f"fleet engine {engine!r} is not one of {', '.join(ENGINES)}.")
    if workers is not None and workers < 1:
        raise UserInputError(f"--workers must be >= 1, got {workers}.")
    if max_minutes is not None and not max_minutes >= 0:
        raise UserInputError(f"max_minutes must be >= 0, got {max_minutes}.")
    if worker_memory_gb is None:
        env = os.environ.get("DPAUDIT_WORKER_MEMORY_GB")
        try:
            memory_gb = WORKER_MEMORY_GB if env is None else float(env)
        except ValueError:
            raise UserInputError(f"DPAUDIT_WORKER_MEMORY_GB={env!r} is not a number of GiB; e.g. 4.") from None
    else:
        memory_gb = float(worker_memory_gb)
    if not memory_gb > 0:
        raise UserInputError(
            f"the worker memory bound must be > 0 GiB, got {memory_gb:g} "
            "(worker_memory_gb or DPAUDIT_WORKER_MEMORY_GB)."
        )
    per_worker = MODELS_PER_WORKER if models_per_worker is None else int(models_per_worker)
    if per_worker < 1:
        raise UserInputError(f"models_per_worker must be >= 1, got {models_per_worker}.")
    if engine == "ray":
        from dpaudit.common.extras import require_extras

        require_extras("the ray fleet engine", "fleet")
    if ray_address is not None:  # before any job starts: Ray's own answer is a traceback, or minutes of retries
        ray_address = check_ray_address(ray_address)

    first: dict[Path, int] = {}  # out_dir -> the first job that trains it
    for i, job in enumerate(jobs):
        key = Path(job.out_dir).resolve()
        if key in first:
            other = jobs[first[key]]
            if (other.trainer, other.config, Path(other.data_dir).resolve(), other.seed) != (
                job.trainer,
                job.config,
                Path(job.data_dir).resolve(),
                job.seed,
            ):
                raise ValueError(
                    f"{job.label} and {other.label} share out_dir {job.out_dir} but differ; "
                    "a fleet's out_dir must be keyed by everything it trains."
                )
        else:
            first[key] = i

    start = time.monotonic()
    bar = _Progress(len(jobs), desc, enabled=progress)
    done: dict[int, FleetOutcome] = {}
    todo: list[int] = []
    for i in first.values():
        if finished_run_dir(jobs[i].out_dir):
            done[i] = FleetOutcome(jobs[i], cached=True, seconds=0.0)
            bar.finished(done[i])
        else:
            todo.append(i)

    def may_start() -> bool:
        if max_minutes is None or not done:
            return True
        return (time.monotonic() - start) / 60 < max_minutes

    def finished(i: int, outcome: FleetOutcome) -> None:
        done[i] = outcome
        bar.finished(outcome)

    try:
        if todo:
            chosen = _choose_engine(engine, workers, len(todo), ray_address)
            runners: dict[str, Callable[..., None]] = {
                "inline": _run_inline,
                "process": _run_processes,
                "ray": _run_ray,
            }
            runner = runners[chosen]
            runner(
                [(i, jobs[i]) for i in todo],
                workers=workers,
                ray_address=ray_address,
                memory_gb=memory_gb,
                models_per_worker=per_worker,
                may_start=may_start,
                finished=finished,
                note=bar.note,
            )
            skipped = sum(i not in done for i in todo)
            if skipped:
                bar.note(f"{desc}: {skipped} of {len(first)} not started (max_minutes {max_minutes:g} reached).")
        for i, job in enumerate(jobs):  # a repeated out_dir shares its first job's model
            j = first[Path(job.out_dir).resolve()]
            if i != j and j in done:
                done[i] = FleetOutcome(job, cached=True, seconds=0.0)
                bar.finished(done[i])
    finally:
        bar.close()
    return [done[i] for i in range(len(jobs)) if i in done]


# -- choosing and sizing the engine -------------------------------------------------------------------


def _choose_engine(engine: str, workers: int | None, pending: int, ray_address: str | None) -> str:
    if engine != "auto":
        return engine
    from dpaudit.common.extras import installed
    from dpaudit.common.resources import available_cores

    if ray_address is None and min(workers or available_cores(), pending) == 1:
        return "inline"
    return "ray" if installed("ray") else "process"


def _local_workers(workers: int | None, pending: int, memory_gb: float, note: Callable[[str], None]) -> int:
    """Workers to run here: asked (default the usable CPUs), at most one per job, at most what free memory holds."""
    from dpaudit.common.resources import available_cores, available_memory

    n = min(workers or available_cores(), pending)
    free_bytes = available_memory()
    free = None if free_bytes is None else free_bytes / _GIB
    if free is not None:
        fit = max(1, int(free // memory_gb))
        if fit < n:
            note(f"fleet: {n} workers asked, {fit} fit in {free:.1f} GiB of free memory at {memory_gb:g} GiB each.")
            n = fit
    return n


# -- what a worker runs ---------------------------------------------------------------------------------


def _train_job(job: FleetJob, *, one_thread: bool) -> None:
    """Train one job in this process (resuming its checkpoints), holding its run directory's lock.

    ``one_thread``: a worker process of the fleet (torch then uses one thread); never the caller's process,
    whose thread settings are its own.
    """
    from dpaudit.files.run_dirs import foreign_files, run_dir_lock
    from dpaudit.training.api import load_trainer, writes_run_dir

    trainer = load_trainer(job.trainer)
    if one_thread and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    try:
        config = trainer.Config(**job.config)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"cannot build the {job.trainer} config ({err}).") from None
    out = Path(job.out_dir)
    lock = run_dir_lock(out, stage=f"fleet {job.label}") if writes_run_dir(trainer) else contextlib.nullcontext()
    with lock:
        if job.runner is not None:
            module, _, name = job.runner.partition(":")
            getattr(importlib.import_module(module), name)(job)
            if not finished_run_dir(out):
                raise UserInputError(f"the runner {job.runner} returned without a finished run in {out}.")
            return
        leftover = out.is_dir() and any(out.iterdir())
        try:
            trainer.train(Path(job.data_dir), out, config, seed=job.seed)
        except UserInputError:
            # A leftover the trainer cannot resume (a damaged finished run, checkpoints of another version):
            # the cache entry is rebuilt, but only when dpaudit wrote everything in it.
            if not leftover or finished_run_dir(out) or foreign_files(out):
                raise
            shutil.rmtree(out)
            trainer.train(Path(job.data_dir), out, config, seed=job.seed)
    if not finished_run_dir(out):
        raise UserInputError(f"the {job.trainer} trainer returned without a finished run in {out}.")


@contextlib.contextmanager
def _quiet(fds: bool) -> Iterator[None]:
    """Send the trainer's own progress bars and lines to /dev/null (the fleet has one bar); ``fds``: the
    file descriptors too (a worker process of our own: XLA's and torch's C++ logs)."""
    with open(os.devnull, "w", encoding="utf-8") as null:
        saved = []
        if fds:
            for fd in (1, 2):
                with contextlib.suppress(OSError):
                    (sys.stdout if fd == 1 else sys.stderr).flush()
                    saved.append((fd, os.dup(fd)))
                    os.dup2(null.fileno(), fd)
        try:
            with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                yield
        finally:
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _rss_bytes() -> int | None:
    """This process's resident memory now (Linux ``/proc/self/statm``), or None where unknown."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _MemoryWatch:
    """A daemon thread that interrupts the main thread (KeyboardInterrupt) once resident memory passes ``limit``.

    ``record`` (a shared ``multiprocessing.Value``, the process pool's) gets the resident bytes first: an interrupt that
    lands inside native code can abort the process (SIGABRT) before it reports, and the driver still says why."""

    def __init__(self, limit: int | None, every_s: float = 0.5, record: Any = None) -> None:
        import threading

        self.limit, self.every_s, self.record = limit, every_s, record
        self.tripped: int | None = None  # the resident bytes that tripped it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dpaudit-fleet-memory", daemon=True)

    def _run(self) -> None:
        import _thread

        limit = self.limit
        assert limit is not None  # __enter__ starts the thread only with a limit
        while True:  # checked at once, then every every_s seconds
            rss = _rss_bytes()
            if rss is None:
                return
            if rss > limit:
                self.tripped = rss
                if self.record is not None:
                    self.record.value = rss
                _thread.interrupt_main()
                return
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> _MemoryWatch:
        if self.limit is not None and _rss_bytes() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()


def _listen_to_interrupts() -> None:
    """Make SIGINT raise KeyboardInterrupt in this worker process again if it was inherited as ignored.

    A command started in the background of a non-interactive shell (``dpaudit attack ... &``, a CI script) runs with
    SIGINT ignored, and Ray's and the pool's workers inherit that: the memory watchdog (``_thread.interrupt_main``)
    and a cancel (Ray's ``cancel``, the pool's SIGINT) would then do nothing, and a failed fleet would wait for
    every running model to finish.
    """
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _memory_message(rss: int, memory_bytes: int | None) -> str:
    return (
        f"its worker passed its memory bound ({rss / _GIB:.2f} GiB resident > {(memory_bytes or 0) / _GIB:g} GiB); "
        "raise it (DPAUDIT_WORKER_MEMORY_GB) or train fewer models at once (--workers). Finished models are kept."
    )


def _worker(job: FleetJob, memory_bytes: int | None, fds: bool, record: Any = None) -> dict[str, Any]:
    """Run one job in a worker process: one thread, memory watched, output quiet; never raises (the result says),
    except a KeyboardInterrupt from the driver (a cancel).

    The result's ``retire`` asks for a fresh process next time: this one's peak RSS passed half its bound.
    """
    os.environ.update(_THREAD_ENV)
    _listen_to_interrupts()
    t0 = time.monotonic()
    watch = _MemoryWatch(memory_bytes, record=record)
    try:
        with watch, _quiet(fds):
            _train_job(job, one_thread=True)
    except KeyboardInterrupt:
        if watch.tripped is None:
            raise
        return {"status": "user", "retire": True, "message": _memory_message(watch.tripped, memory_bytes)}
    except UserInputError as err:
        return {"status": "user", "message": str(err), "retire": True}
    except MemoryError:
        return {
            "status": "user",
            "message": "its worker ran out of memory; train fewer models at once (--workers).",
            "retire": True,
        }
    except Exception as err:  # a bug: keep its traceback for the driver
        return {
            "status": "error",
            "message": f"{type(err).__name__}: {err}",
            "traceback": traceback.format_exc(),
            "retire": True,
        }
    peak = _peak_rss_mb()
    retire = memory_bytes is not None and peak * (1 << 20) > memory_bytes / 2
    return {"status": "ok", "seconds": time.monotonic() - t0, "peak_rss_mb": peak, "retire": retire}


def _outcome(job: FleetJob, result: dict[str, Any]) -> FleetOutcome:
    """The outcome of a worker's result, or the job's error."""
    if result["status"] == "user":
        raise UserInputError(f"{job.label}: {result['message']}")
    if result["status"] == "error":
        raise RuntimeError(
            f"{job.label}: training failed with {result['message']}\n--- worker traceback ---\n"
            f"{result.get('traceback', '')}"
        )
    return FleetOutcome(job, cached=False, seconds=float(result["seconds"]), peak_rss_mb=result.get("peak_rss_mb"))


# -- the engines ---------------------------------------------------------------------------------------

Finished = Callable[[int, FleetOutcome], None]


def _run_inline(
    todo: list[tuple[int, FleetJob]],
    *,
    may_start: Callable[[], bool],
    finished: Finished,
    note: Callable[[str], None],
    **_: Any,
) -> None:
    """One job after the other in this process (no memory cap: it is the caller's process)."""
    for i, job in todo:
        if not may_start():
            return
        t0 = time.monotonic()
        try:
            with _quiet(fds=False):
                _train_job(job, one_thread=False)
        except UserInputError as err:
            raise UserInputError(f"{job.label}: {err}") from None
        finished(i, FleetOutcome(job, cached=False, seconds=time.monotonic() - t0, peak_rss_mb=_peak_rss_mb()))


def _process_main(conn: Any, memory_bytes: int | None, models_per_worker: int, record: Any = None) -> None:
    """A process-pool worker: up to ``models_per_worker`` jobs received through ``conn``, each result sent back;
    it exits after the last, when told (None or a closed pipe), when interrupted, or when a result says retire."""
    try:
        for _ in range(models_per_worker):
            try:
                job = conn.recv()
            except EOFError:
                return
            if job is None:
                return
            result = _worker(job, memory_bytes, fds=True, record=record)
            conn.send(result)
            if result.get("retire"):
                return
    except KeyboardInterrupt:  # interrupted by the driver: the trainer's finally blocks have run
        return
    finally:
        conn.close()


class _Child:
    """One process-pool worker and the job it is training."""

    def __init__(self, ctx: Any, memory_bytes: int, models_per_worker: int) -> None:
        self.conn, theirs = ctx.Pipe()
        self.memory_bytes = memory_bytes
        self.tripped = ctx.Value("q", 0, lock=False)  # the watchdog's resident bytes when it fired (0: never)
        self.proc = ctx.Process(
            target=_process_main,
            args=(theirs, memory_bytes, models_per_worker, self.tripped),
            name="dpaudit-fleet-worker",
        )
        self.proc.start()
        theirs.close()
        self.left = models_per_worker
        self.job: tuple[int, FleetJob] | None = None

    def give(self, i: int, job: FleetJob) -> None:
        self.job, self.left = (i, job), self.left - 1
        self.conn.send(job)

    def stop(self, deadline: float) -> None:
        """Tell an idle worker to exit (a busy one was interrupted); kill it at ``deadline``."""
        if self.job is None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.proc.join(max(0.0, deadline - time.monotonic()))
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _run_processes(
    todo: list[tuple[int, FleetJob]],
    *,
    workers: int | None,
    memory_gb: float,
    models_per_worker: int,
    may_start: Callable[[], bool],
    finished: Finished,
    note: Callable[[str], None],
    **_: Any,
) -> None:
    """A pool of spawn processes, at most ``workers`` at once, each replaced after ``models_per_worker`` models."""
    import multiprocessing
    import signal
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    n = _local_workers(workers, len(todo), memory_gb, note)
    memory_bytes = int(memory_gb * _GIB)
    queue = list(todo)
    idle: list[_Child] = []
    busy: dict[Any, _Child] = {}  # its pipe -> a worker training a job
    try:
        while queue or busy:
            while queue and (idle or len(busy) < n) and may_start():
                child = idle.pop() if idle else _Child(ctx, memory_bytes, models_per_worker)
                child.give(*queue.pop(0))
                busy[child.conn] = child
            if not busy:
                return  # max_minutes: nothing more starts
            for conn in wait(list(busy)):
                child = busy.pop(conn)
                assert child.job is not None  # a busy worker trains one
                i, job = child.job
                try:
                    result = child.conn.recv()  # (conn is child.conn)
                except EOFError:  # the process died without a word (killed, out of memory, aborted by the watchdog)
                    child.proc.join()
                    if child.tripped.value:
                        raise UserInputError(
                            f"{job.label}: {_memory_message(child.tripped.value, child.memory_bytes)} "
                            f"(the worker stopped with exit code {child.proc.exitcode})"
                        ) from None
                    raise UserInputError(
                        f"{job.label}: its worker process died (exit code {child.proc.exitcode}); if it "
                        "ran out of memory, train fewer models at once (--workers). Finished models "
                        "are kept."
                    ) from None
                child.job = None
                if result.get("retire") or child.left == 0:
                    child.stop(time.monotonic() + _CANCEL_GRACE_S)
                else:
                    idle.append(child)
                finished(i, _outcome(job, result))
    finally:  # done, a failure or Ctrl-C: interrupt the busy workers (cleanly: KeyboardInterrupt), stop the idle ones
        for child in busy.values():
            if child.proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(child.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + _CANCEL_GRACE_S
        for child in [*busy.values(), *idle]:
            child.stop(deadline)


def local_ray_options(cpus: int) -> dict[str, Any]:
    """``ray.init``'s options for the local Ray instance a fleet starts: ``cpus`` CPUs, no dashboard, a small object
    store, and workers at this process's own priority (``worker_niceness`` 0).

    Why the priority: Ray starts its worker processes 15 nice levels below the driver by default (to keep its own
    services responsive), so on a shared machine every other process outranked the models: at load 5 on the 2-core
    machine, four tiny LoRA shadow models took 68-229 s in two workers where the same models took 3-4 s in the
    attack's own process (``benchmarks/bench_attack_cost.py --shadow-check --shadow-workers 2``)."""
    return {
        "num_cpus": cpus,
        "include_dashboard": False,
        "object_store_memory": 100 << 20,
        "_system_config": {"worker_niceness": 0},
    }


#: Wall seconds a fleet spends starting a local Ray instance before its first model starts (``ray.init`` and two
#: workers' first task): 7.0-8.7 s at load 7 on the 2-core machine. Starting the process pool's workers costs what each
#: model's start-up in the measured table already prices (importing torch and dpaudit: 5-9 s for two at load 7).
LOCAL_RAY_START_WALL_S = 8.0


def start_wall_seconds(workers: int | None, pending: int, ray_address: str | None) -> float:
    """Wall seconds :func:`run_fleet` (engine ``"auto"``) spends before its first model starts: starting a local Ray
    instance when it will (:data:`LOCAL_RAY_START_WALL_S`), else 0 (a cluster is already up; inline needs nothing)."""
    engine = _choose_engine("auto", workers, pending, ray_address)
    return LOCAL_RAY_START_WALL_S if engine == "ray" and ray_address is None else 0.0


def _run_ray(
    todo: list[tuple[int, FleetJob]],
    *,
    workers: int | None,
    ray_address: str | None,
    memory_gb: float,
    models_per_worker: int,
    may_start: Callable[[], bool],
    finished: Finished,
    note: Callable[[str], None],
) -> None:
    """A Ray task per job, at most ``workers`` at once, a worker process replaced after ``models_per_worker``."""
    ray = importlib.import_module("ray")
    started = False
    cancelled: list[FleetJob] = []
    if not ray.is_initialized():
        quiet = {"logging_level": logging.ERROR, "log_to_driver": False, "configure_logging": True}
        if ray_address is None:
            n_local = _local_workers(workers, len(todo), memory_gb, note)
            ray.init(**local_ray_options(n_local), **quiet)
        else:
            try:
                ray.init(address=ray_address, **quiet)
            except (ConnectionError, TimeoutError, ValueError, RuntimeError) as err:  # it answered, but not as Ray
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise UserInputError(
                    f"--ray-address {ray_address}: Ray could not connect ({type(err).__name__}: "
                    f"{first}); check that a Ray cluster of the same version runs there."
                ) from None
        started = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        n = min(workers or cpus, cpus, len(todo))
        memory_bytes = int(memory_gb * _GIB)
        largest = max(
            (node.get("Resources", {}).get("memory", 0) for node in ray.nodes() if node.get("Alive")), default=0
        )
        if largest < memory_bytes:  # no node could ever run a task: Ray would wait forever
            raise UserInputError(
                f"no Ray node has {memory_gb:g} GiB of memory for one worker (largest "
                f"{largest / _GIB:.1f} GiB); lower the per-worker memory bound (DPAUDIT_WORKER_MEMORY_GB)."
            )
        task = ray.remote(max_calls=models_per_worker)(_worker).options(num_cpus=1, memory=memory_bytes, max_retries=0)
        queue = list(todo)
        running: dict[Any, tuple[int, FleetJob]] = {}
        try:
            while queue or running:
                while queue and len(running) < n and may_start():
                    i, job = queue.pop(0)
                    running[task.remote(job, memory_bytes, False)] = (i, job)
                if not running:
                    return
                ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    i, job = running.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as err:  # the worker died (killed, out of memory) or Ray failed
                        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                        raise UserInputError(
                            f"{job.label}: its Ray worker failed ({type(err).__name__}: {first_line}); "
                            "if it ran out of memory, train fewer models at once (--workers). "
                            "Finished models are kept."
                        ) from None
                    finished(i, _outcome(job, result))
        finally:
            for ref in running:  # a failure or Ctrl-C: KeyboardInterrupt in the rest (their cleanup runs)
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=False)
            if running:
                with contextlib.suppress(Exception):
                    ray.wait(list(running), num_returns=len(running), timeout=_CANCEL_GRACE_S)
                cancelled.extend(job for _, job in running.values())
    finally:
        if started:
            ray.shutdown()
        if cancelled:
            from dpaudit.files.run_dirs import remove_stale_lock

            for job in cancelled:  # a worker interrupted mid-lock, or killed at shutdown after the grace
                with contextlib.suppress(Exception):
                    remove_stale_lock(job.out_dir)


# -- progress -------------------------------------------------------------------------------------------


class _Progress:
    """One bar for the fleet on stderr (models done / total, cached counted); plain lines when stderr is not a
    terminal (a log file gets one line per model, not carriage returns)."""

    def __init__(self, total: int, desc: str, *, enabled: bool) -> None:
        self.total, self.desc, self.enabled = total, desc, enabled
        self.done = self.cached = 0
        self.bar = None
        if enabled and total and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="model", file=sys.stderr, dynamic_ncols=True)

    def finished(self, outcome: FleetOutcome) -> None:
        self.done += 1
        self.cached += outcome.cached
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.cached} cached", refresh=False)
            self.bar.update(1)
        elif self.enabled:
            what = "cached" if outcome.cached else f"trained in {outcome.seconds:.1f} s"
            print(
                f"{self.desc} {self.done}/{self.total}: {what} ({outcome.job.label}: {outcome.job.out_dir})",
                file=sys.stderr,
                flush=True,
            )

    def note(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        elif self.enabled:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
