"""Retained: what a node keeps of a topic's events, trimmed by count and age."""

from __future__ import annotations

from scribe.config import TopicRetention
from scribe.messages import EventBody
from scribe.stream import Retained

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
