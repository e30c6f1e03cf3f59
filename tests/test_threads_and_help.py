"""Small fixes: torch's thread count from the free cores, a trainer's own --help example, a
non-private run's summary that says there is no guarantee, and dpaudit --help naming membership inference."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.scoring.threads import free_cores, torch_threads


@pytest.mark.parametrize(
    ("cores", "load", "expected"), [(2, 0.17, 2), (2, 10.0, 1), (16, 3.4, 13), (4, 0.0, 4), (4, float("nan"), 4)]
)
def test_threads_are_the_cores_left_free(cores, load, expected):
    assert free_cores(cores=cores, load=load) == expected


def test_the_user_choice_of_threads_wins():
    assert torch_threads({"OMP_NUM_THREADS": "1"}, cores=8, load=0.0)[0] is None  # torch reads it itself
    assert torch_threads({"DPAUDIT_THREADS": "3", "OMP_NUM_THREADS": "1"}, cores=8, load=0.0)[0] == 3
    assert torch_threads({}, cores=8, load=6.0)[0] == 2
    with pytest.raises(ValueError, match="DPAUDIT_THREADS"):
        torch_threads({"DPAUDIT_THREADS": "many"})


@pytest.mark.parametrize("trainer", ["edp-sgd", "rgp"])
def test_each_torch_trainer_ends_its_help_with_its_own_example(trainer):
    result = CliRunner().invoke(cli, ["train", "--trainer", trainer, "--help"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    tail = " ".join(result.output.split()[-40:])
    assert f"dpaudit train --trainer {trainer}" in tail and "jax-bert" not in tail
    assert "OMP_NUM_THREADS" in result.output  # how to choose the thread count


def test_top_level_help_names_membership_inference_under_attack():
    result = CliRunner().invoke(cli, ["--help"], catch_exceptions=False)
    attack = " ".join(result.output.split("attack", 1)[1].split("demo", 1)[0].split())
    assert "membership inference" in attack


def test_a_non_private_summary_says_there_is_no_guarantee():
    from dpaudit.claim.record import PrivacyRecord
    from dpaudit.cli.train import NO_GUARANTEE, PUBLIC_ONLY, coverage_lines

    common = dict(trainer="jax-bert", privacy_unit="example (add/remove)", sampling="poisson", mechanism="none")
    lines = coverage_lines(PrivacyRecord(private=False, randomness="noise drawn from OS entropy", **common))
    assert lines == [NO_GUARANTEE] and not any("covers model/" in x or "OS entropy" in x for x in lines)
    public = PrivacyRecord(private=False, data_split="public", public_data_only=True, **common)
    assert coverage_lines(public) == [PUBLIC_ONLY]
