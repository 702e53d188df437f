"""The local broker's KRaft cluster id never starts with ``-`` (the storage tool's parser would
take it for an option: a private broker failed to format about once in 64 starts)."""

from __future__ import annotations

import base64

from connectors.kafka.local_broker import new_cluster_id

DASH_FIRST = bytes([0xF8]) + bytes(15)  # top six bits 62: "-" in URL-safe base64
PLAIN = bytes(16)


def test_an_id_starting_with_a_dash_is_drawn_again():
    draws = iter([DASH_FIRST, DASH_FIRST, PLAIN])
    assert base64.urlsafe_b64encode(DASH_FIRST).decode().startswith("-")
    assert new_cluster_id(lambda: next(draws)) == "AAAAAAAAAAAAAAAAAAAAAA"


def test_ids_are_22_url_safe_characters_never_starting_with_a_dash():
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(
        set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for i in ids
    )
