"""Bloom filters with a stable hash (the same in every process), and a time-rotated set of them.

>>> f = BloomFilter.for_capacity(1000, fp_rate=0.01)
>>> f.add(["a", "b"]).tolist(), f.contains(["a", "c"]).tolist()
([False, False], [True, False])
"""

from __future__ import annotations

import logging
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from spark_ext.dedup.errors import BloomFormatError
from spark_ext.errors import ConfigError
from spark_ext.hashing import Keys, splitmix64, stable_hash64

__all__ = ["BloomFilter", "RotatingBloom", "expected_fp_rate", "optimal_parameters"]

log = logging.getLogger(__name__)

_MAGIC = b"SXB1"
_HEADER = struct.Struct("<4sQIQ")  # magic, num_bits, num_hashes, count
_ROT_HEADER = struct.Struct("<4sI")  # magic, number of generations
_GEN_HEADER = struct.Struct("<qI")  # generation index, length of the filter bytes
_ROT_MAGIC = b"SXR1"


def optimal_parameters(capacity: int, fp_rate: float) -> tuple[int, int]:
    """Bits ``m`` and hash count ``k`` for ``capacity`` keys at false-positive rate ``fp_rate``.

    ``m = -n ln p / (ln 2)^2`` rounded up to a whole byte, ``k = round(m / n * ln 2)``.
    """
    if capacity < 1:
        raise ConfigError("bloom.capacity", f"must be >= 1, got {capacity}")
    if not 0.0 < fp_rate < 1.0:
        raise ConfigError("bloom.fp_rate", f"must be in (0, 1), got {fp_rate}")
    bits = math.ceil(-capacity * math.log(fp_rate) / (math.log(2) ** 2))
    bits = max(64, (bits + 7) // 8 * 8)
    hashes = max(1, round(bits / capacity * math.log(2)))
    return bits, hashes


def expected_fp_rate(num_bits: int, num_hashes: int, count: int) -> float:
    """``(1 - e^(-k n / m))^k``: the false-positive rate after ``count`` distinct insertions."""
    return float((1.0 - math.exp(-num_hashes * count / num_bits)) ** num_hashes)


class BloomFilter:
    """A Bloom filter: ``num_bits`` bits (a multiple of 8, packed in ``bits``), ``num_hashes``
    positions per key; ``count`` keys added (those :meth:`add` found maybe present not counted).
    """

    __slots__ = ("bits", "count", "num_bits", "num_hashes")

    def __init__(
        self,
        num_bits: int,
        num_hashes: int,
        bits: npt.NDArray[np.uint8] | None = None,
        count: int = 0,
    ) -> None:
        if num_bits < 8 or num_bits % 8:
            raise ConfigError("bloom.num_bits", f"must be a positive multiple of 8, got {num_bits}")
        if num_hashes < 1:
            raise ConfigError("bloom.num_hashes", f"must be >= 1, got {num_hashes}")
        self.num_bits = num_bits
        self.num_hashes = num_hashes
        self.bits = np.zeros(num_bits // 8, dtype=np.uint8) if bits is None else bits
        self.count = count

    @classmethod
    def for_capacity(cls, capacity: int, fp_rate: float) -> BloomFilter:
        """An empty filter sized for ``capacity`` keys at ``fp_rate`` false positives."""
        bits, hashes = optimal_parameters(capacity, fp_rate)
        return cls(bits, hashes)

    @property
    def nbytes(self) -> int:
        """Bytes of the bit array."""
        return int(self.bits.nbytes)

    def _positions(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Bit positions, shape ``(len(hashes), k)``: ``h1 + i * h2`` (Kirsch and Mitzenmacher),
        ``h2`` from ``h1`` by :func:`~spark_ext.hashing.splitmix64`."""
        h2 = splitmix64(hashes) | np.uint64(1)
        i = np.arange(self.num_hashes, dtype=np.uint64)
        with np.errstate(over="ignore"):
            combined = hashes[:, None] + i[None, :] * h2[:, None]
        return (combined % np.uint64(self.num_bits)).astype(np.int64)

    def _contains_positions(self, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        set_ = (self.bits[pos >> 3] >> (pos & 7).astype(np.uint8)) & np.uint8(1)
        return np.asarray(set_.all(axis=1), dtype=bool)

    def add_hashes(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        """Add keys by hash; per key, whether it was maybe present *before* this call (two equal
        keys of one call both report ``False``: callers dedup within a call exactly)."""
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        pos = self._positions(hashes)
        before = self._contains_positions(pos)
        self._set_positions(pos, before)
        return before

    def _set_positions(self, pos: npt.NDArray[np.int64], before: npt.NDArray[np.bool_]) -> None:
        flat = pos.ravel()
        np.bitwise_or.at(self.bits, flat >> 3, (np.uint8(1) << (flat & 7).astype(np.uint8)))
        self.count += int((~before).sum())

    def contains(self, keys: Keys) -> npt.NDArray[np.bool_]:
        """Per key: ``True`` if maybe present, ``False`` if certainly absent."""
        hashes = stable_hash64(keys)
        if hashes.size == 0:
            return np.zeros(0, dtype=bool)
        return self._contains_positions(self._positions(hashes))

    def add(self, keys: Keys) -> npt.NDArray[np.bool_]:
        """Add ``keys``; returns whether each was maybe present before (see :meth:`add_hashes`)."""
        return self.add_hashes(stable_hash64(keys))

    def expected_fp_rate(self) -> float:
        """``(1 - e^(-k n / m))^k`` for the keys added so far."""
        return expected_fp_rate(self.num_bits, self.num_hashes, self.count)

    def to_bytes(self) -> bytes:
        """Header (magic, m, k, count) followed by the packed bits."""
        header = _HEADER.pack(_MAGIC, self.num_bits, self.num_hashes, self.count)
        return header + self.bits.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        """The filter :meth:`to_bytes` wrote."""
        if len(data) < _HEADER.size:
            raise BloomFormatError(f"{len(data)} bytes is shorter than a Bloom filter header")
        magic, num_bits, num_hashes, count = _HEADER.unpack_from(data)
        if magic != _MAGIC or len(data) != _HEADER.size + num_bits // 8:
            raise BloomFormatError("not a spark_ext Bloom filter (bad magic or length)")
        bits = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size).copy()
        return cls(num_bits, num_hashes, bits, count)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, BloomFilter)
            and (self.num_bits, self.num_hashes, self.count)
            == (other.num_bits, other.num_hashes, other.count)
            and bool(np.array_equal(self.bits, other.bits))
        )

    def __repr__(self) -> str:
        return (
            f"BloomFilter(num_bits={self.num_bits}, num_hashes={self.num_hashes}, "
            f"count={self.count})"
        )


@dataclass
class RotatingBloom:
    """Bloom filters by event-time generation (``t // rotation_ms``); only the newest
    ``generations`` are kept and asked. A key of a dropped generation is reported "maybe"."""

    capacity: int
    fp_rate: float
    rotation_ms: int
    generations: int = 2
    filters: dict[int, BloomFilter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        optimal_parameters(self.capacity, self.fp_rate)  # validates both
        if self.rotation_ms < 1:
            raise ConfigError("bloom.rotation_ms", f"must be >= 1, got {self.rotation_ms}")
        if self.generations < 1:
            raise ConfigError("bloom.generations", f"must be >= 1, got {self.generations}")

    @property
    def newest(self) -> int | None:
        return max(self.filters) if self.filters else None

    @property
    def oldest_kept(self) -> int | None:
        """Oldest generation still answered for (``None`` before the first key)."""
        newest = self.newest
        return None if newest is None else newest - self.generations + 1

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.filters.values())

    def generation_of(self, event_time_ms: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return np.floor_divide(np.asarray(event_time_ms, dtype=np.int64), self.rotation_ms)

    def _rotate(self, newest: int) -> None:
        floor = newest - self.generations + 1
        for gen in [g for g in self.filters if g < floor]:
            log.debug("dropping Bloom generation %s (newest %s)", gen, newest)
            del self.filters[gen]

    def check_and_add(
        self, hashes: npt.NDArray[np.uint64], event_time_ms: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        """Per key: maybe seen before this call; then every key is added (after rotating to the
        newest generation, so keys older than the kept ones are "maybe" and not added)."""
        gens = self.generation_of(event_time_ms)
        if gens.size == 0:
            return np.zeros(0, dtype=bool)
        newest = int(gens.max()) if self.newest is None else max(int(gens.max()), self.newest)
        self.filters.setdefault(newest, BloomFilter.for_capacity(self.capacity, self.fp_rate))
        self._rotate(newest)
        floor = newest - self.generations + 1
        maybe = gens < floor
        # Positions once per filter shape (one, unless state of another capacity was loaded).
        positions: dict[tuple[int, int], npt.NDArray[np.int64]] = {}

        def positions_in(flt: BloomFilter) -> npt.NDArray[np.int64]:
            shape = (flt.num_bits, flt.num_hashes)
            if shape not in positions:
                positions[shape] = flt._positions(hashes)
            return positions[shape]

        for flt in self.filters.values():
            maybe |= flt._contains_positions(positions_in(flt))
        for gen in np.unique(gens[gens >= floor]):
            sel = gens == gen
            flt = self.filters.setdefault(
                int(gen), BloomFilter.for_capacity(self.capacity, self.fp_rate)
            )
            if sel.all():
                pos = positions_in(flt)
                flt._set_positions(pos, flt._contains_positions(pos))
            else:
                flt.add_hashes(hashes[sel])
        return maybe

    def to_bytes(self) -> bytes:
        parts = [_ROT_HEADER.pack(_ROT_MAGIC, len(self.filters))]
        for gen in sorted(self.filters):
            data = self.filters[gen].to_bytes()
            parts.append(_GEN_HEADER.pack(gen, len(data)))
            parts.append(data)
        return b"".join(parts)

    def load_bytes(self, data: bytes) -> None:
        """Replace the filters with those :meth:`to_bytes` wrote."""
        magic, count = _ROT_HEADER.unpack_from(data)
        if magic != _ROT_MAGIC:
            raise BloomFormatError("not a spark_ext rotating Bloom filter (bad magic)")
        offset = _ROT_HEADER.size
        filters: dict[int, BloomFilter] = {}
        for _ in range(count):
            gen, length = _GEN_HEADER.unpack_from(data, offset)
            offset += _GEN_HEADER.size
            filters[gen] = BloomFilter.from_bytes(data[offset : offset + length])
            offset += length
        self.filters = filters
