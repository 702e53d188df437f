"""One storage layer: a location URI mapped to what Spark, delta-rs and pyarrow each need, and
the few file operations callers make on any location (docs/design.md, "Object storage").

Example
-------
>>> from spark_ext.storage import Location, StorageSettings, delta_storage
>>> settings = StorageSettings(endpoint="http://127.0.0.1:9000")
>>> delta_storage(Location.parse("s3a://bkt/t"), settings)[0]
's3://bkt/t'
"""

from __future__ import annotations

import os
import posixpath
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from spark_ext import jvm
from spark_ext.errors import ConfigError, SparkExtError

if TYPE_CHECKING:
    import pyarrow.fs as pafs
    from pyspark.sql import SparkSession

__all__ = [
    "S3_CHECKPOINT_FILE_MANAGER",
    "S3_JARS_SET",
    "AccessDenied",
    "BucketNotFound",
    "EndpointUnreachable",
    "Location",
    "StorageError",
    "StorageSettings",
    "check",
    "delete",
    "delta_storage",
    "exists",
    "file_sizes",
    "filesystem",
    "hadoop_conf",
    "identity",
    "is_file",
    "list_prefix",
    "make_folder",
    "read_bytes",
    "s3_jars",
    "session_settings",
    "spark_conf",
    "spark_uri",
    "write_bytes",
]

#: The jar set of ``scripts/jvm/hadoop-aws.pom.xml``; bumped whenever that pom changes.
S3_JARS_SET = "hadoop-aws-3.5.0-awssdk-2.35.4"
#: Spark's checkpoint file manager for S3 (docs/design.md, "Object storage": checkpoints on S3).
S3_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
)
_S3_SCHEMES = {"s3", "s3a", "s3n"}
#: Seconds to connect (one attempt), and :func:`check`'s seconds for an answer (docs/design.md,
#: "Object storage": errors).
_TIMEOUT_S, _PROBE_TIMEOUT_S = 3, 10
#: Attempts of a file operation's request (a 503/500 is retried; docs/design.md, "Object
#: storage": store errors); the start-up probe makes one.
_ATTEMPTS = 4
#: AWS error codes (as pyarrow names them) of refused credentials.
_ACCESS_CODES = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH")


class StorageError(SparkExtError, OSError):
    """A location could not be reached or used; the message names it."""


class BucketNotFound(StorageError):
    """The location's bucket does not exist."""


class AccessDenied(StorageError):
    """The store refused the credentials (unknown key, wrong secret, or no permission)."""


class EndpointUnreachable(StorageError):
    """Nothing answers at the store's endpoint."""


@dataclass(frozen=True)
class StorageSettings:
    """The ``[storage]`` section of a profile: where the S3-API store is and how to sign in
    (empty credentials: the ``AWS_*`` environment's; docs/design.md, "Object storage")."""

    #: ``http(s)://host:port`` of an S3-API server; empty for AWS's own endpoint of ``region``.
    endpoint: str = ""
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.endpoint:
            parts = urlsplit(self.endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/"):
                raise ConfigError(
                    "storage.endpoint", f"{self.endpoint!r} is not http(s)://host:port"
                )

    def credentials(self) -> tuple[str, str, str]:
        """Access key id, secret and session token: the profile's, else the environment's."""
        if self.access_key_id or self.secret_access_key:
            return self.access_key_id, self.secret_access_key, ""
        env = os.environ
        return (
            env.get("AWS_ACCESS_KEY_ID", ""),
            env.get("AWS_SECRET_ACCESS_KEY", ""),
            env.get("AWS_SESSION_TOKEN", ""),
        )


@dataclass(frozen=True)
class Location:
    """A table, checkpoint or state location: an object prefix in a bucket, or an absolute local
    path (the URI forms: docs/design.md, "Object storage")."""

    bucket: str
    #: The key prefix in ``bucket`` (no leading ``/``), or the absolute local path.
    path: str

    @classmethod
    def parse(cls, uri: str | Path | Location) -> Location:
        if isinstance(uri, Location):
            return uri
        text = str(uri)
        parts = urlsplit(text)
        if parts.scheme in _S3_SCHEMES:
            if not parts.netloc:
                raise ConfigError("location", f"{text!r} names no bucket")
            return cls(parts.netloc, parts.path.strip("/"))
        if parts.scheme == "file":
            return cls("", str(Path(parts.path).resolve()))
        if parts.scheme and len(parts.scheme) > 1:  # not a Windows drive letter
            raise ConfigError("location", f"{text!r}: scheme {parts.scheme!r} is not supported")
        return cls("", str(Path(text).resolve()))

    @property
    def is_s3(self) -> bool:
        return bool(self.bucket)

    def join(self, *names: str) -> Location:
        """The location ``names`` below this one."""
        path = posixpath.join(self.path, *names)
        return Location(self.bucket, path.strip("/") if self.bucket else path)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.path}" if self.is_s3 else self.path


