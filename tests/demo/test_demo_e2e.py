"""`dpaudit demo --quick` end to end: the known answer, and a rerun that skips every stage.

Both masked LMs start from the public model (``train-public``: 300 steps on 10,000 public
utterances); the figures below were measured from random weights, and the assertions hold from the public start
too (measured with noise seed 0: non-private 100x canaries memorized; epsilon 8: 1x and 10x p > 0.05; fixture
148 s with OMP_NUM_THREADS=1 on the shared 2-core machine, of which the public pretraining 25-35 s).

The test runs ``--quick``'s plan with the public model pretrained for 100 steps instead of 300 (:data:`TEST_SIZES`,
through the same command): no assertion needs a better public start, which only has to exist, be public and be
started from. Measured with noise seed 0 on the 2-core machine: the quick plan's 100x canaries 11.1 bits vs 0.9 for
the controls, 1 of 5 reconstructed exactly; from the shorter public start 10.6 vs 1.6 bits, 2 of 5 exactly, held-out
MLM accuracy 36%; epsilon 8: 1x and 10x p = 0.42 and 0.35, 100x 3.8 bits; the one-run audit (it starts from random
weights) unchanged: AUC 1.0, epsilon >= 2.99 proven. The train-public stage took 25 s of CPU instead of 34 s.

Two more cuts, each where no assertion needs the size (measured with noise seed 0 under load on the 2-core machine):
the epsilon-8 masked LM runs 200 steps instead of 500 (``dp_steps``; its epsilon is accounted for the 200 steps, and
what is asserted of it, canaries within the guarantee's scope and every bound below the claim, holds at any length):
1x and 10x p = 0.21 and 0.35, 100x 2.9 bits vs the non-private model's 10.6, its held-out MLM accuracy 9.4% from the
public start's 9.7%; its stage 32 s of CPU instead of 50 s. The one-run audit's models run 40 steps instead of 63:
non-private AUC 1.0 and epsilon >= 2.99 proven as at 63 (the bound of 200 canaries all told apart), the epsilon-8
model's proof bound 4.04 below its claim 8.0; their stages 21 s of CPU each instead of 24 and 28 s. The non-private
model is the quick plan's (from the 100-step public start, as above). With the public start at 50 steps it still
memorized, but only 1 of 5 secrets exactly (the assertion's floor) and the public start learned nothing (6.3%,
the most frequent token): the public start stays at 100.

Two cuts more, for the same reasons (noise seed 0, both runs side by side at load 15-16 on the 2-core machine): the
epsilon-8 masked LM runs 100 steps (accounted for the 100): 1x and 10x p = 0.11 and 0.42, 100x 2.6 bits vs the
non-private model's 10.6, held-out MLM accuracy 8.5%; the one-run audit's models train at batch 128 instead of 256
(40 steps): non-private AUC 1.0 and epsilon >= 2.99 proven as before, the epsilon-8 model's proof bound 2.96 below its
claim 8.0. The stages' CPU: 160 s instead of 171 s (epsilon-8 training 24.7 s instead of 32.3 s, the audit's 19.3 and
20.7 s instead of 22.4 and 23.6 s: a tiny training's XLA compiles, not its steps, are most of what is left).

One cut more (noise seed 0, the stages rerun one after another at load 7-8 on the 2-core machine): the non-private
masked LM runs 400 steps instead of 500 (``steps``): its 100x canaries 10.2 bits vs 1.6 for the controls (p = 0.006),
2 of 5 reconstructed exactly as at 500, held-out MLM accuracy 31%; the epsilon-8 model's 100x canaries (2.6 bits) stay
7.6 bits below it. Its stage took 27.9 s of CPU instead of 33.3 s. At 300 steps only 1 of 5 secrets was reconstructed
exactly (the assertion's floor), so 400 it is. Halving the one-run audit's batch again (64) saved no CPU that could be
told from the noise of a loaded machine (40 steps: their compiles dominate) and lowered the non-private proof bound
from 2.99 to 2.32 (AUC 0.98): not taken; nor the epsilon-8 masked LM at 50 steps (its 1x canaries' p fell to 0.075,
near the assertion's 0.05).

Known answer: the non-private model memorizes its most repeated canaries (mean exposure
far above the controls', at least one secret reconstructed exactly); the epsilon-8 model's canaries
are statistically indistinguishable from the controls (the attack's own one-sided Mann-Whitney test)
and every empirical epsilon lower bound is below the claimed epsilon.

Measured, not assumed: at epsilon 8 the canaries inserted 100 times are NOT indistinguishable from
the controls, at any size tried (corpus 1,000-10,000 rows, batch 16-64, learning rate 1e-3-3e-3,
1,000-4,000 steps: 3-7 bits vs ~1 for the controls, p < 0.005). A canary
repeated 100 times is a group of 100 rows, which epsilon 8 does not cover (its group-privacy bound
is vacuous), and the ten 100x canaries are 1,000 rows sharing one context, from which even the DP
model learns which digits their secrets favour. So this test asserts the guarantee's own scope: the
canaries inserted once (what epsilon covers) and 10 times sit with the controls; the 100x ones stay
well below the non-private model's.

``--noise-seed`` fixes the DP noise and Poisson sampling so that the test is deterministic; the
answer itself does not depend on it. Checked by hand with noise seeds 0-3 and OS entropy: non-private
100x canaries 12.5-13.0 bits vs 1.2-2.2 for the controls, 3-4 of 5 reconstructed exactly; epsilon 8:
1x and 10x p = 0.27-0.85, 100x 6.5-7.2 bits (0 or 1 of 5 reconstructed), every lower bound 0. The
edp-sgd classifiers are left out (``--no-classifiers``): their stages are the same commands with
other options, checked by ``test_demo_plan.py`` without training, and this test's budget is the
two jax-bert trainings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from dpaudit import accounting
from dpaudit.attacks.results import MiaResult
from dpaudit.attacks.run import read_attack_dir
from dpaudit.cli import cli
from dpaudit.common.figures import format_up
from dpaudit.demo import plan as demo_plan
from dpaudit.files.run_dirs import verify_run_dir
from dpaudit.report.membership import membership_audits

#: "By a wide margin": bits of mean exposure above the controls' (|R| = 10^4: at most 13.3 bits).
MARGIN_BITS = 4.0
#: The epsilon-8 model's 100x canaries stay at least this far below the non-private model's.
DP_GAP_BITS = 2.0


#: What ``dpaudit demo --quick`` runs in this module: ``--quick``'s sizes with a shorter public pretraining, shorter
#: non-private and epsilon-8 masked LMs and shorter, smaller-batch one-run audit trainings (the module docstring says
#: why each is enough).
TEST_SIZES = dataclasses.replace(
    demo_plan.QUICK, public_steps=100, steps=400, dp_steps=100, audit_steps=40, audit_batch_size=128
)


class DemoRun(NamedTuple):
    """The demo's run: its folders and command, the terminal of the run itself (``compact``, without ``--verbose``)
    and of a ``--verbose`` rerun (``output``: every stage skipped, today's full detail), and each of the non-private
    model's files' mtimes before that rerun."""

    out: Path
    report: Path
    args: list[str]
    output: str
    compact: str
    mtimes: dict[Path, int]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    out, report = tmp / "demo", tmp / "report" / "index.html"
    args = ["demo", "--quick", "--no-classifiers", "--noise-seed", "0", "--out", str(out), "--report", str(report)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(demo_plan, "QUICK", TEST_SIZES)  # for the module's every demo command (the rerun's too)
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        mtimes = {p: p.stat().st_mtime_ns for p in (out / "model-nonprivate").rglob("*") if p.is_file()}
        again = CliRunner().invoke(cli, [*args, "--verbose"], catch_exceptions=False)  # resumes: nothing left to run
        assert again.exit_code == 0, again.output
        yield DemoRun(out=out, report=report, args=args, output=again.output, compact=result.output, mtimes=mtimes)


def _exposure(results):
    rows = {r.frequency: r for r in results["exposure"].rows}
    return rows[max(rows)], rows[0]


@pytest.mark.slow
def test_nonprivate_model_memorizes_its_most_repeated_canaries(demo_run):
    out, output = demo_run.out, demo_run.output
    results = read_attack_dir(out / "attack-nonprivate")
    assert not results.claimed.private
    top, controls = _exposure(results)
    assert top.frequency == 100 and top.mean > controls.mean + MARGIN_BITS, (top.mean, controls.mean)
    assert top.vs_controls.p_value < 0.05  # 5 vs 5 canaries: the smallest p possible is 1/252
    exact = next(r for r in results["reconstruction"].rows if r.frequency == top.frequency)
    assert exact.exact_matches >= 1
    accuracy = [json.loads(line).get("mlm_accuracy") for line in (out / "model-nonprivate" / "metrics.jsonl").open()]
    assert [a for a in accuracy if a is not None][-1] > 0.12  # it learned the language too, not only the canaries
    # the verdict line: the label and claim, then (when the verdict states it) the held-out utility, then the canaries
    assert re.search(r"^  nonprivate \(non-private\): (.*; )?100x canaries", output, re.M) and "MEMORIZED" in output
    # it started from the public model (trained on public.jsonl only, never attacked) and says so
    assert "  - public: public model (trained on public.jsonl only" in output
    assert f"started from {out / 'model-public'}" in output


@pytest.mark.slow
def test_dp_model_canaries_sit_with_the_controls_and_no_bound_beats_the_claim(demo_run):
    out, output = demo_run.out, demo_run.output
    private = json.loads((out / "model-dp-eps8" / "privacy.json").read_text())
    eps = accounting.epsilon(accounting.event_from_json(private["event"]), private["delta"])
    assert private["private"] and eps <= 8.0 + 1e-9
    assert f"epsilon = {format_up(eps, 3)} at delta = {format_up(private['delta'], 2)} for model/ only" in output
    assert "only group privacy (1x: (" in output and "100x: no guarantee" in output
    assert "explicit --noise-seed" in output  # the test's fixed noise is said, never hidden

    results = read_attack_dir(out / "attack-dp-eps8")
    assert results.claimed.private and abs(results.claimed.epsilon - eps) < 1e-9
    rows = {r.frequency: r for r in results["exposure"].rows}
    assert rows[1].vs_controls.p_value > 0.05 and rows[10].vs_controls.p_value > 0.05  # one-sided Mann-Whitney
    nonprivate_top, _ = _exposure(read_attack_dir(out / "attack-nonprivate"))
    assert rows[100].mean < nonprivate_top.mean - DP_GAP_BITS
    bounds = [t.epsilon_lower_bound for r in results.attacks if isinstance(r, MiaResult) for t in r.tasks]
    bounds += [b.epsilon for a in membership_audits(results) for b in a.audit.bounds]
    assert bounds and max(bounds) < eps
    # N came from the data (treated as public): the replace-one epsilon, recomputed from the event, is stated too
    replace_one = accounting.epsilon_replace_one(accounting.event_from_json(private["event"]), private["delta"])
    # the test's explicit --noise-seed is a condition of the epsilon, said in the claim line
    head = (
        f"dp-eps8 (epsilon = {format_up(eps)} at delta = {format_up(private['delta'], 2)} (it holds only while the "
        f"--noise-seed given to training stays secret; add/remove; N treated as public: replace-one epsilon = "
        f"{format_up(replace_one)})): "
    )
    assert re.search("^  " + re.escape(head) + r"(.*; )?100x canaries", output, re.M)
    # what its 100x canaries are (a group the claim does not cover), never "MEMORIZED" as if the claim failed
    line = next(x for x in output.splitlines() if x.startswith("  dp-eps8 ("))
    assert "MEMORIZED" not in line
    assert ("above the controls: each is a group of 100 rows" in line) == (rows[100].vs_controls.p_value < 0.05)
    assert private["init_from"]["path"] == str(out / "model-public")  # from the public model
    assert f"<= claimed {format_up(eps)}" in output  # the headline (corrected over audits) stays below the claim


@pytest.mark.slow
def test_one_run_audit_proves_the_nonprivate_leak_and_stays_below_the_dp_claim(demo_run):
    """The designed canaries' one-run audit: coin-flip new-token canaries inserted once. The
    non-private model's are told apart (its proof bound is well above 0); the epsilon-8 model's bound stays below
    its claim (a proof bound above it would say the trainer broke its guarantee)."""
    from dpaudit.verdict.headline import headline_of

    out, output = demo_run.out, demo_run.output
    nonprivate = read_attack_dir(out / "attack-nonprivate-audit")
    head = headline_of(nonprivate)
    assert [r.attack for r in nonprivate.attacks] == ["canary"] and nonprivate["canary"]["canaries"].auc > 0.95
    assert head.best.kind == "proof" and head.best.epsilon >= 2.0, head.text()
    private = headline_of(read_attack_dir(out / "attack-dp-eps8-audit"))
    assert (
        private.claim.epsilon is not None and private.best.epsilon < private.claim.epsilon and not private.contradicted
    )
    assert "nonprivate-audit (non-private): 200 coin-flip new-tokens canaries" in output
    assert f"<= claimed {format_up(private.claim.epsilon)}" in output


@pytest.mark.slow
def test_one_report_and_a_rerun_skips_every_finished_stage(demo_run):
    out, report, output = demo_run.out, demo_run.report, demo_run.output
    html = report.read_text(encoding="utf-8")
    assert "attack-nonprivate" in html and "attack-dp-eps8" in html
    assert f"Report: {report}" in output and "intent classifiers: not run (--no-classifiers)" in output
    verify_run_dir(out / "data", schema_prefix="dpaudit.inject/")
    # the --verbose rerun: 2 injects, the public model, 4 trainings, 4 attacks (the one-run audit's included) skipped;
    # the report is rewritten
    assert output.count("(verified): skipped") == 11
    assert {p: p.stat().st_mtime_ns for p in (out / "model-nonprivate").rglob("*") if p.is_file()} == demo_run.mtimes


#: How far the estimate said before the demo may be from the CPU its stages measured (either way).
COST_FACTOR = 3.0


@pytest.mark.slow
def test_the_cost_said_first_is_within_3x_of_the_measured_cpu(demo_run):
    """The estimate printed before the first stage (the measured table at this machine's probe speed) against the
    CPU seconds the same run's stages measured (``stage-times.json``): in all and per training, within 3x; the rerun,
    with nothing left to run, estimates nothing."""
    from dpaudit.common.cost_model import estimate
    from dpaudit.demo.cost import plan_work

    lines = demo_run.compact.split("\n")
    assert lines[1].startswith("estimated CPU time: ") and lines[3].startswith(
        "estimated wall time at the current load"
    )
    assert "estimated CPU" not in demo_run.output
    measured = {
        row["name"]: row["cpu_s"] for row in json.loads((demo_run.out / "stage-times.json").read_text())["stages"]
    }
    plan = demo_plan.build_plan(demo_run.out, TEST_SIZES, seed=0, report=demo_run.report, classifiers=False)
    works = dict(zip((s.name for s in plan.stages), plan_work(plan.stages, TEST_SIZES), strict=True))
    said = estimate(list(works.values()))
    print(f"demo cost: estimated {said.cpu:.0f} CPU s (speed x{said.speed:.2f}), measured {sum(measured.values()):.0f}")
    assert 1 / COST_FACTOR < said.cpu / sum(measured.values()) < COST_FACTOR
    for name, work in works.items():
        if name.startswith("train-"):
            assert 1 / COST_FACTOR < work.cpu(said.speed) / measured[name] < COST_FACTOR, name


#: Lines the demo's terminal may print without --verbose, and its closing summary.
TERMINAL_LINES, SUMMARY_LINES = 80, 25


@pytest.mark.slow
def test_terminal_says_each_caveat_once_and_ends_with_the_four_answers(demo_run):
    """Without --verbose: at most 80 lines; each stage's full output in its log; each caveat once (the noise-seed
    warning of four trainings in full once, then by name), none where it does not apply; the summary answers the four
    questions in at most 25 lines."""
    compact, out = demo_run.compact, demo_run.out
    lines = compact.split("\n")
    print(f"demo terminal: {compact.count(chr(10))} lines without --verbose, {demo_run.output.count(chr(10))} with it")
    assert compact.count("\n") <= TERMINAL_LINES
    # what is about to run, before it runs
    assert lines[0].startswith("dpaudit demo --quick: 12 stages, 5 models (public, nonprivate, dp-eps8, ")
    assert compact.count("warning: --noise-seed is below 2^64") == 1 and "warning again" in compact
    logs = sorted((out / ".demo" / "logs").glob("*.log"))
    assert len(logs) == 12 and all(p.read_text(encoding="utf-8").startswith("$ dpaudit ") for p in logs)
    assert "--noise-seed is below 2^64" in (out / ".demo" / "logs" / "train-dp-eps8.log").read_text(encoding="utf-8")
    assert "N is treated as public" not in (out / ".demo" / "logs" / "train-public.log").read_text(encoding="utf-8")
    for caveat in ("[group privacy] ", "[N public] ", "[noise seed] ", "[what epsilon covers] ", "[telemetry] "):
        assert compact.count(caveat) == 1, caveat  # in full once; each model line names the ones that apply to it
    models = {line.split(":")[0].strip("- "): line for line in lines if line.startswith("  - ")}
    assert "[" not in models["public"] and "N public" not in models["nonprivate"]  # no DP: no q = batch/N caveat
    assert "group privacy" in models["dp-eps8"] and "N public" in models["dp-eps8-audit"]
    assert "MEMORIZED" not in compact  # the long verdict lines are --verbose's
    # the blind-baseline note only where the attack or the baseline has a signal to explain
    from dpaudit.report.membership import distribution_shift_notes

    notes = [n for d in out.glob("attack-*") for n in distribution_shift_notes(read_attack_dir(d))]
    assert ("distribution shift" in compact) == bool(notes), notes
    start = next(i for i, line in enumerate(lines) if line.startswith("At a glance"))
    summary = [line for line in lines[start:] if line.strip()]
    assert len(summary) <= SUMMARY_LINES
    text = "\n".join(summary)
    for question in ("Does it leak?", "Does DP fix it?", "At what cost?", "Is the claim consistent?"):
        assert question in text
    rows = {line.split()[0]: line for line in summary if line.startswith("  ") and line.split()[0] in models}
    assert set(rows) == {"nonprivate", "dp-eps8", "nonprivate-audit", "dp-eps8-audit"}
    assert "non-private" in rows["nonprivate"] and ("consistent" in rows["dp-eps8-audit"])


@pytest.mark.slow
def test_demo_page_answers_the_four_questions_on_the_first_screen(demo_run, tmp_path):
    """The first 1366 x 768 of the demo's comparison page in a real browser: does it leak, does DP fix it, at what
    cost, is the claim consistent, and a verdict badge per model, each read from the attack directories' figures."""
    from tests.report.test_report_browser import _chromium, assert_answers_on_first_screen, first_screen

    out, report = demo_run.out, demo_run.report
    browser = _chromium()
    badges = assert_answers_on_first_screen(
        browser, tmp_path, report, ["nonprivate", "dp-eps8", "nonprivate-audit", "dp-eps8-audit"]
    )
    assert badges["nonprivate"] == badges["nonprivate-audit"] == "non-private"
    # the DP models' badges are the stored headlines' verdicts, never recomputed
    for label in ("dp-eps8", "dp-eps8-audit"):
        head = read_attack_dir(out / f"attack-{label}").headline
        assert head is not None and not head.contradicted and not head.mechanism_refuted
        assert badges[label] == ("could not be tested" if head.powerless else "consistent"), (label, badges)
    leak, fix, cost, claim = [text for kind, _, text, _ in first_screen(browser, tmp_path, report)[1] if kind == "dd"]
    top, controls = _exposure(read_attack_dir(out / "attack-nonprivate"))
    assert leak.startswith("Yes") and f"{top.mean:.1f} of 13.3 bits vs {controls.mean:.1f}" in leak
    dp_top, _ = _exposure(read_attack_dir(out / "attack-dp-eps8"))
    assert fix.split(" — ")[0] in ("Yes", "Partly") and f"from {top.mean:.1f} to {dp_top.mean:.1f} bits" in fix
    assert "points vs public start" in cost and "→" in cost  # against the public start the DP model began from
    assert claim.split(" — ")[0] in ("Yes", "Yes, where testable")


@pytest.mark.slow
def test_demo_page_has_a_row_per_model_in_headless_chromium(demo_run, tmp_path):
    """The demo's comparison page in a real browser: the models table, one row per model attacked, each with its
    claim (rounded up as the verdict prints it), a utility beside its baseline and its public start, and the 100x
    exposure."""
    from dpaudit.demo.verdict import audit_line
    from tests.report.test_report_browser import _cells, _chromium, _dump_dom

    out, report = demo_run.out, demo_run.report
    rows = _cells(_dump_dom(_chromium(), tmp_path, report))
    labels = [r[0].split()[0] for r in rows]
    assert labels == ["nonprivate", "dp-eps8", "nonprivate-audit", "dp-eps8-audit"]  # the demo's --label names
    claims = {label: r[1] for label, r in zip(labels, rows)}
    eps = read_attack_dir(out / "attack-dp-eps8").claimed.epsilon
    assert claims["nonprivate"] == "inf" and claims["dp-eps8"] == format_up(eps)
    nonprivate, dp = rows[0], rows[1]
    assert re.match(r"\d+\.\d% \(\d+\.\d%\)", nonprivate[2]) and re.match(r"\d+\.\d% \(\d+\.\d%\)", dp[2])
    assert re.fullmatch(r"\d+\.\d%", nonprivate[3]) and nonprivate[3] == dp[3]  # both from the public model
    assert rows[2][3] == "–"  # the one-run audit's models start from random weights
    assert "(100×, p = " in nonprivate[4] and re.search(r"\d+/5 at 100×", nonprivate[5])
    assert rows[2][6].startswith("ε ≥ ") and "(proof)" in rows[2][6]  # the one-run audit: a proof
    audit = read_attack_dir(out / "attack-nonprivate-audit")
    task = next(t for r in audit.attacks if r.attack == "canary" for t in r.tasks if t.task == "canaries")
    line = audit_line("audit", audit)  # n/a where the coin flips left fewer than 100 non-members for 1% FPR
    assert ("TPR at 1% FPR n/a (needs >= 100 non-members" in line) == (task.n_nonmembers < 100), line
