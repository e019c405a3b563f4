"""The Python clients' durable-consumer helpers (overlay.client_durable): the subscribe
fields, and acknowledgements cut by bytes so that every request fits the frame."""

from __future__ import annotations

import pytest

from overlay.client_durable import durable_fields, settle_request, settle_runs
from overlay.core.framing import encode_frame
from overlay.core.limits import MIN_MAX_FRAME, SizeLimits

SMALLEST = SizeLimits(MIN_MAX_FRAME)


def test_durable_fields_send_only_what_is_given() -> None:
    assert durable_fields(None) == {}
    assert durable_fields("w", ack=True, ack_wait=None, pull=None) == {"durable": "w",
                                                                       "ack": True}
    with pytest.raises(ValueError, match="give durable"):
        durable_fields(None, ack=True)
    with pytest.raises(TypeError, match="unknown"):
        durable_fields("w", acks=True)


def test_acknowledgements_fill_each_frame_and_never_pass_it() -> None:
    msg_id = "f" * 64
    runs = settle_runs([msg_id] * 5000, SMALLEST)
    assert sum(len(run) for run in runs) == 5000 and len(runs) > 1
    for run in runs:  # every request fits, with the largest rid a client may send
        frame = encode_frame({**settle_request(1 << 62, "nak", run, 86_400.0),
                              "rid": (1 << 64) - 1}, SMALLEST.max_frame)
        assert len(frame) - 4 <= SMALLEST.max_frame
    # ... and is full: one more msg_id would not have fitted the run's budget
    first = runs[0]
    assert (len(first) + 1) * (len(msg_id) + 2) > SMALLEST.max_frame - 128


def test_one_msg_id_is_not_a_list() -> None:
    with pytest.raises(TypeError, match="list"):
        settle_runs("abcd", SMALLEST)
