"""The soak's report says how many of the requested card kills happened, and why not all
when the collectives ended first."""

from benchmarks.soak import render


def report(asked: int, done: int) -> dict:
    return {"topology": "dss8440", "collectives": 4, "partitions": [], "by_collective": {},
            "wrong_elements": 0, "wrong_collectives": 0, "bytes_checked": 0,
            "soak_wall_seconds": 1.0, "collectives_per_second": 4.0, "wall_p50_seconds": 0.1,
            "wall_p99_seconds": 0.2, "total_wall_seconds": 2.0, "sim_seconds": 0.0,
            "cards_kills_requested": asked, "cards_killed": done, "actor_restarts": done,
            "runs_failed_by_kills": 0, "misnamed_failures": [],
            "algorithm_refused_then_auto": 0, "errors": []}


def test_a_soak_that_ended_before_its_kills_says_so():
    assert ("kills: only 13 of 20 requested: the collectives ended first"
            in render(report(20, 13)))


def test_a_soak_that_made_every_kill_counts_them():
    assert "kills: 20 of 20 requested" in render(report(20, 20))
