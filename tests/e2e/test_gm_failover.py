"""Every GM replica serves LCs, and losing one loses nothing.

Two `sedna-gm` processes on one Lease (10 s lease, 8 s renew deadline, 1 s retry) on a
`sedna-devcluster`, behind a TCP round-robin proxy that stands for the Service
(bench/service_proxy.py), and 10 `sedna-lc` processes (edge-node-1..10) whose GM_ADDRESS is the
proxy, so their sessions spread over both replicas. A worker per LC posts JointInferenceService
reports continuously (each with the next `inferenceNumber`); one replica is SIGKILLed (the
leader, or the follower). The scenario is bench/gm_failover.py's `failover`; the bench prints the
figures at 100 LCs. Only correctness and loose bounds are asserted here:

- every report answered 200 reaches the CR status (0 lost), none moves backwards, and every
  LC's outbox drains;
- the sessions on the surviving replica never drop: their proxied connections stay open, the
  LCs start no new session and their /readyz says `connected` at every poll, and the survivor's
  hub counts no dead, broken or replaced session, only the moved ones as opened;
- the LCs whose replica died reconnect through the proxy to the surviving one;
- the surviving replica leads (when the leader died) or keeps leading (when the follower died),
  and reconciles: a JI created after the kill gets its Deployments and Service;
- every CR's status is current again (shows a report posted after the kill) within 30 s; the
  time is printed, the target (< 5 s) is the bench's.
"""

from __future__ import annotations

import pytest

from bench.gm_failover import Election, FailoverResult, failover, secs

LCS = 10
# shorter than the chart's (15/10/2) so the test is quicker, with a renew deadline a busy 2-core
# machine still meets: a replica that misses it exits, which would fail the test for no bug
ELECTION = Election(lease=10.0, renew=8.0, retry=1.0)
CURRENT_WITHIN = 30.0  # loose: the target is < 5 s (bench/gm_failover.py measures it)
# seconds of load by the replica killed 6 s into it (KILL_AT): the leader's successor leads some 10 s
# after the kill (the lease), so the load goes on a few seconds past that; with the follower killed
# nothing changes hands, and 8 s after the kill cover the moved LCs' reconnects (about a second)
LOAD_SECONDS, KILL_AT = {"leader": 20.0, "follower": 14.0}, 6.0


async def run(kill: str, tmp_path) -> FailoverResult:
    r = await failover(LCS, kill=kill, seconds=LOAD_SECONDS[kill], kill_at=KILL_AT, rate=5.0, wait=60.0,
                       election=ELECTION, workdir=tmp_path)
    print(f"\n{kill} killed: status current again {secs(r.current_s)} after the kill; {len(r.moved)} LCs moved, "
          f"reconnected within {secs(max(r.reconnect_s, default=None))}; the survivor leads after "
          f"{secs(r.leads_s)}; the JI created after the kill has its children after {secs(r.children_s)}")
    return r


def check_nothing_lost_and_survivor_untouched(r: FailoverResult) -> None:
    where = f"(logs in {r.log_dir})"
    assert r.exited == [], f"processes exited on their own: {r.exited} {where}"
    # the round robin put sessions on both replicas, so the kill moved some and left others
    assert r.moved and r.stayed and len(r.moved) + len(r.stayed) == LCS, (r.moved, r.stayed)
    assert r.reports_ok > LCS * 20, r.reports_ok
    assert r.lost == 0, f"{r.lost} of {r.reports_ok} reports answered 200 never reached the status {where}"
    assert r.regressions == 0, f"a watch showed an older value after a newer one {where}"
    assert r.drained_s is not None, f"outboxes not empty 60 s after the load {where}"
    assert r.visible_s is not None, f"not every JI shows its last report 60 s after the load {where}"
    assert r.dropped_nodes == set(), f"sessions dropped on the surviving replica: {r.dropped} {where}"
    assert r.link_polls >= len(r.stayed) * 10, r.link_polls
    assert r.hub == {"opened": len(r.moved), "replaced": 0, "dead": 0, "broken": 0}, f"{r.hub} {where}"
    assert r.not_moved == [] and len(r.reconnect_s) == len(r.moved), f"{r.not_moved} {r.reconnect_s} {where}"
    assert r.survivor_sessions == LCS
    assert r.current_s is not None and r.current_s <= CURRENT_WITHIN, f"{r.current_s} {where}"
    assert r.children_s is not None, f"the JI created after the kill got no children {where}"
    assert r.survivor_leads


@pytest.mark.timeout(300)
async def test_leader_killed_its_lcs_move_nothing_lost_the_other_leads_and_reconciles(tmp_path):
    r = await run("leader", tmp_path)
    check_nothing_lost_and_survivor_untouched(r)
    assert r.transitions == 1
    # it took the Lease once it expired: at most its duration plus a few retries on a busy machine
    assert r.leads_s is not None and r.leads_s <= ELECTION.lease + 10
    # nothing reconciled the new JI before the Lease could change hands: the follower does not
    # reconcile until it leads
    assert r.children_s >= ELECTION.lease - ELECTION.renew


@pytest.mark.timeout(300)
async def test_follower_killed_its_lcs_move_nothing_lost_the_leader_keeps_reconciling(tmp_path):
    r = await run("follower", tmp_path)
    check_nothing_lost_and_survivor_untouched(r)
    assert r.transitions == 0
    # the leader never stopped: the new JI is reconciled well before a lease could change hands
    assert r.children_s < ELECTION.lease
