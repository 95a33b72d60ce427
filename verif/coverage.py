"""Functional coverage (cocotb-coverage): what the regression must reach, bin by bin.

Groups (the bins are listed by :func:`bins`):

- ``insn.op``: every opcode the hardware executes, as issued by a sequence;
- ``copy.chan_x_rows``: COPY channel x row length against the bus (a whole
  number of beats, a partial last beat, shorter than one beat);
- ``remap.size_x_ctx_x_staged``: REMAP page-size index x context (0, 1) x staged;
- ``host.reg_x_access``: every register read and written (a write to a
  read-only or unmapped register must answer SLVERR), and every writable
  register written with a partial byte strobe;
- ``axi.backpressure``: read data and write responses with and without stalls;
- ``end.status_x_cause``: how a program ended (halted; each translation-fault
  cause; each illegal-instruction cause the random programs draw; deadlock);
- ``host.reg_x_strobe``: every writable register written with every 4-bit byte
  strobe pattern (1..15, contiguous or not);
- ``dma.src_x_dst_x_chan``: DMA write beats by source device, destination
  device and channel (the DMA monitor);
- ``net.src_x_dst_x_kind``: messages the crossbar delivered, by the source
  device it stamped, destination and kind (write beat, SIGNAL);
- ``sem.wait``: a WAIT that blocked until its SIGNAL came, and one whose SIGNAL
  was already there;
- ``stream.stall``: each internal stream seen stalled (valid without ready);
- ``xfer.path_x_shape`` and ``xfer.row_vs_bus``: the plan transfers of a replayed
  reshard by path (local copy, zero-copy remap, remote copy) and row count, and
  row length against the bus;
- ``coll.phase_x_op_x_dtype``: the captured collectives replayed (phase, op,
  dtype, reduce op), the kinds verl's FSDP2 step issues that the hardware runs.

Bins a regression cannot hit are not defined: :data:`UNDEFINED` lists them with
the reason (also in docs/uvm.md and the ``undefined`` field of ``gen uvm --json``).
"""
from __future__ import annotations

from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db

from hw.hostport import REGISTERS
from hw.isa import Cause, Op

CHANNELS = 4                       # the regression's architecture (ArchParams default)
ROW_CLASSES = ("whole-beats", "partial-beat", "sub-beat")
OPS = [op.name for op in Op if op is not Op.ILLEGAL]
REG_ACCESS = [(r.name, a) for r in REGISTERS for a in ("read", "write")]
REG_PARTIAL = [r.name for r in REGISTERS if r.access in ("RW", "WO")]
ENDINGS = (["HALTED/NONE"]
           + [f"FAULT/{c.name}" for c in (Cause.NOT_MAPPED, Cause.NO_READ, Cause.NO_WRITE, Cause.REMOTE_READ,
                                          Cause.OUT_OF_RANGE)]
           + [f"ILLEGAL/{c.name}" for c in (Cause.BAD_OPCODE, Cause.RESERVED_BITS, Cause.COMMIT_UNFENCED)]
           + ["ABORTED/DEADLOCK"])


DEVICES = 2                        # the regression's system
STROBES = list(range(1, 16))
REG_WRITABLE = [r.name for r in REGISTERS if r.access in ("RW", "WO")]
NET_KINDS = ("WRITE", "SIGNAL")
WAITS = ("wait-before-signal", "signal-before-wait")
STREAMS = ([f"dma.wr{d}" for d in range(DEVICES)] + [f"net.out{j}" for j in range(DEVICES)]
           + [f"net.in{i}to{j}" for i in range(DEVICES) for j in range(DEVICES)])
XFER_SHAPES = [("local-copy", "one-row"), ("local-copy", "strided"), ("zero-copy", "one-row"),
               ("remote-copy", "one-row"), ("remote-copy", "strided")]
XFER_ROWS = ["aligned"]
#: the kinds of collective in the captured schedule (verif.schedule: verl's FSDP2 training step on
#: micro-qwen2, 2 ranks): phase x op x dtype x reduce op
COLLECTIVES = [("forward", "all_gather", "bfloat16", "none"), ("backward", "all_gather", "bfloat16", "none"),
               ("backward", "reduce_scatter", "float32", "avg"), ("optimizer", "all_reduce", "float32", "sum")]

#: bins not defined because no test of the regression can hit them, and why
UNDEFINED = {
    "xfer.row_vs_bus: unaligned, sub-beat": "the replayed plan (micro-qwen2 fsdp2:dp=2 -> vllm:tp=2; fsdp1, "
    "tp=1 and fp32 plans too) has rows of whole 8-byte beats only: every dimension is a multiple of 8 bytes "
    "and the compiler aligns tensors to 64 bytes; copy.chan_x_rows covers partial and sub-beat rows "
    "(random programs)",
    "xfer.path_x_shape: (zero-copy, strided)": "the compiler remaps only single-row runs of whole pages",
}


@CoverPoint("top.insn.op", xf=lambda name: name, bins=OPS)
def sample_op(name: str) -> None:
    pass


@CoverPoint("top.copy.chan", xf=lambda chan, rows: chan, bins=list(range(CHANNELS)))
@CoverPoint("top.copy.rows", xf=lambda chan, rows: rows, bins=list(ROW_CLASSES))
@CoverCross("top.copy.chan_x_rows", items=["top.copy.chan", "top.copy.rows"])
def _sample_copy(chan: int, rows: str) -> None:
    pass


@CoverPoint("top.remap.size", xf=lambda s, c, st: s, bins=[0, 1, 2, 3])
@CoverPoint("top.remap.ctx", xf=lambda s, c, st: c, bins=[0, 1])
@CoverPoint("top.remap.staged", xf=lambda s, c, st: st, bins=[0, 1])
@CoverCross("top.remap.size_x_ctx_x_staged", items=["top.remap.size", "top.remap.ctx", "top.remap.staged"])
def _sample_remap(size: int, ctx: int, staged: int) -> None:
    pass


