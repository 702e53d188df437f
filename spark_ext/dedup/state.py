"""The filters' versioned state outside Spark, one atomic file per batch (:class:`BloomStateStore`),
for ``DeltaDedupSink``'s tasks (docs/design.md, "Dedup"); each file carries a CRC32 and its version.
"""

from __future__ import annotations

import os
import struct
import uuid
import zlib
from pathlib import Path

from spark_ext.dedup.errors import DedupStateError
from spark_ext.errors import ConfigError

__all__ = ["BloomStateStore", "BucketStateStore"]

_STATE_MAGIC = b"SXD1"
_STATE_HEADER = struct.Struct("<4sqI")  # magic, version, number of buckets
_BUCKET_HEADER = struct.Struct("<iI")  # bucket, length of its RotatingBloom bytes


class BloomStateStore:
    """The filters after each batch, one file per version (= batch id), written atomically;
    pruning and a version ahead of the batch: docs/design.md, "Dedup", ``DeltaDedupSink``."""

    def __init__(self, path: str | Path, keep: int = 3) -> None:
        self.path = Path(path)
        if keep < 2:
            raise ConfigError("dedup.state_versions_kept", f"must be >= 2, got {keep}")
        self.keep = keep

    def versions(self) -> list[int]:
        if not self.path.exists():
            return []
        return sorted(int(p.stem) for p in self.path.glob("*.bloom") if p.stem.isdigit())

    def _file(self, version: int) -> Path:
        return self.path / f"{version:020d}.bloom"

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
        return version, self._decode(self._file(version).read_bytes(), version)

    def save(self, batch_id: int, buckets: dict[int, bytes]) -> None:
        parts = [_STATE_HEADER.pack(_STATE_MAGIC, batch_id, len(buckets))]
        for bucket in sorted(buckets):
            parts += [_BUCKET_HEADER.pack(bucket, len(buckets[bucket])), buckets[bucket]]
        body = b"".join(parts)
        data = body + struct.pack("<I", zlib.crc32(body))
        self.path.mkdir(parents=True, exist_ok=True)
        target = self._file(batch_id)
        # A temporary file of its own: two attempts of one task (a speculative copy) may
        # save the same version at once; each replaces the target whole.
        tmp = target.with_suffix(f".{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
        versions = self.versions()
        # The version this batch started from stays, however old (docs/design.md, "Dedup").
        base = max((v for v in versions if v < batch_id), default=None)
        for old in versions:
            if old <= batch_id - self.keep and base is not None and old < base:
                self._file(old).unlink(missing_ok=True)

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

    def __init__(self, root: str | Path, keep: int = 3) -> None:
        self.root = Path(root)
        self.keep = BloomStateStore(self.root, keep).keep  # validates keep

    def bucket(self, bucket: int) -> BloomStateStore:
        """The versioned store of one bucket."""
        return BloomStateStore(self.root / f"bucket-{bucket:05d}", self.keep)

    def load_before(self, bucket: int, batch_id: int) -> tuple[int | None, bytes | None]:
        """``(version, filter bytes)`` of ``bucket`` newest below ``batch_id`` (or ``None``s)."""
        version, stored = self.bucket(bucket).load_before(batch_id)
        return version, stored.get(bucket)

    def save(self, bucket: int, batch_id: int, data: bytes) -> None:
        """Save ``bucket``'s filters after ``batch_id`` (atomic; older versions pruned)."""
        self.bucket(bucket).save(batch_id, {bucket: data})

    def buckets(self) -> list[int]:
        """Buckets with saved state."""
        if not self.root.exists():
            return []
        return sorted(int(p.name.split("-")[1]) for p in self.root.glob("bucket-*") if p.is_dir())
