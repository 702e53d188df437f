"""Rows/s of the exactly-once Delta and Kafka sinks against Spark's own Delta and Kafka sinks.

``SPARK_EXT_BENCH_SINKS=kafka`` (or ``delta``) runs one half only. The Kafka half measures the
two-phase sink (a transaction per task, records never pass the driver) and the idempotent one.
``--storage s3``: the Delta sinks and Spark's Delta sink writing tables to the S3 store of the
``s3`` profile, each with its batch time (median, p95) and the object-store requests per batch,
counted by a proxy every client (S3A, delta-rs, pyarrow) reaches the store through.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from benchmarks.common import BenchContext, Figure, batch_ms, percentile, start_query, timed
from benchmarks.ingest import events_topic
from connectors import kafka
from connectors.sinks import Trigger, exactly_once_to_delta, exactly_once_to_kafka
from jobs.exactly_once_delta import parse_events
from jobs.exactly_once_kafka import forward
from spark_ext.storage import StorageSettings

EVENTS = 1_000_000
#: Same micro-batches for every variant: 5 batches at full scale.
BATCH_FRACTION = 5
#: Events of the Kafka sinks' warm-up (one small batch through each sink, not timed).
WARM_EVENTS = 3000
#: Micro-batches of the S3 half (its p95 is the 95th percentile of these).
S3_BATCHES = 6
#: The proxy's own path: its counts since the last call.
COUNTS_PATH = "/__counts__"
#: Request headers not passed on by the counting proxy (it reads the body itself).
_HOP = {"connection", "keep-alive", "expect", "proxy-connection", "transfer-encoding"}
ONCE = Trigger(available_now=True)


def request_kind(method: str, target: str) -> str:
    """The S3 operation of a request: ``LIST`` (a GET of a bucket with ``list-type``,
    ``prefix`` or ``delimiter``), else its HTTP method (``POST ?delete``: a multi-delete;
    ``POST ?uploads`` / ``?uploadId``: the start and end of a multipart upload, a ``PUT``)."""
    query = parse_qs(urlsplit(target).query, keep_blank_values=True)
    if method == "GET" and ({"list-type", "prefix", "delimiter"} & set(query)):
        return "LIST"
    if method == "POST" and "delete" in query:
        return "DELETE"
    if method == "POST" and ({"uploads", "uploadId"} & set(query)):
        return "PUT"
    return method


class _CountingProxy(BaseHTTPRequestHandler):
    """Passes each request on to :attr:`upstream` unchanged (clients sign for the proxy's host,
    so signatures hold) and counts it by :func:`request_kind`; ``GET COUNTS_PATH`` answers the
    counts since the last such call, as JSON."""

    protocol_version = "HTTP/1.1"
    upstream = ""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _forward(self) -> None:
        if self.path == COUNTS_PATH:
            with self.lock:
                data = json.dumps(self.counts).encode()
                self.counts.clear()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        with self.lock:
            self.counts[request_kind(self.command, self.path)] += 1
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for key, value in self.headers.items():
                if key.lower() not in _HOP:
                    conn.putheader(key, value)
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
        except OSError:  # the store did not answer: the client retries
            conn.close()
            self.send_error(502)
            return
        head = self.command == "HEAD"
        self.send_response_only(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in _HOP and (head or key.lower() != "content-length"):
                self.send_header(key, value)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward


def _serve(upstream: str, endpoint: Any) -> None:
    _CountingProxy.upstream = urlsplit(upstream).netloc
    ThreadingHTTPServer.request_queue_size = 256  # many parallel connections (delta-rs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CountingProxy)
    server.daemon_threads = True
    endpoint.put(f"http://127.0.0.1:{server.server_address[1]}")
    server.serve_forever()


def start_proxy(upstream: str) -> str:
    """The endpoint of a counting proxy in front of ``upstream``, in a process of its own: a
    delta-rs call that holds the GIL while it waits for the store would stall one in ours."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    context.Process(target=_serve, args=(upstream, queue), daemon=True).start()
    return str(queue.get(timeout=300))


def take_counts(proxy: str) -> Counter[str]:
    """The requests the proxy at ``proxy`` counted since the last call, by kind."""
    with urllib.request.urlopen(proxy + COUNTS_PATH, timeout=60) as r:
        return Counter(json.loads(r.read()))


def delta_sinks(
    ctx: BenchContext, source: Callable[[], Any], storage: StorageSettings | None = None
) -> dict[str, Callable[[str | None], Any]]:
    """Variant -> ``start(table)``: a query of ``source()``'s parsed events into the Delta table
    ``table`` (``None``: one in the variant's scratch folder); Spark's own sink first."""

    def spark(table: str | None) -> Any:
        return start_query(parse_events(source()), ctx.folder("spark-delta"), table=table)

    def ours(mode: Any) -> Callable[[str | None], Any]:
        def start(table: str | None) -> Any:
            out = ctx.folder(f"eo-delta-{mode}")
            return exactly_once_to_delta(
                parse_events(source()), table or str(out / "table"), sink_id="bench",
                checkpoint=str(out / "chk"), mode=mode, trigger=ONCE, storage=storage,
            )  # fmt: skip

        return start

    return {
        "spark delta sink": spark,
        "two-phase delta (delta-rs commit)": ours("two_phase"),
        "idempotent delta (txnAppId)": ours("idempotent"),
    }