# -- what each client needs ----------------------------------------------------------------
def spark_uri(location: Location | str) -> str:
    """The URI Spark reads and writes ``location`` by: ``s3a://`` or the local path."""
    loc = Location.parse(location)
    return f"s3a://{loc.bucket}/{loc.path}" if loc.is_s3 else loc.path


def _named(settings: StorageSettings, prefix: str, names: str) -> dict[str, str]:
    """Region, endpoint, key id, secret and session token under a client's ``names`` (five,
    space-separated, each after ``prefix``)."""
    key, secret, token = settings.credentials()
    if not (key and secret):
        key = secret = token = ""
    values = (settings.region, settings.endpoint, key, secret, token)
    return {
        prefix + name: value for name, value in zip(names.split(), values, strict=True) if value
    }


def hadoop_conf(settings: StorageSettings) -> dict[str, str]:
    """Hadoop's ``fs.s3a.*`` settings for ``settings``."""
    conf = _named(
        settings, "fs.s3a.", "endpoint.region endpoint access.key secret.key session.token"
    )
    if settings.endpoint:
        conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(settings.endpoint.startswith("https")).lower()
    if "fs.s3a.access.key" in conf:
        kind = "Temporary" if "fs.s3a.session.token" in conf else "Simple"
        conf["fs.s3a.aws.credentials.provider"] = (
            f"org.apache.hadoop.fs.s3a.{kind}AWSCredentialsProvider"
        )
    return conf


def spark_conf(settings: StorageSettings) -> dict[str, str]:
    """:func:`hadoop_conf` as the ``spark.hadoop.*`` settings a SparkSession is built with."""
    return {f"spark.hadoop.{k}": v for k, v in hadoop_conf(settings).items()}


def session_settings(spark: SparkSession | None = None) -> StorageSettings:
    """The settings ``spark`` (default: the builder's default session, not the active one)
    reaches ``s3a://`` with, from its Hadoop configuration; empty without a session
    (docs/design.md, "Object storage": settings in tasks)."""
    if spark is None:
        if "pyspark.sql" not in sys.modules:
            return StorageSettings()
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        if SparkContext._active_spark_context is None:  # no session in this process
            return StorageSettings()
        spark = SparkSession.builder.getOrCreate()
    if getattr(spark, "_jsparkSession", None) is None:  # Spark Connect: no Hadoop conf here
        return StorageSettings()
    conf = spark._jsparkSession.sessionState().newHadoopConf()

    def get(key: str) -> str:
        return str(conf.get(f"fs.s3a.{key}") or "")

    endpoint = get("endpoint")
    if endpoint and "://" not in endpoint:
        secure = get("connection.ssl.enabled").lower() != "false"
        endpoint = f"{'https' if secure else 'http'}://{endpoint}"
    return StorageSettings(
        endpoint=endpoint,
        region=get("endpoint.region") or StorageSettings.region,
        access_key_id=get("access.key"),
        secret_access_key=get("secret.key"),
    )


