"""Age retention across a restart, on the daemon's store: an event stored before the
restart keeps its age (from its publish time), so one older than its topic's retention
is dropped when the node loads it, and the first tick's trim reaches the file; and
``overlay topics`` shows each log's retention."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from overlay.commands import pubsub
from overlay.core.storage import SyncPolicy
from overlay.runtime.logstore import LOG_FILE, LogStore
from scribe.config import RetentionRule, ScribeConfig
from scribe.durability import AppendEvents, TrimLog
from scribe.wire_records import EventBody
from tests.scribe.helpers import make

NODE = "ab" * 16


def body(seq: int, ts: float) -> EventBody:
    return EventBody("orders.eu", f"{seq:032x}", seq, {}, b"p", "cd" * 16, ts)


def test_an_event_older_than_its_topics_seconds_is_dropped_at_the_restart(
        tmp_path: Path) -> None:
    path = tmp_path / LOG_FILE
    before = time.time()
    store = LogStore(path, NODE, SyncPolicy())
    # Published two hours ago and a second ago; the topic keeps an hour.
    store.apply([AppendEvents("orders.eu", (body(1, before - 7200), body(2, before - 1)))])
    store.close()

    store = LogStore(path, NODE, SyncPolicy())
    report = store.load()
    [restored] = report.logs
    assert restored.loaded_at is not None and before <= restored.loaded_at <= time.time()
    config = ScribeConfig(durable=True, retention=(RetentionRule("orders.*", seconds=3600),))
    app, host = make(200, config=config)
    app.restore(0.5, report.logs, report.ms)  # the core's clock is another (monotonic)
    assert list(app.publishing.retention.replica["orders.eu"].events) == [2]
    app.publishing.retention.tick(0.5)
    assert host.persisted == [TrimLog("orders.eu", 2)]
    store.apply(host.persisted)
    store.close()

    again = LogStore(path, NODE, SyncPolicy())
    [log] = again.load().logs
    assert ([e.seq for e in log.events], log.complete_from, log.counter) == ([2], 2, 2)
    again.close()


def test_overlay_topics_shows_each_logs_retention(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    retention = {"count": 1024, "bytes": 268435456, "seconds": 3600.0}
    status = {"topics": {"orders.eu": {"role": "member"}, "bare": {"role": "root"}},
              "logs": {"orders.eu": {"role": "root", "events": 1, "bytes": 1, "first_seq": 2,
                                     "last_seq": 2, "counter": 2, "retention": retention}}}
    monkeypatch.setattr(pubsub, "_status", lambda args, command: status)
    assert pubsub.run_topics(argparse.Namespace(json=True)) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["topic"], r["retention"]) for r in rows] == [("bare", None),
                                                            ("orders.eu", retention)]
    assert pubsub.run_topics(argparse.Namespace(json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "retention"
    assert lines[1].split()[-1] == "-" and lines[2].split()[-1] == "1024/268435456B/3600s"
