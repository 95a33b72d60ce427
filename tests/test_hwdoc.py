"""docs/hw.md names every stage component the blocks compose, so its
diagrams cannot silently fall behind the code."""
import re
from pathlib import Path

import pytest

from gen.bench_blocks import BENCH_ARCH, stage_components

DOC = (Path(__file__).resolve().parent.parent / "docs" / "hw.md").read_text()


def _tops():
    from hw.coprocessor import Coprocessor
    from hw.device import Device
    from hw.dma import DMA
    from hw.interconnect import Interconnect
    from hw.mmu import MMU
    from hw.reduce import FpAdd, ReduceOnWrite
    return {"FpAdd": lambda: FpAdd("f32", 32),
            "ReduceOnWrite": lambda: ReduceOnWrite(addr_width=8, data_width=32),
            "DMA": lambda: DMA(BENCH_ARCH, data_width=32), "MMU": lambda: MMU(BENCH_ARCH),
            "Coprocessor": lambda: Coprocessor(BENCH_ARCH, data_width=32),
            "Device": lambda: Device(BENCH_ARCH, data_width=32),
            "Interconnect": lambda: Interconnect(BENCH_ARCH, data_width=32)}


@pytest.mark.parametrize("name", ["DMA", "MMU", "Coprocessor", "Device", "Interconnect",
                                  "FpAdd", "ReduceOnWrite"])
def test_every_stage_is_named_in_docs_hw(name):
    stages = {type(c).__name__ for _, c in stage_components(_tops()[name]())}
    assert stages, f"{name} composes no stage components"
    missing = sorted(s for s in stages if not re.search(rf"\b{s}\b", DOC))
    assert not missing, f"docs/hw.md does not name {missing} (stages of {name})"