def s3_jars_dir() -> Path:
    """Folder of hadoop-aws and the AWS SDK modules it loads."""
    return jvm.cache_root() / "jars" / S3_JARS_SET


def s3_jars() -> list[Path]:
    """The jars Spark needs for ``s3a://`` (``spark.jars``, beside :func:`jvm.spark_jars`)."""
    return jvm._complete_jars(s3_jars_dir())


def delta_storage(
    location: Location | str, settings: StorageSettings
) -> tuple[str, dict[str, str]]:
    """delta-rs's table URI and ``storage_options`` for ``location``: ``s3://`` with
    conditional put (``etag``) for safe concurrent commits, or the local path and ``{}``."""
    loc = Location.parse(location)
    if not loc.is_s3:
        return loc.path, {}
    options = _named(
        settings, "AWS_", "REGION ENDPOINT_URL ACCESS_KEY_ID SECRET_ACCESS_KEY SESSION_TOKEN"
    )
    options["conditional_put"] = "etag"
    if settings.endpoint:
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        options["AWS_ALLOW_HTTP"] = str(settings.endpoint.startswith("http:")).lower()
    return str(loc), options


def filesystem(
    location: Location | str,
    settings: StorageSettings | None = None,
    request_timeout: float = 30,
    attempts: int = _ATTEMPTS,
) -> tuple[pafs.FileSystem, str]:
    """A ``pyarrow.fs`` filesystem and the path in it for ``location`` (no ``settings``: the
    session's); S3 checksums only where required (docs/design.md, "Object storage")."""
    import pyarrow.fs as pafs

    loc = Location.parse(location)
    if not loc.is_s3:
        return pafs.LocalFileSystem(), loc.path
    settings = settings or session_settings()
    os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "WHEN_REQUIRED")
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")
    key, secret, token = settings.credentials()
    kwargs: dict[str, object] = {
        "region": settings.region,
        "connect_timeout": _TIMEOUT_S,
        "request_timeout": request_timeout,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
        "allow_delayed_open": True,
    }
    if key and secret:
        kwargs.update(access_key=key, secret_key=secret, session_token=token or None)
    if settings.endpoint:
        parts = urlsplit(settings.endpoint)
        kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme)
    return pafs.S3FileSystem(**kwargs), f"{loc.bucket}/{loc.path}".rstrip("/")


# -- file operations on any location ---------------------------------------------------------
@contextmanager
def _opened(
    location: Location | str,
    settings: StorageSettings | None,
    request_timeout: float = 30,
    attempts: int = _ATTEMPTS,
) -> Iterator[tuple[Location, pafs.FileSystem, str]]:
    """The location, its filesystem and path; a client error inside becomes the
    :class:`StorageError` it is, naming the location (``FileNotFoundError`` passes as it is)."""
    loc = Location.parse(location)
    if loc.is_s3 and settings is None:
        settings = session_settings()
    fs, path = filesystem(loc, settings, request_timeout, attempts)
    try:
        yield loc, fs, path
    except FileNotFoundError:
        raise
    except OSError as exc:
        text = str(exc)
        first = text.strip().splitlines()[0][:200] if text.strip() else text
        if "NO_SUCH_BUCKET" in text:
            raise BucketNotFound(f"{loc}: bucket {loc.bucket!r} does not exist") from exc
        if any(code in text for code in _ACCESS_CODES):
            raise AccessDenied(f"{loc}: the store refused the credentials ({first})") from exc
        if "NETWORK_CONNECTION" in text or any(f"curlCode: {c}," in text for c in (6, 7, 28)):
            endpoint = (settings.endpoint if settings else "") or "AWS"
            raise EndpointUnreachable(f"{loc}: no answer from {endpoint}") from exc
        raise


