"""One cause is named once (arbiter rule 7): two findings that advise making the same code
cheaper measure the same busy threads' time from two sides. The second is folded into the verdict
(`also`) instead of being named beside it, whichever side scored higher on this attach; a second
finding that acts otherwise (a lock wait) or on other code is still a second cause."""

from __future__ import annotations

import dataclasses
import json

from diagnose.checks.arbiter import (CRITICAL, next_cause, rank, rank_key, same_work, shared_code, symptom_of,
                                     within_noise)
from diagnose.checks.base import (ScoreBasis, Site, amdahl, make_finding, more_cores_lever, ramp,
                                  remove_work_lever)
from diagnose.checks.engine import order_of, verdict_for
from diagnose.checks.spec import CheckSettings
from diagnose.render.html import render_html
from diagnose.render.markdown import render_markdown
from diagnose.report.model.codec import encode
from tests.report_data import as_verdict, decided_report

SAMPLES = 2000
APP = "/srv/app.py"


def site(function: str, share: float = 0.4) -> Site:
    return Site(function, APP, 10, share)


def gil(share: float, samples: int = SAMPLES, holder: str = "spin", room: float = 2.0):
    """gil_contention as the check builds it: a ramp on the GIL-wait share, Amdahl capped by the
    cores, the holder's code as its sites and its first lever vectorising the holder."""
    score_of = lambda s: ramp(s, 0.1, 0.45)  # noqa: E731
    gain_of = lambda s: min(amdahl(s), room)  # noqa: E731
    return make_finding("gil_contention", CheckSettings(title="Threads wait for the GIL"),
                        score_of(share), f"{share:.0%} waits for the GIL", {"gil_wait_share": share},
                        sites=[site(holder), site("spin_more", 0.2)],
                        advice=[f"Vectorise {holder}."], gain=(gain_of(share), "estimate"),
                        samples=samples,
                        levers=[remove_work_lever(0.6, holder, "busy time"),
                                more_cores_lever(gain_of(share), "estimate")],
                        basis=ScoreBasis("gil_wait_share", score_of, gain_of))


def busy(share: float, hottest: str = "spin", gain: float = 2.0, samples: int = SAMPLES):
    """cpu_bound: busy threads in pure Python, hottest by self time first; the cores' gain."""
    score_of = lambda s: ramp(s, 0.5, 0.85)  # noqa: E731
    return make_finding("cpu_bound", CheckSettings(title="Busy threads saturate the CPU: x"),
                        score_of(share), f"busy {share:.0%}", {"busy_share_of_request_time": share},
                        sites=[site(hottest, 0.5), site("helper", 0.1)],
                        advice=[f"{hottest} is pure Python: vectorise it."], gain=(gain, "estimate"),
                        samples=samples,
                        levers=[remove_work_lever(0.5, hottest, "busy time"),
                                more_cores_lever(gain, "estimate")],
                        basis=ScoreBasis("busy_share_of_request_time", score_of, lambda s: gain))


def preprocess(share: float, function: str = "decode", samples: int = SAMPLES):
    score_of = lambda s: ramp(s, 0.25, 0.65)  # noqa: E731
    return make_finding("preprocess_bound", CheckSettings(title="Preprocessing dominates: x"),
                        score_of(share), f"{share:.0%} preprocessing",
                        {"preprocess_share_of_busy": share}, sites=[site(function, share)],
                        advice=[f"Make {function} cheaper."], gain=(amdahl(share), "estimate"),
                        samples=samples, levers=[remove_work_lever(share, "preprocessing", "busy time")],
                        basis=ScoreBasis("preprocess_share_of_busy", score_of, amdahl))


def lock(share: float, where: str = "handle"):
    """lock_contention: the acquire line's function as its site, no lever that removes work."""
    score_of = lambda s: ramp(s, 0.05, 0.4)  # noqa: E731
    return make_finding("lock_contention", CheckSettings(title="Lock contention: x"),
                        score_of(share), f"{share:.0%} waits on a lock", {"lock_wait_share": share},
                        sites=[site(where)], advice=["Shrink the critical section."],
                        gain=(amdahl(share), "estimate"), samples=SAMPLES,
                        basis=ScoreBasis("lock_wait_share", score_of, amdahl))


