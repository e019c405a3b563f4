"""The Chord core, input by input: exact messages in, exact effects out."""

from __future__ import annotations

from chord.fingers import RoutingIndex
from chord.messages import (
    FindSuccessor,
    Found,
    GetNeighbours,
    Leave,
    LeaveAck,
    Neighbours,
    Notify,
    SuccessorHint,
)
from chord.ring import hex_id
from tests.chord.helpers import (
    BITS,
    RecordingApp,
    in_ring,
    make_node,
    notices,
    ring_refs,
    sends,
    traces,
)

A, J, B, C, D = ring_refs(5)  # in ring order: A < J < B < C < D


def test_join_asks_the_seed_then_has_the_owner_confirm_then_stabilizes() -> None:
    j = make_node(J)
    j.join(0.0, [C.addr])
    assert sends(j.drain_effects()) == [(C.addr, FindSuccessor(1, J.id + 1))]
    # The seed answers that B follows J's id; B is asked to confirm it owns that key.
    j.on_message(0.1, C.addr, Found(1, True, B))
    assert sends(j.drain_effects()) == [(B.addr, FindSuccessor(2, J.id + 1, (),
                                                               owner_check=True))]
    assert not j.joined
    j.on_message(0.2, B.addr, Found(2, True, B))
    effects = j.drain_effects()
    assert j.joined and j.successor() == B
    assert traces(effects, "node_up") == [("node_up", {"addr": J.addr, "mode": "structured",
                                                       "version": 1})]
    assert traces(effects, "ring") == [("ring", {"succ": hex_id(B.id, BITS), "pred": None})]
    # It starts filling its fingers: those up to B are B, the next one is asked of B.
    first_far = next(i for i, start in enumerate(j.fingers.starts)
                     if (start - J.id) % (1 << BITS) > (B.id - J.id) % (1 << BITS))
    assert sends(effects) == [(B.addr, FindSuccessor(3, j.fingers.starts[first_far]))]
    assert j.fingers.nodes[:first_far] == [B] * first_far
    # Stabilize is due at once: ask B for its predecessor and successor list.
    assert j.next_deadline() == 0.2
    j.on_timer(0.2)
    assert sends(j.drain_effects()) == [(B.addr, GetNeighbours(4))]
    j.on_message(0.3, B.addr, Neighbours(4, A, (C, D, A)))
    assert j.successors.nodes == [B, C, D]
    assert sends(j.drain_effects()) == [(B.addr, Notify(J))]


def test_a_restarted_node_the_ring_still_lists_joins_around_its_former_self() -> None:
    # J restarted (same address, same id) before the ring noticed it was gone: the seed
    # still points a lookup for J's successor at J. J asks again, avoiding itself, and
    # joins (before, it took its own empty tables' word, failed, and retried the same
    # way forever, while the ring routed through it and it dropped everything).
    j = make_node(J)
    j.join(0.0, [C.addr])
    assert sends(j.drain_effects()) == [(C.addr, FindSuccessor(1, J.id + 1))]
    j.on_message(0.1, C.addr, Found(1, False, J))
    assert sends(j.drain_effects()) == [(C.addr, FindSuccessor(2, J.id + 1, (J.addr,)))]
    j.on_message(0.2, C.addr, Found(2, True, B))
    assert sends(j.drain_effects()) == [(B.addr, FindSuccessor(3, J.id + 1, (J.addr,),
                                                               owner_check=True))]
    j.on_message(0.3, B.addr, Found(3, True, B))
    assert j.joined and j.successor() == B


def test_a_failed_join_is_retried_through_the_next_seed() -> None:
    j = make_node(J, join_retry=2.0)
    j.join(0.0, [C.addr, D.addr])
    j.drain_effects()
    j.on_unreachable(1.0, C.addr, FindSuccessor(1, J.id + 1))
    assert sends(j.drain_effects()) == [] and j.next_deadline() == 3.0
    j.on_timer(3.0)
    assert sends(j.drain_effects()) == [(D.addr, FindSuccessor(2, J.id + 1))]


def test_notify_from_a_closer_node_makes_it_predecessor_and_hints_the_old_one() -> None:
    app = RecordingApp()
    b = in_ring(B, pred=A, successors=[C, D], app=app)
    app.calls.clear()
    b.on_message(1.0, J.addr, Notify(J))
    effects = b.drain_effects()
    assert b.pred == J
    assert sends(effects) == [(A.addr, SuccessorHint(J))]
    assert traces(effects, "ring") == [("ring", {"succ": hex_id(C.id, BITS),
                                                 "pred": hex_id(J.id, BITS)})]
    assert app.of("update") == [("update", A.id, False), ("update", J.id, True)]
    # A node farther than the predecessor changes nothing.
    b.on_message(2.0, A.addr, Notify(A))
    assert b.pred == J and sends(b.drain_effects()) == []


def test_a_successor_hint_between_us_and_our_successor_is_adopted_at_once() -> None:
    a = in_ring(A, pred=D, successors=[B, C])
    a.on_message(1.0, B.addr, SuccessorHint(J))
    assert a.successors.nodes == [J, B, C]
    a.on_timer(1.0)  # the new successor is stabilized with at once
    assert sends(a.drain_effects()) == [(J.addr, GetNeighbours(1))]
    a.on_message(1.5, B.addr, SuccessorHint(D))  # not between A and J: ignored
    assert a.successors.nodes == [J, B, C]


