"""Per-topic retention, exact: which rule gives a topic its bounds (first match wins,
the ``retain_*`` defaults otherwise), the root, replicas and tree-node logs trimmed by
them at the edge and one past, and restored events aged from their publish time so that
those past their topic's ``seconds`` go at the restore and the first tick tells the
store."""

from __future__ import annotations

import pytest

from scribe import ScribeConfig
from scribe import config as scribe_config
from scribe.config import RetentionRule, TopicRetention
from scribe.durability import DropLog, RestoredLog, TrimLog
from scribe.messages import Fill, JoinAck, Pull
from scribe.wire_records import EventBody
from tests.scribe.helpers import MID, TOPIC, join, make, ref
from tests.scribe.test_ordering import caught_up, ev

RULES = (RetentionRule("orders.eu.*", count=3),
         RetentionRule("orders.*", count=10, seconds=60),
         RetentionRule("logs?", bytes=100),
         RetentionRule("audit"))  # no bounds: the defaults, and later rules never apply
CONFIG = ScribeConfig(retain_count=1024, retain_bytes=4096, retain_seconds=300.0,
                      retain_min_age=2.0, retention=(*RULES, RetentionRule("*", count=50)))


@pytest.mark.parametrize(("topic", "bounds"), [
    ("orders.eu.fr", (3, 4096, 300.0)),  # the first rule, though the second matches too
    ("orders.us", (10, 4096, 60.0)),
    ("orders", (50, 4096, 300.0)),  # "orders.*" needs the dot: the catch-all
    ("Orders.us", (50, 4096, 300.0)),  # case-sensitive
    ("logs1", (1024, 100, 300.0)),  # a bound the rule leaves out is the default's
    ("logs12", (50, 4096, 300.0)),  # "?" is one character
    ("audit", (1024, 4096, 300.0)),
])
def test_the_first_matching_rule_gives_the_bounds_over_the_defaults(
        topic: str, bounds: tuple[int, int, float]) -> None:
    assert CONFIG.retention_of(topic) == TopicRetention(*bounds, min_age=2.0)


def test_without_rules_every_topic_has_the_defaults() -> None:
    config = ScribeConfig(retain_count=7, retain_bytes=70, retain_seconds=7.0,
                          retain_min_age=0.5)
    assert config.retention_of("anything") == TopicRetention(7, 70, 7.0, 0.5)
    assert config.retention_of("anything").limits() == {"count": 7, "bytes": 70,
                                                        "seconds": 7.0}


def test_a_topics_retention_is_looked_up_once_and_the_memory_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = ScribeConfig(retention=RULES)
    first = config.retention_of("orders.us")
    assert config.retention_of("orders.us") is first  # the remembered value
    monkeypatch.setattr(scribe_config, "RETENTION_CACHE", 2)
    config.retention_of("logs1")  # the second topic remembered: at the bound
    assert len(config._retention_of) == 2
    assert config.retention_of("orders.eu.x").count == 3  # one past: started over
    assert len(config._retention_of) == 1
    assert config.retention_of("orders.us") == first and config.retention_of(
        "orders.us") is not first