def compute(share: float, sites: tuple[str, ...] = ("forward",), samples: int = 200):
    score_of = lambda s: ramp(s, 0.4, 0.8)  # noqa: E731
    return make_finding("compute_bound", CheckSettings(title="The cores are busy with model compute"),
                        score_of(share), "cores busy with the model", {"model_share_of_busy": share},
                        sites=[site(f) for f in sites], advice=["Use a cheaper model."],
                        gain=(1.0, "estimate"), samples=samples,
                        basis=ScoreBasis("model_share_of_busy", score_of))


def stage(gain: float, score: float = 50, function: str = "batcher_loop"):
    """stage_bound as a pooled batcher gives it: a flat score, the stage's loop as its site, the
    utilization law's gain for more stage threads (no lever: its advice adds threads)."""
    return make_finding("stage_bound", CheckSettings(title="One pipeline stage limits: x"), score,
                        "stage batcher is busy", {"stage_busy_share": 0.95},
                        sites=[site(function)], advice=["Give batcher 2 threads."],
                        gain=(gain, "estimate"), samples=70)


def spinning_pair():
    """Threads spinning pure Python: the GIL's waiters (86, about 1.67x: 1.61-1.73) and the busy
    threads on the holder's code (77, the same 1.67x from more cores): their gains tie."""
    return [busy(0.77, gain=min(amdahl(0.4), 2.0)), gil(0.4)]


def named(findings) -> tuple[str | None, str | None, tuple[str, ...]]:
    verdict = verdict_for(rank(findings, order_of))
    return verdict.primary, verdict.co_primary, verdict.also


def test_busy_threads_on_the_gil_holders_code_are_folded_into_the_gil_verdict_not_named_beside_it():
    # Threads spinning pure Python: both critical, their predicted gains tied within the GIL's
    # interval. Without rule 7 the busy finding would be named beside the GIL on every attach.
    spinning, waiting = spinning_pair()
    assert spinning.score_range[0] < CRITICAL <= spinning.score_range[1]
    assert waiting.gain_range[0] < spinning.predicted_gain < waiting.gain_range[1]
    assert within_noise(waiting, spinning, order_of) and same_work(waiting, spinning)
    verdict = verdict_for(rank([spinning, waiting], order_of))
    assert (verdict.primary, verdict.co_primary, verdict.also) == ("gil_contention", None, ("cpu_bound",))
    assert "cpu" not in verdict.headline.lower()  # the headline names the cause once
    assert verdict.first_advice == ("Vectorise spin.",)
    # The folded finding is the same cause measured again: its severity is the verdict's.
    assert verdict.severity == "critical"


def test_whichever_side_scored_higher_the_causal_order_names_the_cause():
    """A loosely known GIL share (low confidence) behind a well-measured, surely critical busy
    finding: rule 6 would hand the lead to the busy finding on this attach and back on the next.
    Both point at the same code, so the causal order names it on every attach."""
    loose = gil(0.38, samples=40)
    assert loose.low_confidence and loose.score_range[0] < CRITICAL
    for spinning in (busy(0.95), busy(0.8), busy(0.7)):
        assert named([spinning, loose]) == ("gil_contention", None, ("cpu_bound",))


def test_a_lock_wait_beside_a_cpu_bound_preprocess_is_still_a_second_cause():
    # The lock is taken in the very function that preprocesses: the same code, but waiting on a
    # lock is no work to make cheaper, so the lock is a cause of its own.
    decode, locked = preprocess(0.6, function="handle"), lock(0.6, where="handle")
    assert not symptom_of(decode, locked) and not symptom_of(locked, decode)
    assert within_noise(decode, locked, order_of)
    assert named([decode, locked]) == ("lock_contention", "preprocess_bound", ())


def test_findings_that_make_different_code_cheaper_are_two_causes():
    decode, spinning = preprocess(0.66, function="decode"), busy(0.9, hottest="score_fn", gain=1.0)
    assert not symptom_of(decode, spinning) and not symptom_of(spinning, decode)
    assert same_work(preprocess(0.66, function="spin"), busy(0.9, hottest="spin"))