def test_stabilize_adopts_a_closer_successor_and_notifies_it() -> None:
    a = in_ring(A, pred=D, successors=[B, C], stabilize_interval=1.0)
    assert a.timers.deadline("stabilize") == 1.0
    a.on_timer(1.0)
    assert sends(a.drain_effects()) == [(B.addr, GetNeighbours(1))]
    a.on_message(1.1, B.addr, Neighbours(1, J, (C, D)))
    assert a.successors.nodes == [J, B, C]
    assert sends(a.drain_effects()) == [(J.addr, Notify(A))]
    a.on_timer(1.1)  # and stabilizes with it at once
    assert sends(a.drain_effects()) == [(J.addr, GetNeighbours(2))]


def test_a_successor_that_already_names_us_predecessor_is_not_notified() -> None:
    a = in_ring(A, pred=D, successors=[B, C], stabilize_interval=1.0)
    a.on_timer(1.0)
    a.drain_effects()
    a.on_message(1.1, B.addr, Neighbours(1, A, (C, D)))
    assert a.successors.nodes == [B, C, D] and sends(a.drain_effects()) == []


def test_closest_preceding_node_searches_fingers_and_successors() -> None:
    index = RoutingIndex(A, 1 << BITS, [B, B, None, C, A, D])
    assert index.nodes == [B, C, D]
    assert index.closest_preceding_node(C.id) == B      # C itself does not precede C
    assert index.closest_preceding_node(C.id + 1) == C
    assert index.closest_preceding_node(A.id) == D      # all the way round
    assert index.closest_preceding_node(B.id) is None   # nothing between A and B
    assert index.closest_preceding_node(A.id, avoid={D.addr, C.addr}) == B


def test_an_unreachable_successor_is_replaced_from_the_successor_list() -> None:
    app = RecordingApp()
    a = in_ring(A, pred=D, successors=[B, C, D], app=app,
                stabilize_interval=1.0)
    a.on_timer(1.0)
    assert sends(a.drain_effects()) == [(B.addr, GetNeighbours(1))]
    app.calls.clear()
    a.on_unreachable(1.2, B.addr, GetNeighbours(1))
    assert a.successors.nodes == [C, D]
    assert B not in a.fingers.nodes
    assert B.addr in a.maintenance.remembered  # a merge candidate, should it come back
    assert ("update", B.id, False) in app.calls
    a.on_timer(1.2)  # the next successor is stabilized with at once
    assert sends(a.drain_effects()) == [(C.addr, GetNeighbours(2))]


def test_a_silent_successor_is_asked_again_then_routed_around() -> None:
    a = in_ring(A, pred=D, successors=[B, C], stabilize_interval=1.0, rpc_timeout=2.0,
                rpc_attempts=2)
    a.on_timer(1.0)
    a.drain_effects()
    assert a.timers.deadline(("rpc", 1)) == 3.0
    a.on_timer(3.0)  # a lost message is no failure: the same request goes again
    assert sends(a.drain_effects()) == [(B.addr, GetNeighbours(1))]
    assert a.successors.nodes == [B, C]
    a.on_timer(5.0)
    assert a.successors.nodes == [C]
    assert (C.addr, GetNeighbours(2)) in sends(a.drain_effects())
    # The answer that comes too late is ignored.
    a.on_message(5.5, B.addr, Neighbours(1, A, (C,)))
    assert a.successors.nodes == [C]


def test_leave_hands_over_to_both_neighbours_and_stops_after_their_acks() -> None:
    j = in_ring(J, pred=A, successors=[B, C])
    j.leave(5.0)
    effects = j.drain_effects()
    assert sends(effects) == [(B.addr, Leave(1, J, A, (B, C))), (A.addr, Leave(2, J, A, (B, C)))]
    j.on_message(5.1, B.addr, LeaveAck(1))
    assert not j.left and notices(j.drain_effects()) == []
    j.on_message(5.2, A.addr, LeaveAck(2))
    effects = j.drain_effects()
    assert j.left and notices(effects) == [("left", {})]
    assert traces(effects, "node_down") == [("node_down", {"reason": "leave"})]
    assert j.next_deadline() is None
    j.on_message(6.0, C.addr, FindSuccessor(9, C.id))  # gone: it answers nothing
    assert j.drain_effects() == []


def test_leave_completes_when_a_neighbour_does_not_answer() -> None:
    j = in_ring(J, pred=A, successors=[B, C], rpc_timeout=1.0, rpc_attempts=1)
    j.leave(5.0)
    j.drain_effects()
    j.on_message(5.1, B.addr, LeaveAck(1))
    j.on_timer(6.0)  # A never acks
    assert j.left and notices(j.drain_effects()) == [("left", {})]


def test_the_neighbours_of_a_leaving_node_close_the_gap() -> None:
    b = in_ring(B, pred=J, successors=[C, D])
    b.on_message(1.0, J.addr, Leave(7, J, A, (B, C, D)))
    assert b.pred == A and sends(b.drain_effects())[0] == (J.addr, LeaveAck(7))
    a = in_ring(A, pred=D, successors=[J, B, C])
    a.on_message(1.0, J.addr, Leave(8, J, A, (B, C, D)))
    assert a.successors.nodes == [B, C, D]
    assert sends(a.drain_effects())[0] == (J.addr, LeaveAck(8))


def test_a_leaving_nodes_only_neighbour_is_left_alone_owning_everything() -> None:
    a = in_ring(A, pred=J, successors=[J])
    a.on_message(1.0, J.addr, Leave(3, J, A, (A,)))
    assert a.successors.nodes == [] and a.pred is None
    assert a.successor() == A and a.is_responsible(B.id) and a.is_responsible(A.id)
