"""Iterative lookups and KBR routing, input by input."""

from __future__ import annotations

import pytest

from chord.messages import FindSuccessor, Found, Route, RouteAck
from chord.ring import hex_id
from overlay.core.errors import LocalProtocolError
from tests.chord.helpers import (
    BITS,
    Payload,
    RecordingApp,
    in_ring,
    notices,
    ring_refs,
    sends,
    traces,
)

A, B, C, D, E = ring_refs(5)  # in ring order


def test_a_lookup_walks_to_the_owner_and_has_it_confirm() -> None:
    a = in_ring(A, pred=E, successors=[B], knows=[B, C])
    key = D.id  # owned by D; A knows C precedes it
    a.lookup(1.0, key, tag="t1")
    assert sends(a.drain_effects()) == [(C.addr, FindSuccessor(1, key))]
    a.on_message(1.1, C.addr, Found(1, True, D))  # C: "D follows me and owns it"
    assert sends(a.drain_effects()) == [(D.addr, FindSuccessor(2, key, (), owner_check=True))]
    a.on_message(1.2, D.addr, Found(2, True, D))
    effects = a.drain_effects()
    assert notices(effects) == [("lookup", {"key": key, "owner": D, "hops": 2, "ok": True,
                                            "tag": "t1"})]
    (_, record), = traces(effects, "lookup")
    assert record == {"key": hex_id(key, BITS), "hops": 2, "ok": True,
                      "ms": pytest.approx(200.0), "kind": "lookup"}


def test_a_lookup_of_a_key_we_own_takes_no_hop() -> None:
    a = in_ring(A, pred=E, successors=[B])
    a.lookup(1.0, A.id)
    assert notices(a.drain_effects())[0][1]["hops"] == 0


def test_a_lookup_routes_around_a_dead_node_by_asking_again() -> None:
    a = in_ring(A, pred=E, successors=[B], knows=[B, C])
    a.lookup(1.0, E.id)
    a.drain_effects()
    a.on_message(1.1, C.addr, Found(1, False, D))  # "ask D"
    assert sends(a.drain_effects()) == [(D.addr, FindSuccessor(2, E.id))]
    a.on_unreachable(1.5, D.addr, FindSuccessor(2, E.id))
    # C is asked again, told to leave D out.
    assert sends(a.drain_effects()) == [(C.addr, FindSuccessor(3, E.id, (D.addr,)))]
    a.on_message(1.6, C.addr, Found(3, True, E))
    a.on_message(1.7, E.addr, Found(4, True, E))
    (_, data), = notices(a.drain_effects())
    assert data["owner"] == E and data["hops"] == 4 and data["ok"]


def test_an_owner_whose_predecessor_the_asker_found_dead_confirms_instead_of_pointing_on(
        ) -> None:
    # D does not know yet that its predecessor C failed; A's lookup found C dead.
    d = in_ring(D, pred=C, successors=[E], knows=[E, A])
    key = C.id  # C's key: D's after C failed
    d.on_message(1.0, A.addr, FindSuccessor(1, key, (C.addr,), owner_check=True))
    d.on_message(1.0, A.addr, FindSuccessor(2, key, (), owner_check=True))  # C alive
    # Pointing at a closer preceding node instead would send the lookup round the
    # ring and back to D.
    assert sends(d.drain_effects()) == [(A.addr, Found(1, True, D)), (A.addr, Found(2, False, C))]


def test_a_lookup_ends_failed_when_nobody_answers() -> None:
    a = in_ring(A, pred=None, successors=[B], rpc_timeout=1.0, rpc_attempts=1,
                stabilize_interval=100.0)
    a.lookup(1.0, D.id, tag=7)
    assert sends(a.drain_effects()) == [(B.addr, FindSuccessor(1, D.id))]
    a.on_timer(2.0)  # B is silent and dropped; A knows nobody else now: it owns the key
    (_, data), = notices(a.drain_effects())
    assert data["owner"] == A and data["hops"] == 1


def test_answers_to_lookup_steps() -> None:
    c = in_ring(C, pred=B, successors=[D, E], knows=[D, E, A])
    c.on_message(1.0, A.addr, FindSuccessor(1, D.id))        # between C and D
    c.on_message(1.0, A.addr, FindSuccessor(2, C.id))        # ours
    c.on_message(1.0, A.addr, FindSuccessor(3, A.id + 1))    # far: closest preceding
    c.on_message(1.0, A.addr, FindSuccessor(4, D.id, (D.addr,)))  # D is dead: E
    c.on_message(1.0, A.addr, FindSuccessor(5, 1 << BITS))   # outside the ring
    c.on_message(1.0, A.addr, FindSuccessor(6, B.id, (), owner_check=True))  # behind us
    assert sends(c.drain_effects()) == [
        (A.addr, Found(1, True, D)), (A.addr, Found(2, True, C)), (A.addr, Found(3, False, A)),
        (A.addr, Found(4, True, E)), (A.addr, Found(5, False, None)),
        (A.addr, Found(6, False, B))]


