"""Retained: what a node keeps of a topic's events, trimmed by count and age."""

from __future__ import annotations

from scribe.config import TopicRetention
from scribe.stream import Retained
from scribe.wire_records import EventBody

CONFIG = TopicRetention(count=2, bytes=256 << 20, seconds=60.0, min_age=3.0)


def body(seq: int) -> EventBody:
    return EventBody("t", f"{seq:02x}", seq, {}, b"", "ab", 0.0)


def kept(retained: Retained) -> list[int]:
    return list(retained.events)


def test_past_the_count_young_events_stay_until_the_oldest_is_old_enough() -> None:
    retained = Retained()
    for seq in range(1, 6):
        retained.add(0.0, body(seq))
        retained.trim(0.0, CONFIG)
    assert kept(retained) == [1, 2, 3, 4, 5]
    retained.add(2.9, body(6))
    retained.trim(2.9, CONFIG)
    assert kept(retained) == [1, 2, 3, 4, 5, 6]
    retained.add(3.1, body(7))
    retained.trim(3.1, CONFIG)  # 1..5 are now older than retain_min_age: back to the count
    assert kept(retained) == [6, 7]
    assert retained.complete_from == 6 and set(retained.by_msg) == {"06", "07"}


def test_an_older_event_arriving_late_is_trimmed_by_its_own_age() -> None:
    retained = Retained()
    retained.add(10.0, body(5))
    retained.trim(10.0, CONFIG)
    retained.add(10.0, body(6))
    retained.add(10.0, body(7))
    retained.trim(10.0, CONFIG)  # three young events: kept, nothing to look at until 13
    retained.add(0.0, body(4))  # a copy kept since 0 (say, adopted from a replica)
    retained.trim(11.0, CONFIG)
    assert kept(retained) == [5, 6, 7]


def test_events_older_than_retain_seconds_go_whatever_the_count() -> None:
    retained = Retained()
    retained.add(0.0, body(1))
    retained.add(30.0, body(2))
    retained.trim(30.0, CONFIG)
    retained.trim(60.5, CONFIG)
    assert kept(retained) == [2]


def sized(seq: int, size: int) -> EventBody:
    return EventBody("t", f"{seq:032x}", seq, {}, b"x" * size, "ab" * 16, 0.0)


def test_past_retain_bytes_the_oldest_go_once_old_enough_and_the_bytes_follow() -> None:
    config = TopicRetention(count=1000, bytes=1000, min_age=3.0, seconds=60.0)
    retained = Retained()
    for seq in range(1, 6):
        retained.add(0.0, sized(seq, 300))  # 1,500 bytes: 500 over the bound
    retained.trim(1.0, config)
    assert kept(retained) == [1, 2, 3, 4, 5]  # all younger than retain_min_age
    retained.trim(3.5, config)  # old enough now: the oldest go until within the bound
    assert kept(retained) == [3, 4, 5] and retained.payload_bytes == 900
    retained.add(3.5, sized(6, 100))
    retained.trim(7.0, config)  # exactly at the bound is within it
    assert kept(retained) == [3, 4, 5, 6] and retained.payload_bytes == 1000
    retained.add(7.0, sized(7, 1))  # one byte past the bound: the oldest goes
    retained.trim(11.0, config)
    assert kept(retained) == [4, 5, 6, 7] and retained.payload_bytes == 701


def with_ttl(seq: int, ts: float, ttl: float | None) -> EventBody:
    return EventBody("t", f"{seq:02x}", seq, {}, b"", "ab", ts, ttl)


def test_an_event_past_its_ttl_leaves_when_it_is_the_oldest() -> None:
    roomy = TopicRetention(count=100, bytes=256 << 20, seconds=600.0, min_age=3.0)
    retained = Retained()
    retained.add(0.0, with_ttl(1, 0.0, 10.0))  # expires at 10 (the clock of ts)
    retained.add(0.0, with_ttl(2, 0.0, None))
    retained.add(0.0, with_ttl(3, 0.0, 5.0))  # expires at 5, behind one that stays
    retained.trim(9.99, roomy)
    assert kept(retained) == [1, 2, 3]
    retained.trim(10.0, roomy)  # at its ttl exactly it is gone (ts + ttl <= now)
    assert kept(retained) == [2, 3] and retained.complete_from == 2
    # 3 waits behind 2 (oldest first, as retention trims), and is not delivered meanwhile
    assert with_ttl(3, 0.0, 5.0).expired(10.0)


def test_the_ttl_counts_on_the_wall_clock_through_the_clock_offset() -> None:
    offset = TopicRetention(count=100, bytes=256 << 20, seconds=600.0, min_age=3.0,
                            clock_offset=1000.0)
    retained = Retained()
    retained.add(0.0, with_ttl(1, 1000.0, 10.0))  # published at wall time 1000 = core 0
    retained.trim(9.0, offset)
    assert kept(retained) == [1]
    retained.trim(10.0, offset)
    assert kept(retained) == []


def test_a_young_ttl_event_is_looked_at_again_when_its_ttl_ends_not_only_at_min_age() -> None:
    tight = TopicRetention(count=1, bytes=256 << 20, seconds=600.0, min_age=30.0)
    retained = Retained()
    retained.add(0.0, with_ttl(1, 0.0, 2.0))
    retained.add(0.0, with_ttl(2, 0.0, None))
    retained.trim(1.0, tight)  # over the count, but young: kept, untouchable for a while
    assert kept(retained) == [1, 2]
    retained.trim(2.0, tight)  # the ttl ends before min_age does
    assert kept(retained) == [2]
