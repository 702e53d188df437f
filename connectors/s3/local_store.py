"""A local S3-API server (S3Proxy, from the cached jars, objects in its memory) on 127.0.0.1, its
own JVM, with fixed local credentials and one bucket (docs/design.md, "Object storage").

Command line::

    python -m connectors.s3.local_store start|stop|status [--data-dir DIR] [--port 9000]
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from connectors.processes import command_line, java, port_open, read_pid, spawn, stop_pid
from spark_ext import jvm, storage
from spark_ext.jobrun import REPO
from spark_ext.storage import StorageSettings

__all__ = ["S3PROXY_SET", "LocalS3Store", "StoreConfig", "StoreError", "main"]

log = logging.getLogger(__name__)

#: The jar set of ``scripts/jvm/s3proxy.pom.xml``; bumped whenever that pom changes.
S3PROXY_SET = "s3proxy-2.6.0"
MAIN_CLASS = "org.gaul.s3proxy.Main"

LOGBACK = """\
<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d %level %logger{{20}} %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="file"/></root>
</configuration>
"""


class StoreError(storage.StorageError):
    """The local object store could not be started or stopped."""


@dataclass(frozen=True)
class StoreConfig:
    """Where the local store keeps its pid, settings and log, and how it runs; the credentials
    are fixed, for local use only."""

    data_dir: Path = REPO / "var" / "s3"
    host: str = "127.0.0.1"
    port: int = 9000
    bucket: str = "spark-ext"
    access_key_id: str = "spark-ext"
    secret_access_key: str = "spark-ext-local-secret"
    heap: str = "256m"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "s3proxy.pid"

    def settings(self) -> StorageSettings:
        """The ``[storage]`` settings that reach this store (``conf/s3.toml`` has the same)."""
        return StorageSettings(
            endpoint=self.endpoint,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )

    def properties(self) -> str:
        props = {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key_id,
            "s3proxy.credential": self.secret_access_key,
            "jclouds.provider": "transient",
            "jclouds.identity": "local",
            "jclouds.credential": "local",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())


def libs_dir() -> Path:
    """Folder of S3Proxy's runtime classpath."""
    return jvm.cache_root() / "jars" / S3PROXY_SET


class LocalS3Store:
    """Start, wait for, and stop the local store by its PID (``LocalS3Store().start()``
    returns its endpoint, ``http://127.0.0.1:9000``)."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or StoreConfig()

    def pid(self) -> int | None:
        """The pid of this store's S3Proxy, or None (no file, the process gone, or its pid now
        another program's)."""
        return read_pid(self.config.pid_file, MAIN_CLASS)

    def is_running(self) -> bool:
        return self.pid() is not None and port_open(self.config.host, self.config.port)

    def start(self, timeout: float = 90.0) -> str:
        """Start the store unless one answers on the port (started by this or another checkout),
        wait until it answers, create the bucket; returns the endpoint."""
        c = self.config
        if not port_open(c.host, c.port):
            self._launch(timeout)
        storage.filesystem(f"s3://{c.bucket}", c.settings())  # sets the checksum mode
        import pyarrow.fs as pafs

        try:
            pafs.S3FileSystem(
                access_key=c.access_key_id,
                secret_key=c.secret_access_key,
                endpoint_override=f"{c.host}:{c.port}",
                scheme="http",
                allow_bucket_creation=True,
            ).create_dir(c.bucket)
            storage.check(f"s3://{c.bucket}", c.settings())
        except OSError as exc:
            raise StoreError(f"{c.endpoint} answers but not as the local S3 store: {exc}") from exc
        return c.endpoint

    def _launch(self, timeout: float) -> None:
        c = self.config
        c.data_dir.mkdir(parents=True, exist_ok=True)
        props = c.data_dir / "s3proxy.properties"
        props.write_text(c.properties())
        logback = c.data_dir / "logback.xml"
        logback.write_text(LOGBACK.format(log=c.data_dir / "s3proxy.log"))
        classpath = os.pathsep.join(str(p) for p in jvm._complete_jars(libs_dir()))
        cmd = [
            java(),
            f"-Xmx{c.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            f"-Dlogback.configurationFile={logback}",
            "-cp",
            classpath,
            MAIN_CLASS,
            "--properties",
            str(props),
        ]
        env = dict(os.environ, JAVA_TOOL_OPTIONS="")
        proc = spawn(cmd, env, c.data_dir / "stdout.log", c.pid_file)
        started = time.monotonic()
        while not port_open(c.host, c.port):
            if proc.poll() is not None:
                raise StoreError(f"S3Proxy exited with {proc.returncode}; see {c.data_dir}")
            if time.monotonic() - started > timeout:
                raise StoreError(f"S3Proxy did not answer on {c.endpoint} within {timeout}s")
            time.sleep(0.2)
        log.info(
            "S3Proxy %s up in %.1f s (pid %d)", c.endpoint, time.monotonic() - started, proc.pid
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the store by its PID (SIGTERM, then SIGKILL past ``timeout``)."""
        pid = self.pid()
        if pid is not None:
            stop_pid(pid, timeout)
        self.config.pid_file.unlink(missing_ok=True)


def main() -> None:
    command_line(
        "s3 store",
        lambda folder, port: LocalS3Store(
            StoreConfig(data_dir=folder or StoreConfig.data_dir, port=port or StoreConfig.port)
        ),
    )


if __name__ == "__main__":
    main()