@CoverPoint("top.host.reg_x_access", xf=lambda name, access: (name, access), bins=REG_ACCESS)
def _sample_reg(name: str, access: str) -> None:
    pass


@CoverPoint("top.host.partial_strobe", xf=lambda name: name, bins=REG_PARTIAL)
def _sample_partial(name: str) -> None:
    pass


@CoverPoint("top.axi.backpressure", xf=lambda on: "stalled" if on else "free", bins=["stalled", "free"])
def sample_backpressure(on: bool) -> None:
    pass


@CoverPoint("top.end.status_x_cause", xf=lambda s: s, bins=ENDINGS)
def sample_ending(status_cause: str) -> None:
    pass


@CoverPoint("top.host.reg_x_strobe", xf=lambda name, strobe: (name, strobe),
            bins=[(r, s) for r in REG_WRITABLE for s in STROBES])
def _sample_strobe(name: str, strobe: int) -> None:
    pass


@CoverPoint("top.dma.src", xf=lambda s, d, c: s, bins=list(range(DEVICES)))
@CoverPoint("top.dma.dst", xf=lambda s, d, c: d, bins=list(range(DEVICES)))
@CoverPoint("top.dma.chan", xf=lambda s, d, c: c, bins=list(range(CHANNELS)))
@CoverCross("top.dma.src_x_dst_x_chan", items=["top.dma.src", "top.dma.dst", "top.dma.chan"])
def sample_dma_beat(src: int, dst: int, chan: int) -> None:
    pass


@CoverPoint("top.net.src", xf=lambda s, d, k: s, bins=list(range(DEVICES)))
@CoverPoint("top.net.dst", xf=lambda s, d, k: d, bins=list(range(DEVICES)))
@CoverPoint("top.net.kind", xf=lambda s, d, k: k, bins=list(NET_KINDS))
@CoverCross("top.net.src_x_dst_x_kind", items=["top.net.src", "top.net.dst", "top.net.kind"])
def sample_net(src: int, dst: int, kind: str) -> None:
    pass


@CoverPoint("top.sem.wait", xf=lambda w: w, bins=list(WAITS))
def sample_wait(which: str) -> None:
    pass


@CoverPoint("top.stream.stall", xf=lambda s: s, bins=STREAMS)
def sample_stall(stream: str) -> None:
    pass


@CoverPoint("top.xfer.path_x_shape", xf=lambda path, shape, row: (path, shape), bins=XFER_SHAPES)
@CoverPoint("top.xfer.row_vs_bus", xf=lambda path, shape, row: row, bins=XFER_ROWS)
def sample_transfer(path: str, shape: str, row: str) -> None:
    pass


@CoverPoint("top.coll.phase_x_op_x_dtype", xf=lambda ph, op, dt, red: (ph, op, dt, red), bins=COLLECTIVES)
def sample_collective(phase: str, op: str, dtype: str, reduce_op: str) -> None:
    pass


def row_class(row_bytes: int, bus_bytes: int) -> str:
    if row_bytes < bus_bytes:
        return "sub-beat"
    return "whole-beats" if row_bytes % bus_bytes == 0 else "partial-beat"


def sample_insn(item, bus_bytes: int) -> None:
    """An instruction a sequence issued (``verif.items.InsnItem``)."""
    if item.op is None or item.op is Op.ILLEGAL:
        return
    sample_op(item.op.name)
    f = item.fields
    if item.op is Op.COPY and f.get("chan", 0) < CHANNELS and f.get("rows", 0) and f.get("row_bytes", 0):
        _sample_copy(f["chan"], row_class(f["row_bytes"], bus_bytes))
    if item.op is Op.REMAP and f.get("ctx", 0) < 2:
        _sample_remap(f["size"], f["ctx"], f["staged"])


def sample_register(txn) -> None:
    """A host-port access the driver completed (``verif.items.HostTxn``)."""
    if not txn.reg:
        return
    _sample_reg(txn.reg, "write" if txn.write else "read")
    if txn.write and txn.strobe != 0xF:
        _sample_partial(txn.reg)
    if txn.write and txn.reg in REG_WRITABLE and 0 < txn.strobe < 16:
        _sample_strobe(txn.reg, txn.strobe)


def snapshot() -> dict[str, int]:
    """Every bin of every group with its hits: ``{"group: bin": hits}``."""
    out = {}
    for group in ("top.insn.op", "top.copy.chan_x_rows", "top.remap.size_x_ctx_x_staged",
                  "top.host.reg_x_access", "top.host.partial_strobe", "top.axi.backpressure",
                  "top.end.status_x_cause", "top.host.reg_x_strobe", "top.dma.src_x_dst_x_chan",
                  "top.net.src_x_dst_x_kind", "top.sem.wait", "top.stream.stall", "top.xfer.path_x_shape",
                  "top.xfer.row_vs_bus", "top.coll.phase_x_op_x_dtype"):
        item = coverage_db[group]
        for b, hits in item.detailed_coverage.items():
            out[f"{group[4:]}: {b}"] = int(hits)
    return out


def merge(records: list[dict[str, int]]) -> tuple[float, list[str]]:
    """Regression coverage: (percent of bins hit, the bins no test hit)."""
    total: dict[str, int] = {}
    for r in records:
        for k, v in r.items():
            total[k] = total.get(k, 0) + v
    if not total:
        return 0.0, []
    missed = sorted(k for k, v in total.items() if v == 0)
    return 100.0 * (len(total) - len(missed)) / len(total), missed
