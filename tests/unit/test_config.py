from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from chord.node import ChordNode
from overlay.runtime.config import ConfigError, build_config
from overlay.runtime.serve import build_node
from scribe.config import RetentionRule, TopicRetention


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "overlay.toml"
    path.write_text(text)
    return path


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, """
bind = "0.0.0.0:7400"
seeds = ["10.0.0.1:7400"]
state_dir = "/tmp/ov"
mode = "unstructured"
[api]
tcp = "127.0.0.1:0"
[limits]
max_frame = 65536
[protocol]
stabilize_interval = 2.5
""")
    config = build_config(path, {"OVERLAY_BIND": "127.0.0.1:9000",
                                 "OVERLAY_SEEDS": "a:1, b:2"}, {"bind": "127.0.0.1:9100",
                                                               "mode": None})
    assert config.bind == "127.0.0.1:9100"  # flag beats environment beats file
    assert config.seeds == ("a:1", "b:2")  # environment beats file
    assert config.mode == "unstructured"  # a None flag does not override
    assert config.api_tcp == "127.0.0.1:0"
    assert config.api_socket_path == Path("/tmp/ov/api.sock")
    assert config.trace_path == Path("/tmp/ov/traces")
    assert config.limits.max_frame == 65536
    assert config.protocol == {"stabilize_interval": 2.5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("bind = 5", "bind: expected str, got int"),
        ('bind = "nohost"', "is not HOST:PORT"),
        ('bind = "h:70000"', "port 70000 is out of range"),
        ('mode = "mesh"', "mode must be one of structured, unstructured"),
        ('colour = "red"', "colour: unknown setting"),
        ("[limits]\nmax_frame = 10", "max_frame: must be at least 65536"),
        ("[limits]\nmax_frame = 65535", "max_frame: must be at least 65536"),
        ("[limits]\nspeed = 1", "speed: unknown limit"),
        ('[api]\nport = 1', "port: unknown setting"),
        ("seeds = [1]", "expected str"),
        ("bind = [", "not valid TOML"),
        ('advertise = "h:0"', "port 0 is out of range"),
    ],
)
def test_bad_files_name_the_fault(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(write(tmp_path, text), {}, {})


def test_smallest_max_frame_gives_the_size_model_its_room(tmp_path: Path) -> None:
    config = build_config(write(tmp_path, "[limits]\nmax_frame = 65536"), {}, {})
    sizes = config.limits.sizes
    assert (sizes.max_frame, sizes.max_event, sizes.max_payload) == (65536, 49152, 32768)


def test_bad_environment_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="OVERLAY_PEER_DELAY_MS"):
        build_config(None, {"OVERLAY_PEER_DELAY_MS": "-3"}, {})
    with pytest.raises(ConfigError, match="'fast' is not a number"):
        build_config(None, {"OVERLAY_PEER_DELAY_MS": "fast"}, {})
    with pytest.raises(ConfigError, match="does not exist"):
        build_config(tmp_path / "missing.toml", {}, {})


def test_retention_rules_reach_the_scribe_core_in_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
state_dir = "{tmp_path / 'state'}"
[protocol]
retain_count = 500
[[retention]]
topics = "orders.*"
seconds = 86400
[[retention]]
topics = "*"
count = 1
bytes = 1
""")
    config = build_config(path, {}, {})
    assert config.retention == (RetentionRule("orders.*", seconds=86400.0),
                                RetentionRule("*", count=1, bytes=1))
    node = build_node(config)

    async def build() -> ChordNode:  # the node is built inside the daemon's trio run
        return node.daemon.kind.build("127.0.0.1:1", random.Random(1))

    core = node.service.core_of(trio.run(build))
    assert core.state.config.retention_of("orders.eu") == TopicRetention(
        500, 256 << 20, 86400.0, 3.0)
    assert core.state.config.retention_of("prices") == TopicRetention(1, 1, 300.0, 3.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("retention = 5", r"retention: expected \[\[retention\]\] tables"),
        ("retention = [1]", r"retention: expected \[\[retention\]\] tables"),
        ("[[retention]]\ncount = 5", "retention #1: topics .* is required"),
        ('[[retention]]\ntopics = "a"\nage = 5',
         "retention #1.age: unknown setting .known: topics, count, bytes, seconds."),
        ('[[retention]]\ntopics = "a"\n[[retention]]\ntopics = "b"\ncount = "5"',
         "retention #2.count: expected int, got str"),
        ('[[retention]]\ntopics = "a"\ncount = 2.5', "retention #1.count: expected int"),
        ('[[retention]]\ntopics = "a"\nbytes = true', "retention #1.bytes: expected int"),
        ('[[retention]]\ntopics = "a"\nseconds = "1d"', "retention #1.seconds: expected float"),
        ('[[retention]]\ntopics = 3', "retention #1.topics: expected str"),
        ('[[retention]]\ntopics = ""', "retention #1: topics must be a non-empty pattern"),
        ('[[retention]]\ntopics = "a"\ncount = 0', "retention #1: count must be an integer >= 1"),
        ('[[retention]]\ntopics = "a"\nbytes = -5', "retention #1: bytes must be an integer >= 1"),
        ('[[retention]]\ntopics = "a"\nseconds = 0', "retention #1: seconds must be a number > 0"),
        ('[protocol]\nretention = "x"', r"\[protocol\]"),  # not a [protocol] setting
    ],
)
def test_bad_retention_rules_name_the_fault(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_node(build_config(write(tmp_path, text), {}, {}))