def test_the_next_cause_after_a_folded_symptom_is_the_one_that_may_share_the_verdict():
    # GIL waits behind tokenize (2.0x, capped by the cores), the preprocess finding on tokenize
    # too (2.0x), and a lock wait whose gain (1.89x: 1.81-1.97) ties the GIL's (1.92-2.0): the
    # lock, ranked third behind the folded GIL waits, is the second cause. At equal gains the
    # work (preprocessing) names the cause before its mechanism (the GIL it holds).
    waiting = gil(0.5, holder="tokenize", room=2.0)
    tokenizing = preprocess(0.5, function="tokenize")
    locked = lock(0.47)
    found = [waiting, tokenizing, locked]
    assert [f.id for f in sorted(found, key=lambda f: rank_key(f, order_of(f)))] == [
        "preprocess_bound", "gil_contention", "lock_contention"]
    assert next_cause(sorted(found, key=lambda f: rank_key(f, order_of(f)))) is locked
    assert named(found) == ("lock_contention", "preprocess_bound", ("gil_contention",))
    # Without the lock beside it, the GIL's finding is never named beside the tokenizer's.
    assert named([tokenizing, waiting]) == ("preprocess_bound", None, ("gil_contention",))
    # Nor, when the GIL's own advice buys nothing (no core left), is the GIL named beside the
    # tokenizer, which predicts 2x and leads: one cause, named once.
    stuck = gil(0.38, samples=60, holder="tokenize", room=1.0)
    assert named([tokenizing, stuck]) == ("preprocess_bound", None, ("gil_contention",))


def test_a_symptom_too_weak_to_contend_is_neither_named_nor_folded():
    assert named([gil(0.45), busy(0.55)]) == ("gil_contention", None, ())


def test_the_folded_findings_survive_a_json_round_trip():
    verdict = verdict_for(rank(spinning_pair(), order_of))
    back = as_verdict(json.loads(json.dumps(encode(verdict))))
    assert back.also == verdict.also == ("cpu_bound",)
    assert back.named == ("gil_contention",)
    # A verdict with nothing folded in writes the report it wrote before the rule.
    alone = dataclasses.replace(verdict, also=())
    assert "also" not in encode(alone)
    assert as_verdict(json.loads(json.dumps(encode(alone)))).also == ()


def test_a_stage_whose_own_advice_buys_nothing_is_folded_into_the_compute_on_the_same_code():
    # A batcher whose model already fills the cores: more batcher threads would share them (the
    # stage predicts 1.0x), and the model's share is known only to +/-10 points on 60 samples.
    model = compute(0.67, sites=("batcher_loop", "forward"), samples=60)
    assert model.score_range[0] <= 50 <= model.score_range[1]
    assert within_noise(model, stage(1.0), order_of)
    assert named([stage(1.0), model]) == ("compute_bound", None, ("stage_bound",))


def test_a_stage_on_other_code_is_a_second_cause_and_one_on_the_same_code_is_folded():
    model = compute(0.67, sites=("batcher_loop", "forward"), samples=60)
    primary, co, also = named([stage(1.0, function="decode_loop"), model])
    assert {primary, co} == {"compute_bound", "stage_bound"} and also == ()
    # On the model's own stage, the model's compute buys nothing structural: whichever of the two
    # ranks first names that stage, the other is folded, never both named. A stage that predicts
    # 1.6x leads the model at any score (the model predicts nothing), and folds it.
    assert named([stage(1.6), model]) == ("stage_bound", None, ("compute_bound",))
    assert named([stage(1.6, score=30), model]) == ("stage_bound", None, ("compute_bound",))


def test_the_markdown_summary_lists_the_folded_findings_apart_from_the_named_one():
    ranked = rank(spinning_pair(), order_of)
    text = render_markdown(decided_report(verdict_for(ranked), ranked))
    assert "**Primary finding:** `gil_contention` ·" in text and "co-primary" not in text
    assert "**The same cause, also seen as:** `cpu_bound`" in text