def test_route_forwards_hop_by_hop_and_the_owner_delivers_and_acks() -> None:
    payload = Payload("hello")
    origin_app, hop_app, owner_app = RecordingApp(), RecordingApp(), RecordingApp()
    a = in_ring(A, pred=E, successors=[B], knows=[B, C], app=origin_app)
    c = in_ring(C, pred=B, successors=[D], app=hop_app)
    d = in_ring(D, pred=C, successors=[E], app=owner_app)
    a.route(1.0, D.id, payload)
    (dest, env), = sends(a.drain_effects())
    assert dest == C.addr and env == Route(D.id, A, 1, 1, False, True, payload)
    c.on_message(1.1, A.addr, env)
    (dest, env), = sends(c.drain_effects())
    assert dest == D.addr and env == Route(D.id, A, 1, 2, True, True, payload)
    assert hop_app.of("forward") == [("forward", D.id, payload, D.id)]
    d.on_message(1.2, C.addr, env)
    assert owner_app.of("deliver") == [("deliver", D.id, payload, 2)]
    assert sends(d.drain_effects()) == [(A.addr, RouteAck(1, D, 2))]
    a.on_message(1.3, D.addr, RouteAck(1, D, 2))
    (_, record), = traces(a.drain_effects(), "lookup")
    assert record["hops"] == 2 and record["ok"] and record["kind"] == "route"
    assert origin_app.of("forward") == []  # the origin sees no forward up-call


def test_route_without_ack_and_a_forward_that_stops_it() -> None:
    app = RecordingApp(stop=True)
    c = in_ring(C, pred=B, successors=[D], app=app)
    c.on_message(1.0, A.addr, Route(D.id, A, 0, 1, False, False, Payload("x")))
    assert sends(c.drain_effects()) == [] and len(app.of("forward")) == 1


def test_a_forward_that_stops_an_acked_route_acks_it_with_the_hops_so_far() -> None:
    app = RecordingApp(stop=True)
    c = in_ring(C, pred=B, successors=[D], app=app)
    c.on_message(1.0, A.addr, Route(D.id, A, 7, 1, False, True, Payload("x")))
    # Without the ack, A's route would time out and be traced as a failed lookup.
    assert sends(c.drain_effects()) == [(A.addr, RouteAck(7, C, 1))]
    assert app.of("deliver") == []


def test_route_to_a_key_we_own_delivers_at_once_with_no_hop() -> None:
    app = RecordingApp()
    c = in_ring(C, pred=B, successors=[D], app=app)
    c.route(1.0, C.id, Payload("mine"), ack=False)
    assert app.of("deliver") == [("deliver", C.id, Payload("mine"), 0)]
    assert c.drain_effects() == []


def test_an_unacknowledged_route_is_traced_as_failed() -> None:
    a = in_ring(A, pred=E, successors=[B], route_timeout=5.0)
    a.route(1.0, D.id, Payload("lost"))
    a.drain_effects()
    a.on_timer(6.0)
    (_, record), = traces(a.drain_effects(), "lookup")
    assert record["ok"] is False and record["kind"] == "route" and record["ms"] == 5000.0


def test_an_unacknowledged_route_goes_back_to_the_app_once_and_an_acknowledged_one_not() -> None:
    app = RecordingApp()
    a = in_ring(A, pred=E, successors=[B], route_timeout=5.0, app=app)
    a.route(1.0, D.id, Payload("lost"))
    a.route(1.0, D.id, Payload("got there"))
    (_, _lost), (_, second) = sends(a.drain_effects())
    a.on_message(1.5, D.addr, RouteAck(second.rid, D, 2))
    a.on_timer(5.9)
    assert app.of("route_failed") == []  # not yet
    a.on_timer(6.0)
    assert app.of("route_failed") == [("route_failed", D.id, Payload("lost"))]
    a.on_timer(20.0)
    assert len(app.of("route_failed")) == 1


def test_a_route_to_an_unreachable_hop_goes_another_way_unseen_by_the_app() -> None:
    app = RecordingApp()
    c = in_ring(C, pred=B, successors=[D, E], app=app)
    env = Route(D.id, A, 3, 1, False, False, Payload("y"))
    c.on_message(1.0, A.addr, env)
    (dest, sent), = sends(c.drain_effects())
    assert dest == D.addr
    app.calls.clear()
    c.on_unreachable(2.0, D.addr, sent)
    (dest, again), = sends(c.drain_effects())
    assert dest == E.addr and again.hops == 2 and again.final
    assert [call[0] for call in app.calls] == ["update"]  # D left the neighbour set


def test_direct_messages_and_app_timers_reach_the_application() -> None:
    app = RecordingApp(deadline=50.0)
    c = in_ring(C, pred=B, successors=[D], app=app, stabilize_interval=100.0)
    c.on_message(1.0, A.addr, Payload("direct"))
    assert app.of("direct") == [("direct", A.addr, Payload("direct"))]
    c.send_direct(E.addr, Payload("out"))
    assert sends(c.drain_effects()) == [(E.addr, Payload("out"))]
    c.on_unreachable(2.0, E.addr, Payload("out"))
    assert app.of("unreachable") == [("unreachable", E.addr, Payload("out"))]
    assert c.next_deadline() == 50.0
    c.on_timer(50.0)
    assert app.of("timer") == [("timer", 50.0)]


def test_keys_outside_the_ring_are_refused_locally() -> None:
    c = in_ring(C, pred=B, successors=[D])
    with pytest.raises(LocalProtocolError):
        c.lookup(1.0, 1 << BITS)
    with pytest.raises(LocalProtocolError):
        c.route(1.0, -1, Payload("x"))
