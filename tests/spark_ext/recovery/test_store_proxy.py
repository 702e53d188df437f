"""The ``store-errors`` fault proxy in front of the local S3 store (no Spark): the declared share
of requests answered with S3's errors, the clients' retried writes landing once, everything
forwarded once healed (docs/design.md, "Object storage": store errors)."""

from __future__ import annotations

import http.client
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable, write_deltalake

from spark_ext import storage
from spark_ext.recovery.store_proxy import FaultWindow, StoreFaultProxy
from spark_ext.storage import StorageSettings
from tests.connectors.s3.conftest import s3_settings, s3_store  # noqa: F401 (fixtures)


def test_a_fault_window_fails_its_share_of_requests_in_a_fixed_pattern() -> None:
    half = FaultWindow(until=0, share=0.5)
    assert [n for n in range(1, 9) if half.failed(n)] == [2, 4, 6, 8]
    quarter = FaultWindow(until=0, share=0.25)
    assert [n for n in range(1, 13) if quarter.failed(n)] == [4, 8, 12]
    assert all(FaultWindow(until=0, share=1).failed(n) for n in range(1, 5))
    with pytest.raises(ValueError, match="share"):
        FaultWindow(until=0, share=0)
    with pytest.raises(ValueError, match="codes"):
        FaultWindow(until=0, share=0.5, codes=(404,))


@pytest.fixture
def proxy(s3_settings: StorageSettings) -> Iterator[StoreFaultProxy]:  # noqa: F811
    with StoreFaultProxy(s3_settings.endpoint) as running:
        yield running


@pytest.fixture
def root(s3_store, proxy: StoreFaultProxy) -> Iterator[str]:  # noqa: F811
    """A prefix of its own in the store's bucket, deleted (through the healed proxy) after."""
    location = f"s3://{s3_store.bucket}/tests/proxy-{uuid.uuid4().hex[:12]}"
    yield location
    proxy.heal()
    storage.delete(location, _through(proxy, s3_store.settings()))


def _through(proxy: StoreFaultProxy, settings: StorageSettings) -> StorageSettings:
    return StorageSettings(proxy.endpoint, settings.region, *settings.credentials()[:2])


@pytest.mark.integration
def test_the_proxy_answers_its_share_with_s3_errors_and_forwards_the_rest_verbatim(
    proxy: StoreFaultProxy,
    root: str,
    s3_settings: StorageSettings,  # noqa: F811
) -> None:
    via = _through(proxy, s3_settings)
    body = bytes(range(256)) * 4096  # 1 MiB, streamed both ways
    storage.write_bytes(f"{root}/blob", body, via)  # signed for the proxy's Host: accepted
    # One request per call and no retry: every second one fails, 503 and 500 in turn.
    fs, path = storage.filesystem(f"{root}/blob", via, attempts=1)
    proxy.fail(seconds=30, share=0.5)
    outcomes = []
    for _ in range(6):
        try:
            outcomes.append(fs.get_file_info(path).size)
        except OSError as exc:
            outcomes.append(str(exc))
    assert outcomes[0::2] == [len(body)] * 3
    statuses = [str(o).split("HTTP status ")[1][:3] for o in outcomes[1::2]]
    assert statuses == ["503", "500", "503"], outcomes
    assert proxy.failed == {503: 2, 500: 1}
    # S3's own XML error, as a client without the SDK sees it.
    parts = urlsplit(proxy.endpoint)
    client = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    client.request("GET", "/nowhere")  # the 7th request: forwarded (403, unsigned)
    client.getresponse().read()
    client.request("GET", "/nowhere")  # the 8th: failed
    answer = client.getresponse()
    assert (answer.status, answer.getheader("Content-Type")) == (500, "application/xml")
    assert b"<Code>InternalError</Code>" in answer.read()
    client.close()
    # Retried by the clients: each write lands once, whole.
    storage.write_bytes(f"{root}/again", body, via)
    assert storage.read_bytes(f"{root}/again", s3_settings) == body
    uri, options = storage.delta_storage(f"{root}/t", via)
    for i in range(2):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append", storage_options=options)
    direct_uri, direct = storage.delta_storage(f"{root}/t", s3_settings)
    table = DeltaTable(direct_uri, storage_options=direct)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1]
    assert sum(proxy.failed.values()) > 3  # the writes met errors too
    # Healed: everything forwarded.
    proxy.heal()
    failed = dict(proxy.failed)
    assert [fs.get_file_info(path).type for _ in range(4)] == [pafs.FileType.File] * 4
    assert proxy.failed == failed


@pytest.mark.integration
def test_writes_the_store_applied_but_answered_with_an_error_land_once(
    proxy: StoreFaultProxy,
    root: str,
    s3_settings: StorageSettings,  # noqa: F811
) -> None:
    """A failed request the store took first (S3 may apply a write it answers 500): retried by
    pyarrow and by delta-rs's conditional put, each write is there once."""
    via = _through(proxy, s3_settings)
    proxy.fail(seconds=30, share=0.5, applied=True)
    storage.write_bytes(f"{root}/blob", b"once", via)
    uri, options = storage.delta_storage(f"{root}/t", via)
    for i in range(3):
        write_deltalake(uri, pa.table({"id": [i]}), mode="append", storage_options=options)
    proxy.heal()
    commits = [f for f in proxy.failures if f.startswith("500 PUT") and "/_delta_log/0" in f]
    assert commits, proxy.failures  # a commit the store made was answered 500
    assert storage.read_bytes(f"{root}/blob", s3_settings) == b"once"
    direct_uri, direct = storage.delta_storage(f"{root}/t", s3_settings)
    table = DeltaTable(direct_uri, storage_options=direct)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2]
