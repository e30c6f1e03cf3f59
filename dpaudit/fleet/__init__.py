"""Fleets of models trained side by side (shadow and reference models, the runs of a multi-run audit): on Ray, a
process pool or in this process, each worker under a memory watchdog, cached by output directory (:mod:`.fleet`).
"""

from dpaudit.fleet.fleet import FleetJob, FleetOutcome, check_ray_address, finished_run_dir, run_fleet

__all__ = ["FleetJob", "FleetOutcome", "check_ray_address", "finished_run_dir", "run_fleet"]