def test_a_second_cause_whose_interval_reaches_below_the_warning_line_is_not_named_on_its_point():
    """Forked workers on a saturated machine: a GIL share from ~40 native samples at 93 (63-93),
    the model's compute at 51 (33-67) on another code. Its point crossed the warning line on one
    attach in 30; its interval never lay above it. Named only when surely a warning, or when it
    could be critical."""
    waiting = dataclasses.replace(gil(0.4, holder="tokenize", room=1.0), score=93,
                                  score_interval=(63, 93))
    model = dataclasses.replace(compute(0.6), score=51, score_interval=(33, 67))
    assert within_noise(waiting, model, order_of)
    assert named([waiting, model]) == ("gil_contention", None, ())
    surely = dataclasses.replace(model, score=58, score_interval=(50, 66))
    assert named([waiting, surely])[:2] == ("gil_contention", "compute_bound")


def test_the_html_fallback_lists_the_folded_findings_escaped():
    ranked = rank(spinning_pair(), order_of)
    verdict = verdict_for(ranked)

    def page_of(verdict) -> str:
        report = decided_report(verdict, ranked)
        return render_html({"report": report.to_json()}, report)

    assert '<p id="noscript-also">The same cause, also seen as: cpu_bound</p>' in page_of(verdict)
    hostile = dataclasses.replace(verdict, also=("<script>x</script>",))
    assert "also seen as: &lt;script&gt;x&lt;/script&gt;" in page_of(hostile)
    assert "noscript-also" not in page_of(dataclasses.replace(verdict, also=()))


def test_the_work_names_the_cause_whether_or_not_its_score_interval_clears_the_info_line():
    # A forked tree's tokenizer: the GIL's waiters queue behind it on every core (the cores are
    # full: the GIL predicts nothing), and preprocessing's share is loosely known. Its interval
    # reaching under the info line must not hand the name to the GIL on one attach in two.
    waiting = gil(0.45, holder="normalize", room=1.0)
    for samples in (60, 2000):  # its interval under the line, then clear of it
        tokenizer = preprocess(0.4, function="normalize", samples=samples)
        assert tokenizer.score < waiting.score
        assert named([waiting, tokenizer]) == ("preprocess_bound", None, ("gil_contention",))
    loose = preprocess(0.4, function="normalize", samples=60)
    assert loose.score_range[0] < 25 <= loose.score and not within_noise(waiting, loose, order_of)


def test_work_whose_score_shows_no_problem_does_not_take_the_name():
    waiting = gil(0.45, holder="normalize", room=1.0)
    faint = preprocess(0.3, function="normalize", samples=2000)
    assert faint.score < 25
    assert named([waiting, faint])[0] == "gil_contention"


def test_work_whose_score_could_show_a_problem_takes_the_name_with_the_strength_of_its_twin():
    # A forked tree's tokenizer on one attach: preprocessing scored under the info line on a few
    # samples, its interval across it; the GIL waits behind the same code at a warning. Which
    # name the verdict gives must not turn on where that point score fell.
    waiting = gil(0.3, holder="normalize", room=1.0)
    loose = preprocess(0.32, function="normalize", samples=60)
    assert loose.score < 25 <= loose.score_range[1] and not within_noise(waiting, loose, order_of)
    verdict = verdict_for(rank([waiting, loose], order_of))
    assert (verdict.primary, verdict.co_primary, verdict.also) == ("preprocess_bound", None, ("gil_contention",))
    assert verdict.severity == waiting.severity and not verdict.headline.startswith("Possibly")
    # Another cause is weighed against the rank the name stands on (the GIL's), not against the
    # name's own weak score: a model share under the line beside it shares nothing.
    score_of = lambda s: ramp(s, 0.4, 0.8)  # noqa: E731
    model = make_finding("compute_bound", CheckSettings(title="The cores are busy with model compute"),
                         score_of(0.49), "49% model", {"model_share_of_busy": 0.49},
                         sites=[site("Model.forward")], gain=(1.0, "estimate"), samples=60,
                         basis=ScoreBasis("model_share_of_busy", score_of, lambda s: 1.0))
    assert model.score_range[0] < 25 <= model.score_range[1]
    verdict = verdict_for(rank([waiting, model, loose], order_of))
    assert (verdict.primary, verdict.co_primary) == ("preprocess_bound", None)


