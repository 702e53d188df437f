"""The filters' versioned state outside Spark, one atomic file per batch (:class:`BloomStateStore`),
for ``DeltaDedupSink``'s tasks (docs/design.md, "Dedup"); each file carries a CRC32 and its version.
The folder is any :mod:`spark_ext.storage` location (local or ``s3a://``).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from spark_ext import storage
from spark_ext.dedup.errors import DedupStateError
from spark_ext.errors import ConfigError
from spark_ext.storage import Location, StorageSettings

__all__ = ["BloomStateStore", "BucketStateStore"]

_STATE_MAGIC = b"SXD1"
_STATE_HEADER = struct.Struct("<4sqI")  # magic, version, number of buckets
_BUCKET_HEADER = struct.Struct("<iI")  # bucket, length of its RotatingBloom bytes


class BloomStateStore:
    """The filters after each batch, one file per version (= batch id), written atomically;
    pruning and a version ahead of the batch: docs/design.md, "Dedup", ``DeltaDedupSink``."""

    def __init__(
        self,
        path: str | Path | Location,
        keep: int = 3,
        settings: StorageSettings | None = None,
    ) -> None:
        self.path = Location.parse(path)
        if keep < 2:
            raise ConfigError("dedup.state_versions_kept", f"must be >= 2, got {keep}")
        self.keep = keep
        #: Carried into the tasks that use this store (docs/design.md, "Object storage").
        self.settings = settings

    def versions(self) -> list[int]:
        names = storage.list_prefix(self.path, self.settings)
        stems = [n[: -len(".bloom")] for n in names if "/" not in n and n.endswith(".bloom")]
        return sorted(int(stem) for stem in stems if stem.isdigit())

    def _file(self, version: int) -> Location:
        return self.path.join(f"{version:020d}.bloom")

    def load_before(self, batch_id: int) -> tuple[int | None, dict[int, bytes]]:
        """``(version, {bucket: filter bytes})`` of the newest version below ``batch_id``."""
        versions = self.versions()
        ahead = [v for v in versions if v > batch_id]
        if ahead:
            raise DedupStateError(
                f"{self.path} holds filter state of batch {ahead[-1]} but the query runs batch "
                f"{batch_id}: the checkpoint was reset; give the sink a new state folder, "
                "catalog and sink id (or restore the checkpoint)"
            )
        below = [v for v in versions if v < batch_id]
        if not below:
            return None, {}
        version = below[-1]
        return version, self._decode(
            storage.read_bytes(self._file(version), self.settings), version
        )

    def save(self, batch_id: int, buckets: dict[int, bytes]) -> None:
        parts = [_STATE_HEADER.pack(_STATE_MAGIC, batch_id, len(buckets))]
        for bucket in sorted(buckets):
            parts += [_BUCKET_HEADER.pack(bucket, len(buckets[bucket])), buckets[bucket]]
        body = b"".join(parts)
        data = body + struct.pack("<I", zlib.crc32(body))
        # Atomic: two attempts of one task (a speculative copy) each replace the file whole.
        storage.write_bytes(self._file(batch_id), data, self.settings)
        versions = self.versions()
        # The version this batch started from stays, however old (docs/design.md, "Dedup").
        base = max((v for v in versions if v < batch_id), default=None)
        for old in versions:
            if old <= batch_id - self.keep and base is not None and old < base:
                storage.delete(self._file(old), self.settings)

    def _decode(self, data: bytes, version: int) -> dict[int, bytes]:
        where = self._file(version)
        if len(data) < _STATE_HEADER.size + 4:
            raise DedupStateError(f"{where}: {len(data)} bytes is too short")
        body, (crc,) = data[:-4], struct.unpack("<I", data[-4:])
        if zlib.crc32(body) != crc:
            raise DedupStateError(f"{where}: checksum mismatch (damaged file)")
        magic, stored, count = _STATE_HEADER.unpack_from(body)
        if magic != _STATE_MAGIC or stored != version:
            raise DedupStateError(f"{where}: not filter state of version {version}")
        out, offset = {}, _STATE_HEADER.size
        for _ in range(count):
            bucket, length = _BUCKET_HEADER.unpack_from(body, offset)
            offset += _BUCKET_HEADER.size
            out[bucket] = body[offset : offset + length]
            offset += length
        return out


class BucketStateStore:
    """One :class:`BloomStateStore` per bucket under ``<root>/bucket-<b>``, for a task per bucket."""

    def __init__(
        self,
        root: str | Path | Location,
        keep: int = 3,
        settings: StorageSettings | None = None,
    ) -> None:
        self.root = Location.parse(root)
        self.keep = BloomStateStore(self.root, keep).keep  # validates keep
        self.settings = settings

    def bucket(self, bucket: int) -> BloomStateStore:
        """The versioned store of one bucket."""
        return BloomStateStore(self.root.join(f"bucket-{bucket:05d}"), self.keep, self.settings)

    def load_before(self, bucket: int, batch_id: int) -> tuple[int | None, bytes | None]:
        """``(version, filter bytes)`` of ``bucket`` newest below ``batch_id`` (or ``None``s)."""
        version, stored = self.bucket(bucket).load_before(batch_id)
        return version, stored.get(bucket)

    def save(self, bucket: int, batch_id: int, data: bytes) -> None:
        """Save ``bucket``'s filters after ``batch_id`` (atomic; older versions pruned)."""
        self.bucket(bucket).save(batch_id, {bucket: data})

    def buckets(self) -> list[int]:
        """Buckets with saved state."""
        folders = {n.split("/")[0] for n in storage.list_prefix(self.root, self.settings)}
        return sorted(int(f[len("bucket-") :]) for f in folders if f.startswith("bucket-"))