def check(location: Location | str, settings: StorageSettings | None = None) -> None:
    """Fail fast with a typed error if ``location``'s bucket is missing, the credentials are
    refused or the endpoint does not answer; a local location always passes."""
    import pyarrow.fs as pafs

    with _opened(location, settings, _PROBE_TIMEOUT_S, attempts=1) as (loc, fs, _):
        if loc.is_s3 and fs.get_file_info(loc.bucket).type == pafs.FileType.NotFound:
            raise BucketNotFound(f"{loc}: bucket {loc.bucket!r} does not exist")


def _info(location: Location | str, settings: StorageSettings | None) -> pafs.FileInfo:
    with _opened(location, settings) as (_, fs, path):
        return fs.get_file_info(path)


def exists(location: Location | str, settings: StorageSettings | None = None) -> bool:
    """Whether an object (or local file or folder) is at ``location``."""
    import pyarrow.fs as pafs

    return _info(location, settings).type != pafs.FileType.NotFound


def read_bytes(location: Location | str, settings: StorageSettings | None = None) -> bytes:
    """The whole content at ``location``; ``FileNotFoundError`` if there is none."""
    with _opened(location, settings) as (_, fs, path), fs.open_input_stream(path) as f:
        return bytes(f.read())


def write_bytes(
    location: Location | str, data: bytes, settings: StorageSettings | None = None
) -> None:
    """Replace the content at ``location`` with ``data`` atomically, a reader sees the old or
    the new content (S3: one PUT; local: a temporary file of its own, synced, renamed over it)."""
    with _opened(location, settings) as (loc, fs, path):
        if loc.is_s3:
            with fs.open_output_stream(path) as f:
                f.write(data)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)


def file_sizes(location: Location | str, settings: StorageSettings | None = None) -> dict[str, int]:
    """The size of every file under ``location`` (recursively) by path relative to it; a local
    file removed while listed (a live query's clean-up) is left out."""
    import pyarrow.fs as pafs

    loc = Location.parse(location)
    if not loc.is_s3:
        found = {}
        for root, _, names in os.walk(loc.path):
            for name in names:
                full = os.path.join(root, name)
                try:
                    found[os.path.relpath(full, loc.path).replace(os.sep, "/")] = os.stat(
                        full
                    ).st_size
                except FileNotFoundError:
                    continue
        return found
    with _opened(loc, settings) as (_, fs, path):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    if not infos:  # a missing bucket lists as empty too
        check(loc, settings)
    base = path.rstrip("/") + "/"
    return {
        i.path[len(base) :]: int(i.size or 0)
        for i in infos
        if i.type == pafs.FileType.File and i.path.startswith(base)
    }


def list_prefix(location: Location | str, settings: StorageSettings | None = None) -> list[str]:
    """The paths of :func:`file_sizes`, sorted."""
    return sorted(file_sizes(location, settings))


def delete(location: Location | str, settings: StorageSettings | None = None) -> None:
    """Delete the file at ``location``, or everything under it; nothing there is no error."""
    import pyarrow.fs as pafs

    with _opened(location, settings) as (_, fs, path):
        kind = fs.get_file_info(path).type
        if kind == pafs.FileType.File:
            fs.delete_file(path)
        elif kind == pafs.FileType.Directory:
            fs.delete_dir(path)


def is_file(location: Location | str, settings: StorageSettings | None = None) -> bool:
    """Whether a file (an object, not a prefix of others) is at ``location``."""
    return bool(_info(location, settings).is_file)


def identity(
    location: Location | str, settings: StorageSettings | None = None
) -> tuple[int, int] | None:
    """What tells the file at ``location`` from one written again in its place: (inode, mtime)
    locally, (size, mtime) on S3; ``None`` if there is none."""
    loc = Location.parse(location)
    if not loc.is_s3:
        try:
            st = os.stat(loc.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns
    info = _info(loc, settings)
    return (int(info.size or 0), info.mtime_ns or 0) if info.is_file else None


def make_folder(location: Location | str) -> None:
    """Make the local folder ``location`` (and its parents); object storage has no folders."""
    loc = Location.parse(location)
    if not loc.is_s3:
        os.makedirs(loc.path, exist_ok=True)
