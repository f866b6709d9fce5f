"""Random fault schedules with every fault kind: zero violations over hundreds of seeds.

`make soak` runs the same through `epochlog sim --seeds 20000`.

The seeds are split into slices, one test each, so that pytest-xdist spreads them over
its workers; each slice runs in its worker's process, one seed after the other.
"""

from __future__ import annotations

import pytest

from epochlog_tools.sim.runner import FAULTS, RunSettings, run_seeds

SEEDS = 300
SLICES = 10
SLICE = SEEDS // SLICES
QUICK_SEEDS = 60
"""Run by `make test`; the rest of the SEEDS are marked `scenario` and run in `make e2e`,
which CI runs too: they would take minutes of `make test` on a 2-core machine."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "first",
    [
        pytest.param(s, marks=[pytest.mark.scenario] if s >= QUICK_SEEDS else [])
        for s in range(0, SEEDS, SLICE)
    ],
    ids=lambda s: f"seeds-{s}-{s + SLICE}",
)
def test_random_schedules_keep_every_property(first: int) -> None:
    settings = RunSettings(faults=frozenset(FAULTS))
    failures = []
    acks = 0
    for result in run_seeds(range(first, first + SLICE), settings, jobs=1):
        acks += result.acks
        if result.violations:
            failures.append(result)
    assert not failures, "\n\n".join(r.report or "" for r in failures[:2])
    # The schedules must exercise something: thousands of acknowledged records checked.
    assert acks > SLICE * 100


SOAK_FINDINGS = {
    7176: "a re-created Partition and a restarted controller handed out leaderEpoch 2 again; "
    "the checker measured its ISR lag from the forgotten first publication",
    11457: "the wipe fault took broker 2 outside the ISR, which the leader's pending proposal "
    "then added back: the ISR was one member without its disk, and the fault went on to wipe "
    "brokers 3 and 1, which held the only copies",
    14130: "a controller that restarted while every broker holding t-1 was down or paused met "
    "t-1 re-created, knew no epoch for it and wrote leaderEpoch 0 after 4 had been published",
    401581: "leaderEpoch 2 reached only broker 2, whose disk was then lost; a restarted "
    "controller gave 2 again after a re-create, which the checker took for a reuse although "
    "no broker could remember it (a fresh-seed run, not the soak)",
    2602: "broker 1, cut off from the controller right after it registered, rejoined t-1's "
    "ISR and was taken out when its session expired; the checker counted it as reporting "
    "because no heartbeat was due inside the window it judged, and flagged the removal as one "
    "for lag",
    3295: "broker 2's log started over at the leader's log start (49) and it was then elected "
    "with no epoch below 4; a follower asking where its epoch 3 ended heard 'unknown', "
    "truncated to 0 and started over there, and once elected it gave out offsets 0..48 again",
    9358: "broker 2 reported log end 206, truncated to 203 as a follower and was then elected; "
    "the controller held followers to the epoch start it had recorded (206) over the one the "
    "leader reported (203) and refused every proposal, so t-1 (minInsyncReplicas 2) stayed "
    "at ISR [2] with its high watermark stuck (found by isr-not-restored)",
    4008169: "an unclean election made broker 1 leader of t-1 at offset 59; broker 3, "
    "deposed and not yet told, still answered ListOffsets with latest 72 from its own "
    "earlier epoch after the election, and the checker, which excused offsets going back "
    "only across an unclean election between the two answers in time, flagged the new "
    "leader's 59 (a fresh-seed run, not the soak)",
    19984: "broker 2 started its t-0 log over at the leader's log start (265) on an "
    "OFFSET_OUT_OF_RANGE answer; a second one, for its older fetch at 0, stopped the follower "
    "for good, and it never fetched again",
    7400180: "broker 1's disk was wiped and its t-1 log started over empty at the leader's "
    "log start (407); unclean recoveries since began a history ending at 353, the fetch at "
    "407 was out of range, and the follower stopped for good without the records below 407 "
    "(found by not-replicated; a fresh-seed run, not the soak)",
    7406075: "broker 1, leader of t-0 in epoch 4 and paused past its session, served a "
    "consumer in epoch 4 for 7 ms after broker 2's unclean election in epoch 5; the checker "
    "excused a read only across an unclean election later in time, and flagged it read-lost "
    "(a fresh-seed run, not the soak)",
    9600284: "brokers 3 and 1, t-1's whole ISR, lost their disks to t-0's isr-disk-loss; "
    "the controller restarted and t-1 was deleted and created again before it recovered, and "
    "broker 2's older assignment, the only record left, named it in sync: a loss no record "
    "could show, which the nemesis no longer makes (it re-creates no Partition whose ISR lost "
    "every disk; a fresh-seed run, not the soak)",
}
"""Seeds a soak (`make soak`) failed on, each fixed since: they stay clean."""


@pytest.mark.parametrize("seed", sorted(SOAK_FINDINGS))
def test_seeds_a_soak_found_stay_clean(seed: int) -> None:
    (result,) = run_seeds([seed], RunSettings(faults=frozenset(FAULTS)), jobs=1)
    assert not result.violations, result.report