def test_the_gil_holders_running_preprocessing_are_the_preprocessing_whatever_sites_each_names():
    # The holders ran tokenize (mostly preprocessing by phase); preprocessing's leading sites
    # on this attach are norm and normalize: no function in common, one phase in common.
    waiting = dataclasses.replace(gil(0.45, holder="tokenize", room=1.0), acts_on="preprocess")
    tokenizer = dataclasses.replace(preprocess(0.4, function="normalize", samples=60), acts_on="preprocess")
    assert not shared_code(waiting, tokenizer) and same_work(waiting, tokenizer)
    assert named([waiting, tokenizer]) == ("preprocess_bound", None, ("gil_contention",))
    # the holders in the model's code: a different phase, so two causes
    elsewhere = dataclasses.replace(waiting, acts_on="model")
    assert not same_work(elsewhere, tokenizer)
    assert named([elsewhere, tokenizer])[0] == "gil_contention"


def test_the_gil_queueing_behind_preprocessing_is_named_preprocessing_even_when_its_share_shows_no_problem():
    # forked_workers on CPython 3.11, 3 attaches in 3: the GIL's holders mostly ran tokenize and
    # normalize, the waits were critical, and preprocessing's own share (32%) put its
    # whole score interval under the info line (4-23), where 3.12's (17-31) reached over it: 3.11
    # named gil_contention, 3.12 and 3.13 preprocess_bound. The GIL is a hop; the phase its
    # holders run is the end of the chain, and names the cause on every CPython.
    waiting = dataclasses.replace(gil(0.48, holder="normalize", room=1.0), acts_on="preprocess")
    weak = dataclasses.replace(preprocess(0.28, function="normalize", samples=600), acts_on="preprocess")
    assert weak.score_range[1] < 25 < waiting.score_range[0]
    assert named([waiting, weak]) == ("preprocess_bound", None, ("gil_contention",))
    assert verdict_for(rank([waiting, weak], order_of)).severity == waiting.severity
    # the holders ran no one phase: the GIL names its own waits
    unphased = dataclasses.replace(waiting, acts_on=None)
    assert named([unphased, weak])[0] == "gil_contention"
    # preprocessing not seen at all (score 0): nothing to name it by
    absent = dataclasses.replace(preprocess(0.05, function="normalize", samples=60), acts_on="preprocess")
    assert absent.score == 0
    assert named([waiting, absent])[0] == "gil_contention"


def test_the_phase_names_a_gil_wait_that_the_causal_order_put_first_of_a_pair():
    # forked_workers on 3.11 on a loaded machine: the model's share (51) led the GIL's waits (36)
    # on its score, the two within the noise; the pair in the causal order put the GIL first,
    # whose holders ran preprocessing. The phase names the pair's first there too.
    waiting = dataclasses.replace(gil(0.24, samples=40, holder="tokenize", room=1.0), acts_on="preprocess")
    model = compute(0.62, samples=60)
    weak = dataclasses.replace(preprocess(0.27, function="tokenize", samples=600), acts_on="preprocess")
    assert model.score > waiting.score > weak.score > 0
    assert named([waiting, model, weak]) == ("preprocess_bound", "compute_bound", ("gil_contention",))


def test_two_findings_that_advise_the_same_change_first_are_one_cause_named_by_the_causal_order():
    # locked_blas on CPython 3.11, 1 attach in 5: OpenBLAS's pool synchronising in 9 of its 10
    # native samples predicted 2.47x from OPENBLAS_NUM_THREADS=1 and took the verdict from the
    # lock its callers queue on, whose first advice is the same knob (1.42x, calibrated).
    fix = {"fix": {"knob": "OPENBLAS_NUM_THREADS", "value": 1}}
    lock = make_finding("lock_contention", CheckSettings(title="Request threads queue on a lock"), 100,
                        "71% waits on the lock", fix, sites=[site("Model.predict")],
                        gain=(1.42, "calibrated"), samples=SAMPLES)
    pool = make_finding("scheduler_overhead", CheckSettings(title="An intra-op pool synchronises"), 100,
                        "90% of the pool's native samples synchronise", fix, gain=(2.47, "estimate"),
                        samples=10)
    assert same_work(lock, pool) and same_work(pool, lock)
    verdict = verdict_for(rank([pool, lock], order_of))
    assert (verdict.primary, verdict.co_primary) == ("lock_contention", None)
    assert verdict.also == ("scheduler_overhead",)
    # another knob, or the same knob at another value, is another change: a second cause
    other = dataclasses.replace(pool, evidence={"fix": {"knob": "OPENBLAS_NUM_THREADS", "value": 2}})
    assert not same_work(lock, other)
    assert verdict_for(rank([other, lock], order_of)).primary == "scheduler_overhead"


