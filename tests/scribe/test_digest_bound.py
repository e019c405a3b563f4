"""A digest is bounded by bytes: past its bound the farthest groups are left out, the
digest says so, and a parent then still asks that subtree for any group (after the
subtrees that named it), so no group member below is ever unreachable."""

from __future__ import annotations

from matching import Summary
from overlay.core.framing import encode_map
from overlay.core.limits import SizeLimits
from scribe.summaries import UNLISTED_DISTANCE, Digest, GroupDigest, aggregate

SIZES = SizeLimits(1 << 16)


def many_groups(count: int) -> Digest:
    summary = Summary.of(["price > 5 AND sym = 'ACME'"])
    return Digest(Summary.of(["x = 1"]), {
        f"g{i:05d}" + "\u00e9" * 200: GroupDigest(summary, i % 7) for i in range(count)})


def test_a_digest_within_its_bound_lists_every_group() -> None:
    digest = many_groups(10)
    wire = digest.to_wire(SIZES.digest_bytes)
    assert len(wire.groups) == 10 and not wire.more_groups
    assert Digest.from_wire(wire, 64) == digest


def test_past_its_bound_the_nearest_groups_stay_and_the_rest_are_announced() -> None:
    digest = many_groups(2000)
    wire = digest.to_wire(SIZES.digest_bytes)
    assert wire.more_groups and 0 < len(wire.groups) < 2000
    assert len(encode_map(wire.to_wire())) <= SIZES.digest_bytes + 1024
    kept = max(entry.distance for entry in wire.groups.values())
    left_out = [name for name in digest.groups if name not in wire.groups]
    assert all(digest.groups[name].distance >= kept for name in left_out)
    back = Digest.from_wire(wire, 64)
    entry = back.group_may_match(left_out[0], {"price": 1})
    assert entry is not None and entry.distance == UNLISTED_DISTANCE  # asked, last
    assert back.group_may_match("never-heard-of", {}) is not None
    # A node above keeps saying so.
    assert aggregate(Digest.empty(), [back]).more_groups
    assert not aggregate(Digest.empty(), [Digest.from_wire(many_groups(3).to_wire(
        SIZES.digest_bytes), 64)]).more_groups
