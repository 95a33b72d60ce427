"""The DMA self-test's workload: descriptors, an initial image and the
expected image from the golden model (:mod:`hw.dma_selftest` runs it).

The descriptors are the corner cases the DMA's unit tests sweep, in a memory
split in two halves: sources in the lower half, destinations packed without
overlap in the upper half, so the result does not depend on how the channels
interleave. The expected image is what :class:`model.golden.GoldenSystem`
computes for the same COPY instructions under an identity mapping, not
anything the RTL produced.
"""
from __future__ import annotations

import random
import zlib
from dataclasses import dataclass

from gen.asm import assemble
from hw.isa import ArchParams, Status
from model.golden import GoldenSystem

#: Smallest page of the self-test's architecture: the DMA's bursts must fit in it.
PAGE_BYTES = 1024


@dataclass(frozen=True)
class DmaSelfTestCase:
    arch: ArchParams
    image: bytes
    descriptors: list[dict]
    expected: bytes

    @property
    def expected_crc(self) -> int:
        return zlib.crc32(self.expected)

    @property
    def bytes_copied(self) -> int:
        return sum(d["row_bytes"] * d["rows"] for d in self.descriptors)


def dma_selftest_arch(*, mem_bytes: int = 4096, channels: int = 4) -> ArchParams:
    return ArchParams(devices=1, mem_bytes=mem_bytes, channels=channels, tlb_entries=1, contexts=1,
                      semaphores=1, imem_words=64, addr_bits=max(12, (mem_bytes - 1).bit_length()),
                      page_sizes=(PAGE_BYTES, 4 * PAGE_BYTES, 16 * PAGE_BYTES, 1 << 20))


def dma_selftest_case(*, mem_bytes: int = 4096, channels: int = 4, bus_bytes: int = 4,
                      count: int = 12, seed: int = 0) -> DmaSelfTestCase:
    """``count`` copies over ``channels`` channels: 1-D lengths 1..4x the bus
    width and odd, unaligned offsets, 2-D copies with strides."""
    arch = dma_selftest_arch(mem_bytes=mem_bytes, channels=channels)
    rng = random.Random(seed)
    half = mem_bytes // 2
    image = bytes(rng.randrange(256) for _ in range(mem_bytes))
    descriptors, dst = [], half + rng.randrange(bus_bytes)
    for i in range(count):
        rows = 1 if i % 3 else rng.randrange(2, 5)
        row_bytes = rng.randrange(1, 4 * bus_bytes + 1) if i % 2 else rng.randrange(8 * bus_bytes, 40 * bus_bytes)
        dst_stride = row_bytes + rng.randrange(0, 2 * bus_bytes) if rows > 1 else 0
        span = (rows - 1) * dst_stride + row_bytes
        if dst + span > mem_bytes:
            break
        src_stride = row_bytes + rng.randrange(0, 3 * bus_bytes) if rows > 1 else 0
        src = rng.randrange(0, half - ((rows - 1) * src_stride + row_bytes))
        descriptors.append({"chan": i % channels, "ctx": 0, "tag": i, "src": src, "dst": dst,
                            "row_bytes": row_bytes, "rows": rows, "src_stride": src_stride,
                            "dst_stride": dst_stride})
        dst += span + rng.randrange(0, bus_bytes + 1)
    size = next(i for i, p in enumerate(arch.page_sizes) if p >= mem_bytes)
    program = ["version 1", f"remap ctx=0 size={size} perm=rw dev=0 va=0 pa=0 staged=0"]
    for d in descriptors:
        program.append("copy " + " ".join(f"{k}={v}" for k, v in d.items()))
    program += ["fence mask=0", "halt"]
    res = GoldenSystem(arch, [assemble("\n".join(program))], [image]).run()
    if res.status[0] != Status.HALTED:
        raise RuntimeError(f"golden model: the self-test program ended {res.status[0]}")
    return DmaSelfTestCase(arch, image, descriptors, bytes(res.memories[0]))
