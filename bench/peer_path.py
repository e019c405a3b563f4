"""CPU cost of one event across a small overlay, in one process, without client processes.

``bench/daemon_path.py`` measures one daemon; this measures the peer path too: four real
structured-mode nodes (``build_node``: Chord, Scribe, traces, the real transport on
loopback) run in one process. The topic is chosen so that node 0 is its root; node 1
publishes (its events go to the root over a peer link), and nodes 2 and 3 each have one
subscriber (empty filter), so every event is decoded at the root, numbered, encoded
once per child, sent, decoded by each child and pushed to its subscriber. The clients
are Unix socket pairs whose reads are not decoded, as in ``daemon_path.py``.

Reported per run: events per second (wall) and the process's CPU microseconds per event
summed over the four nodes; each setup runs ``--repeat`` times, minimum and median
printed. For counts that do not move with the machine's load, run it under
``valgrind --tool=callgrind`` with ``--callgrind-phase`` (see ``daemon_path.py``; under
valgrind the run must end within measure's 120 s: 1000 events do).

Run: .venv/bin/python bench/peer_path.py [--events 10000] [--repeat 3] [--reliable]
     [--batch 64] [--callgrind-phase]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import trio

# This file's folder must not hide packages (bench/scribe.py, bench/matching.py); the
# repository it is in comes first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.daemon_path import PAYLOAD, Client, connect, measure, publishes  # noqa: E402
from chord import ChordNode  # noqa: E402
from overlay.commands.daemon import tune_gc  # noqa: E402
from overlay.core.ids import hash_id  # noqa: E402
from overlay.runtime.config import build_config  # noqa: E402
from overlay.runtime.serve import Node, build_node  # noqa: E402

NODES = 4
ROOT, PUBLISHER = 0, 1


def topic_rooted_at(root: ChordNode) -> str:
    """A topic whose key the node ``root`` owns."""
    for i in range(100_000):
        topic = f"bench-{i}"
        if root.is_responsible(hash_id(topic, root.bits)):
            return topic
    raise RuntimeError("no topic found for the root")


async def ring_ready(nodes: list[Node]) -> None:
    """Until every node has joined and each has a successor that is not itself."""
    with trio.fail_after(60):
        while True:
            cores = [node.daemon.node for node in nodes]
            if all(node.service.ready for node in nodes) and all(
                    isinstance(core, ChordNode) and core.successors
                    and core.successors.nodes[0].id != core.local.id for core in cores):
                # Ring pointers settle over a few stabilize rounds: owners must agree.
                keys = [hash_id(f"probe-{i}", cores[0].bits) for i in range(32)]  # type: ignore[union-attr]  # every core here is a ChordNode
                owners = [sum(core.is_responsible(k) for core in cores)  # type: ignore[union-attr]  # every core here is a ChordNode
                          for k in keys]
                if owners == [1] * len(keys):
                    return
            await trio.sleep(0.1)


async def one_run(events: int, window: int, reliable: bool,
                  callgrind_phase: bool = False, batch: int = 1) -> tuple[float, float]:
    """(events per second, CPU microseconds per event for all nodes) of a fresh overlay;
    ``batch`` events per publish request (and batched notifies) when above 1."""
    with tempfile.TemporaryDirectory() as tmp:
        nodes: list[Node] = []
        async with trio.open_nursery() as nursery:
            for i in range(NODES):
                seeds = {"seeds": [nodes[0].daemon.address]} if nodes else {}
                node = build_node(build_config(None, {}, {
                    "bind": "127.0.0.1:0", "state_dir": f"{tmp}/n{i}", **seeds}))
                await nursery.start(node.daemon.run)
                nodes.append(node)
            await ring_ready(nodes)
            root = nodes[ROOT].daemon.node
            assert isinstance(root, ChordNode)
            topic = topic_rooted_at(root)
            subs: list[Client] = []
            for i, node in enumerate(nodes[2:]):
                sub = await connect(node, nursery, 10 + i, batch_notify=batch > 1)
                reply = await sub.request({"op": "subscribe", "rid": 2, "topic": topic,
                                           "filter": ""})
                assert reply["ok"], reply
                subs.append(sub)
            pub = await connect(nodes[PUBLISHER], nursery, 1)
            # One event first: the publisher learns the root (then sends to it directly).
            reply = await pub.request({"op": "publish", "rid": 3, "topic": topic,
                                       "payload": PAYLOAD, "reliable": True})
            assert reply["ok"], reply
            for sub in subs:
                await sub.count_events(1, None, trio.Event())
            frames = publishes(topic, events, reliable, batch)
            tune_gc()
            result = await measure(nursery, pub, subs, frames, batch, window, callgrind_phase)
            for node in nodes:
                node.daemon.stop()
            nursery.cancel_scope.cancel()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--reliable", action="store_true")
    p.add_argument("--batch", type=int, default=1,
                   help="events per publish request (publish_batch and batched notifies, "
                        "as the Node.js client sends them) when above 1")
    p.add_argument("--callgrind-phase", action="store_true",
                   help="under callgrind: count the measured phase only (daemon_path.py)")
    args = p.parse_args(argv)
    with open("/proc/loadavg", encoding="ascii") as fh:
        load = fh.read().split()[0]
    kind = "reliable" if args.reliable else "unreliable"
    per_request = f", {args.batch} per publish request" if args.batch > 1 else ""
    print(f"{NODES} nodes in one process, {args.events} {kind} events per run{per_request}, "
          f"{args.repeat} runs, load average {load}")
    runs = [trio.run(one_run, args.events, args.window, args.reliable, args.callgrind_phase,
                     args.batch) for _ in range(args.repeat)]
    costs = [c for _, c in runs]
    print(f"us/event (all nodes) min {min(costs):.1f} median {statistics.median(costs):.1f}; "
          f"events/s max {max(r for r, _ in runs):,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
