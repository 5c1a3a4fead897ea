"""How far behind the replica is, in writes and seconds (`falkordb_replica.behind`): the
bound past which the team server reads the primary instead is taken on these seconds."""

from __future__ import annotations

import pytest

pytest.importorskip("redis")

from memoryd.graph.falkordb_replica import behind


def test_a_replica_holding_every_write_is_not_behind() -> None:
    assert behind(7, 7, [(6, 100.0), (7, 101.0)], now=500.0) == (0, 0.0)


def test_seconds_behind_count_from_the_oldest_write_the_replica_lacks() -> None:
    times = [(5, 100.0), (6, 103.0), (7, 104.5)]
    assert behind(5, 7, times, now=105.0) == (2, 2.0)  # write 6, made at 103.0
    assert behind(6, 7, times, now=105.0) == (1, 0.5)


def test_a_write_older_than_the_kept_times_counts_from_the_oldest_kept() -> None:
    """The writer keeps the times of its last few thousand commits: further behind, the lag
    is at least the oldest it keeps."""
    assert behind(1, 7, [(6, 90.0), (7, 95.0)], now=100.0) == (6, 10.0)
    assert behind(1, 7, [], now=100.0) == (6, None)  # writes older than the writer: unknown