def run(ctx: BenchContext) -> list[Figure]:
    if ctx.storage == "s3":
        return run_s3(ctx)
    n = ctx.n(EVENTS)
    topic = events_topic(ctx, n)
    run_id = int(time.time())
    figures: list[Figure] = []

    def source(name: str = topic) -> Any:
        per_trigger = max(1000, n // BATCH_FRACTION)
        return kafka.read_stream(
            ctx.spark, ctx.bootstrap, name, max_offsets_per_trigger=per_trigger
        )

    def measure(metric: str, variant: str, start: Callable[[], Any], base: bool = False) -> None:
        seconds = timed(start)
        figures.append(Figure("sinks", variant, metric, n / seconds, "rows/s", base, f"{n:,} rows"))
        print(f"  {variant}: {seconds:.1f}s", flush=True)

    halves = os.environ.get("SPARK_EXT_BENCH_SINKS", "all")
    delta = delta_sinks(ctx, source)
    timed(lambda: delta["spark delta sink"](None))  # warm-up, not timed: JIT and classes
    if halves in ("all", "delta"):
        for i, (variant, start) in enumerate(delta.items()):
            measure("delta rows/s", variant, lambda start=start: start(None), base=i == 0)
    if halves not in ("all", "kafka"):
        return figures

    # -- Kafka: forwarded records -> a new topic each time ------------------------------
    def target(mode: str, tag: str) -> str:
        name = f"bench-sink-{mode}{tag}-{run_id}"
        kafka.create_topic(ctx.bootstrap, name, 3)
        return name

    def spark_kafka(name: str = topic, tag: str = "") -> Any:
        records = forward(source(name)).drop("record_id")  # the same key/value, nothing else
        options = {**kafka.spark_options(ctx.bootstrap), "topic": target("spark", tag)}
        return start_query(records, ctx.folder(f"spark-kafka{tag}"), "kafka", **options)

    def ours_kafka(mode: Any, name: str = topic, tag: str = "") -> Callable[[], Any]:
        def start() -> Any:
            out = ctx.folder(f"eo-kafka-{mode}{tag}")
            return exactly_once_to_kafka(
                forward(source(name)), target(mode, tag), bootstrap=ctx.bootstrap,
                sink_id=f"bench{tag}_{run_id}", checkpoint=str(out / "chk"), mode=mode,
                trigger=ONCE,
            )  # fmt: skip

        return start

    # Warm-up (not timed): the first Python-worker query pays seconds of start-up and imports,
    # once per long-running query, a cost Spark's own sink never has.
    warm = events_topic(ctx, WARM_EVENTS)
    timed(lambda: spark_kafka(warm, "_warm"))
    timed(ours_kafka("two_phase", name=warm, tag="_warm"))
    timed(ours_kafka("idempotent", name=warm, tag="_warm"))
    measure("kafka rows/s", "spark kafka sink", spark_kafka, base=True)
    measure("kafka rows/s", "two-phase kafka (1 txn/task)", ours_kafka("two_phase"))
    measure("kafka rows/s", "idempotent kafka (record ids)", ours_kafka("idempotent"))
    return figures


def run_s3(ctx: BenchContext) -> list[Figure]:
    """The Delta half with every table on the ``s3`` profile's store (checkpoints local: the
    same for every variant), through a counting proxy."""
    from connectors.s3.local_store import LocalS3Store
    from spark_ext import storage
    from spark_ext.config import load_profile

    LocalS3Store().start()  # a store already answering is used as it is
    store = load_profile("s3").storage
    first = not ctx.s3_proxy  # one per process: S3A keeps the endpoint it was first given
    if first:
        ctx.s3_proxy = start_proxy(store.endpoint)
    proxy = ctx.s3_proxy
    settings = StorageSettings(
        endpoint=proxy,
        region=store.region,
        access_key_id=store.access_key_id,
        secret_access_key=store.secret_access_key,
    )
    for key, value in storage.hadoop_conf(settings).items():
        ctx.spark.conf.set(key, value)  # before the session's first s3a:// access
    n = ctx.n(EVENTS)
    topic = events_topic(ctx, n)
    root = storage.Location("spark-ext", f"bench/{uuid.uuid4().hex[:8]}")

    def sinks(per: int) -> dict[str, Callable[[str | None], Any]]:
        read = kafka.read_stream
        return delta_sinks(
            ctx,
            lambda: read(ctx.spark, ctx.bootstrap, topic, max_offsets_per_trigger=per),
            settings,
        )

    if first:  # one batch through each sink, not timed: JIT, classes, workers
        for i, start in enumerate(sinks(n).values()):
            start(storage.spark_uri(root.join(f"warm-{i}"))).awaitTermination()
    figures: list[Figure] = []
    for i, (variant, start) in enumerate(sinks(max(100, n // S3_BATCHES)).items()):
        table = storage.spark_uri(root.join(variant.split()[0], uuid.uuid4().hex[:6]))
        take_counts(proxy)
        began = time.perf_counter()
        query = start(table)
        query.awaitTermination()
        seconds = time.perf_counter() - began
        counts = take_counts(proxy)
        times = batch_ms(query, "addBatch")
        k = len(times) or 1
        values = [
            ("delta rows/s", n / seconds, "rows/s"),
            ("batch ms median", percentile(times, 0.5), "ms"),
            ("batch ms p95", percentile(times, 0.95), "ms"),
            ("requests/batch", sum(counts.values()) / k, ""),
            ("LIST/batch", counts["LIST"] / k, ""),
            ("GET+HEAD/batch", (counts["GET"] + counts["HEAD"]) / k, ""),
            ("PUT/batch", counts["PUT"] / k, ""),
        ]
        note = f"{n:,} rows, {len(times)} batches"
        figures += [Figure("sinks-s3", variant, m, v, u, i == 0, note) for m, v, u in values]
        print(f"  {variant}: {seconds:.1f}s {dict(counts)}", flush=True)
    storage.delete(root, settings)
    return figures
