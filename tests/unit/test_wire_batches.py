"""`wire.batch_requests`: the daemon client's batch bodies, each body encoded once."""

from __future__ import annotations

import json

from memoryd.client.wire import batch_requests


def test_batches_split_by_count_and_by_bytes_and_keep_every_body_in_order() -> None:
    bodies = [{"title": f"t{i}", "body": "é" * (i % 7) * 10} for i in range(23)]
    by_count = [json.loads(r) for r in batch_requests("facts", bodies, {}, 5, 1 << 20)]
    assert [len(r["facts"]) for r in by_count] == [5, 5, 5, 5, 3]
    assert [b for r in by_count for b in r["facts"]] == bodies
    assert all(set(r) == {"facts"} for r in by_count)

    limit = 300
    raw = list(batch_requests("memories", bodies, {"bulk": False}, 100, limit))
    parsed = [json.loads(r) for r in raw]
    assert [b for r in parsed for b in r["memories"]] == bodies
    assert all(r["bulk"] is False for r in parsed)
    # Past the limit (in bytes, UTF-8) only with one body; `{"memories":[…],"bulk":false}`
    overhead = len(json.dumps({"memories": [], "bulk": False}, separators=(",", ":")))
    assert all(
        len(r) <= limit + overhead or len(p["memories"]) == 1
        for r, p in zip(raw, parsed, strict=True)
    )
    assert len(raw) > 1


def test_no_bodies_no_request() -> None:
    assert list(batch_requests("facts", [], {}, 5, 100)) == []