@pytest.mark.parametrize(("rule", "message"), [
    (dict(topics=""), "topics must be a non-empty pattern"),
    (dict(topics="a", count=0), "count must be an integer >= 1, got 0"),
    (dict(topics="a", bytes=-1), "bytes must be an integer >= 1, got -1"),
    (dict(topics="a", count=True), "count must be an integer >= 1, got True"),
    (dict(topics="a", seconds=0), "seconds must be a number > 0, got 0"),
    (dict(topics="a", seconds="5"), "seconds must be a number > 0"),
])
def test_a_rule_with_a_bad_bound_is_refused(rule: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetentionRule(**rule)


def test_edge_values_of_a_rule_are_accepted() -> None:
    rule = RetentionRule("a", count=1, bytes=1, seconds=0.001)
    assert ScribeConfig(retention=[rule]).retention == (rule,)  # a list becomes a tuple


def publish(app, at: float, count: int) -> None:
    for i in range(count):
        app.publish(at, TOPIC, {"x": i}, msg_id=f"{i:02x}")


@pytest.mark.parametrize(("published", "sent", "gone_before"), [
    (3, [1, 2, 3], 0),  # at the topic's count: all kept
    (4, [2, 3, 4], 2),  # one past: the oldest goes
])
def test_the_root_keeps_the_topics_count_not_the_default(
        published: int, sent: list[int], gone_before: int) -> None:
    config = ScribeConfig(retain_count=100, replicas=0, retain_min_age=0,
                          retention=(RetentionRule(TOPIC, count=3),))
    app, host = make(200, root=True, config=config)
    app.subscribe(0.0, TOPIC, "", 1)
    app.deliver(0.0, MID, join(101, ""), 1)
    publish(app, 1.0, published)
    host.clear()
    app.on_direct(5.0, "n101", Pull(TOPIC, ref(101), 0))
    [(_, fill)] = host.sent_of(Fill)
    assert ([b.seq for b in fill.events], fill.gone_before) == (sent, gone_before)


def test_a_rule_for_another_topic_leaves_this_one_at_the_defaults() -> None:
    config = ScribeConfig(retain_count=100, replicas=0, retain_min_age=0,
                          retention=(RetentionRule(TOPIC + "?", count=3),))
    app, _host = make(200, root=True, config=config)
    publish(app, 1.0, 4)
    assert list(app.publishing.retention.root[TOPIC].events) == [1, 2, 3, 4]


@pytest.mark.parametrize(("age", "kept"), [(59.5, [1, 2]), (60.0, [2]), (60.5, [2])])
def test_a_tree_nodes_log_keeps_the_topics_seconds(age: float, kept: list[int]) -> None:
    """An event as old as the topic's ``seconds`` is past it (the default is 300 s)."""
    config = ScribeConfig(retain_min_age=0, retention=(RetentionRule(TOPIC, seconds=60),))
    app, _host = make(101, config=config)
    app.subscribe(0.0, TOPIC, "", 1)
    app.on_direct(0.1, "n200", JoinAck(TOPIC, ref(200), (300, 200), 0))
    caught_up(app, 0, parent=200)
    app.on_direct(1.0, "n200", ev(1, prev=0))
    app.on_direct(2.0, "n200", ev(2, prev=1))
    app.on_direct(1.0 + age, "n200", ev(3, prev=2, x=1))  # a third event: a trim
    log = app.state.trees[TOPIC].stream.log
    assert list(log.events) == [*kept, 3]


# -- restored logs ------------------------------------------------------------------------

LOADED_AT = 1_700_000_070.0  # the wall clock of the load (the events' ts clock)


def stored(topic: str, seq: int, ts: float) -> EventBody:
    return EventBody(topic, f"{seq:02x}", seq, {}, b"p", "0001", ts)


def test_restored_events_past_their_topics_seconds_go_and_the_first_tick_persists_it() -> None:
    config = ScribeConfig(durable=True, replicas=0, retain_seconds=300.0,
                          retention=(RetentionRule("t", seconds=60),))
    app, host = make(200, config=config)
    logs = [
        # "t" keeps 60 s: published 70 s and exactly 60 s before the load go, one
        # published a millisecond later stays (with what follows).
        RestoredLog("t", 4, 1, (stored("t", 1, LOADED_AT - 70), stored("t", 2, LOADED_AT - 60),
                                stored("t", 3, LOADED_AT - 59.999),
                                stored("t", 4, LOADED_AT + 5)),  # ts ahead: new
                    LOADED_AT),
        RestoredLog("u", 1, 1, (stored("u", 1, LOADED_AT - 70),), LOADED_AT),  # 300 s
        RestoredLog("v", 9, 1, (stored("v", 1, LOADED_AT - 301),), LOADED_AT),  # all gone
    ]
    app.restore(10.0, logs, load_ms=1.5)
    retention = app.publishing.retention
    assert {t: list(r.events) for t, r in retention.replica.items()} == {"t": [3, 4],
                                                                         "u": [1]}
    assert retention.replica["t"].complete_from == 3
    assert app.state.seq["v"] == 9  # the counter is kept: never numbered below
    # The recover records say what the store loaded.
    assert [(f["topic"], f["events"]) for ev_, f in host.traces if ev_ == "recover"] == [
        ("t", 4), ("u", 1), ("v", 1)]
    host.clear()
    mark = len(host.persisted)
    assert app.next_deadline() == 11.0  # restoring woke the tick (heartbeat_interval 1 s)
    app.on_timer(11.0)  # seq 3 is 60.999 s old now: it goes too, with what restoring dropped
    assert host.persisted[mark:] == [TrimLog("t", 4), DropLog("v")]
    assert {t: list(r.events) for t, r in retention.replica.items()} == {"t": [4],
                                                                         "u": [1]}
    host.clear()
    mark = len(host.persisted)
    app.on_timer(12.0)  # seq 4 is 2 s old (its ts was ahead), "u"'s 72 s: nothing to tell
    assert host.persisted[mark:] == []
    assert retention.logs()["t"]["retention"] == {"count": 1024, "bytes": 256 << 20,
                                                  "seconds": 60.0}


def test_restored_events_of_unknown_age_start_at_the_restore() -> None:
    app, _host = make(200, config=ScribeConfig(durable=True, retain_seconds=60.0))
    app.restore(10.0, [RestoredLog("t", 1, 1, (stored("t", 1, 0.0),))])
    assert list(app.publishing.retention.replica["t"].events) == [1]
    app.publishing.retention.tick(69.9)
    assert list(app.publishing.retention.replica["t"].events) == [1]
    app.publishing.retention.tick(70.0)
    assert "t" not in app.publishing.retention.replica