def test_a_name_carried_by_the_gils_waits_says_the_chain_not_its_own_title():
    # forked_workers on 3.11: the verdict named preprocess_bound (the phase the GIL's holders
    # run) at its own score 9, in 0 of 3 processes, and its headline read "Preprocessing
    # dominates request time — in 0 of 3 worker processes: 31% ...": the title claimed what
    # the share denied. The waits carry the strength; their words come first, then the code at
    # the end of the chain, without the scope its own share did not reach.
    waiting = dataclasses.replace(gil(0.48, holder="normalize", room=1.0), acts_on="preprocess")
    weak = dataclasses.replace(preprocess(0.28, function="normalize", samples=600), acts_on="preprocess")
    scope = {"worker_processes": 3}
    waiting = dataclasses.replace(waiting, summary=f"in 3 of 3 worker processes: {waiting.summary}",
                                  evidence={**waiting.evidence, **scope, "processes_with_finding": 3})
    weak = dataclasses.replace(weak, summary=f"in 0 of 3 worker processes: {weak.summary}",
                               evidence={**weak.evidence, **scope, "processes_with_finding": 0})
    verdict = verdict_for(rank([waiting, weak], order_of))
    assert verdict.primary == "preprocess_bound"
    assert verdict.headline == ("Threads wait for the GIL — in 3 of 3 worker processes: 48% waits for "
                                "the GIL; at the end of the chain: 28% preprocessing"), verdict.headline
    # a name that shows the problem itself keeps its own words
    strong = dataclasses.replace(preprocess(0.6, function="normalize"), acts_on="preprocess")
    assert verdict_for(rank([waiting, strong], order_of)).headline.startswith("Preprocessing dominates")


def _kernel(score: int, gain: float, function: str = "spin"):
    return make_finding("kernel_work", CheckSettings(title="The kernel does most of the work"), score,
                        "the kernel's share of the CPU", {"kernel_share": 0.28},
                        sites=[site(function)], gain=(gain, "Amdahl"),
                        levers=[remove_work_lever(gain, "if the page faults cost nothing", "Amdahl")])


def test_a_kernel_share_that_only_shows_a_problem_does_not_take_the_name_of_the_code_it_ran_in():
    """kernel_work's line is, without a native sample in a call, where the threads ran (their
    system time spread over their running lines): it shares the GIL holder's code by
    construction. At an info-level share it is a part of that code's time (rule 9's bar, a
    warning, decides both its rank and the name), and the GIL's 20x names the verdict."""
    ranked = rank([gil(0.78), _kernel(30, 1.38)], order_of)
    assert [f.id for f in ranked][:2] == ["gil_contention", "kernel_work"]
    assert verdict_for(ranked).primary == "gil_contention"
    strong = rank([gil(0.78), _kernel(80, 3.5)], order_of)
    assert strong[0].id == "kernel_work"  # a large part of the busy time leads and names it


def test_the_gil_fixture_starved_and_faulting_in_ci_is_gil_contention(tmp_path):
    """fixtures/recorded/gil_contention_busy_machine/py36_starved_faulting_beside_a_spinner: the
    gil_contention fixture on CPython 3.6 in CI beside a spinner, its threads waiting 3 s for a
    core per CPU-second: 28% of its CPU page faults (kernel_work 30) beside the GIL's 78% of the
    request time; the faults took the verdict."""
    from tests.replay import replay

    report = replay("gil_contention_busy_machine", "py36_starved_faulting_beside_a_spinner", tmp_path)
    assert report.verdict.primary == "gil_contention", report.verdict.headline
    assert any(f.id == "kernel_work" and f.score >= 25 for f in report.findings)
