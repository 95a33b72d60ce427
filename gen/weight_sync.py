"""One weight sync on the simulated hardware: trainer shards in, rollout tensors out.

:class:`WeightSync` compiles the minimal reshard once (fp32, the dtype of verl's master
weights; the layout does not change between training steps), then for every sync

1. turns each rank's FSDP2 local shards (``_local_tensor`` in the program's parameter
   order) into that device's memory image (:meth:`WeightSync.images`),
2. runs the compiled programs on one engine (golden model, Amaranth RTL, or the emitted
   Verilog under Verilator) (:meth:`WeightSync.run`),
3. reads every rollout tensor back through each device's *committed* rollout context
   (context 1), as the rollout would: nothing is read when any device did not halt,
4. checks the images and the tensors against verl's own full weights sliced independently
   by the FSDP2 and vLLM rules (:mod:`model.reference`) (:meth:`WeightSync.check`).

:func:`corrupt_program` makes the faulty programs of ``--inject-fault``. See docs/loop.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gen.api import ENGINES, CompileOptions, compile_to
from model.errors import InputError

FAULT_KINDS = ("unmapped", "range")


@dataclass(frozen=True)
class SyncOptions:
    model: str = "tiny-qwen2"
    train: str = "fsdp2:dp=2"
    rollout: str = "vllm:tp=2"
    engine: str = "verilator"
    bus_bits: int = 64

    def __post_init__(self):
        if self.engine not in ENGINES:
            raise InputError(f"--engine {self.engine!r}: use one of {', '.join(ENGINES)}")


@dataclass(frozen=True)
class SyncFault:
    """The first fault record of a sync that did not commit."""
    device: int
    channel: int
    cause: str
    address: int          # the faulting virtual address
    records: int          # fault records of the whole run
    status: tuple[str, ...]

    def line(self) -> str:
        return (f"device {self.device} channel {self.channel}: {self.cause} at va 0x{self.address:x} "
                f"({self.records} fault record(s); device status {list(self.status)}); "
                f"the rollout context was not committed")

    def to_json(self) -> dict:
        return {"device": self.device, "channel": self.channel, "cause": self.cause, "address": self.address,
                "records": self.records, "status": list(self.status)}


@dataclass
class SyncResult:
    committed: bool
    status: list[str]
    fault: SyncFault | None
    cycles: int | None
    lower_bound_cycles: int
    network_bytes: int
    bytes_copied: int
    bytes_remapped: int
    descriptors: int
    seconds: float
    rollout_entries_committed: list[int] = field(default_factory=list)
    tensors: list[dict[str, torch.Tensor]] | None = field(default=None, repr=False)

    def figures(self) -> dict:
        return {"committed": self.committed, "status": self.status, "cycles": self.cycles,
                "lower_bound_cycles": self.lower_bound_cycles,
                "network_bytes": self.network_bytes, "bytes_copied": self.bytes_copied,
                "bytes_remapped": self.bytes_remapped, "descriptors": self.descriptors,
                "rollout_entries_committed": self.rollout_entries_committed, "seconds": round(self.seconds, 3)}


def corrupt_program(words: list[int], kind: str) -> list[int]:
    """A copy of one device's program that faults before it commits.

    ``unmapped``: the second training-context read mapping is dropped, so copies that read
    that page find no translation (NOT_MAPPED). ``range``: that mapping points past the end
    of the device memory (OUT_OF_RANGE).
    """
    from gen.asm import assemble, disassemble
    if kind not in FAULT_KINDS:
        raise InputError(f"--inject-fault kind {kind!r}: use one of {', '.join(FAULT_KINDS)}")
    lines = disassemble(words).splitlines()
    reads = [i for i, ln in enumerate(lines) if ln.startswith("remap ctx=0 ") and " perm=r " in ln]
    if not reads:
        raise InputError("the program maps no training page to corrupt")
    i = reads[1] if len(reads) > 1 else reads[0]
    if kind == "unmapped":
        del lines[i]
    else:
        parts = [("pa=0xff000000" if p.startswith("pa=") else p) for p in lines[i].split()]
        lines[i] = " ".join(parts)
    return assemble("\n".join(lines))


class WeightSync:
    """The compiled reshard of ``opts`` and the engine that runs it, sync after sync."""

    def __init__(self, opts: SyncOptions, workdir, progress=lambda m: None):
        from model.models import load_model
        from model.specs import parse_spec
        self.opts = opts
        self.model = load_model(opts.model)
        self.train = parse_spec(opts.train, "train")
        self.rollout = parse_spec(opts.rollout, "rollout")
        if self.rollout.pp != 1 or self.rollout.world != self.train.world:
            raise InputError(f"--rollout {opts.rollout}: the loop needs one vLLM TP group over all "
                             f"{self.train.world} devices (tp = world, pp = 1)")
        self.loaded = compile_to(CompileOptions(opts.model, opts.train, opts.rollout, dtype="fp32",
                                                bus_bits=opts.bus_bits, images=False), Path(workdir), progress)
        self.arch = self.loaded.arch
        self.programs = [list(p) for p in self.loaded.programs]
        self.tensors = [dev["tensors"] for dev in self.loaded.manifest["devices"]]
        from gen.sim_amaranth import lower_bound_cycles
        self.lower_bound = lower_bound_cycles(self.loaded.manifest)
        self.train_span = self.loaded.manifest["regions"]["train_span"]
        # bytes the programs send between devices (the compiled port budget)
        self.network_bytes = sum(int(dev["report"]["port_bytes"].get("net_in", 0))
                                 for dev in self.loaded.manifest["devices"])

    @property
    def devices(self) -> int:
        return self.arch.devices

    def prepare(self, progress=lambda m: None) -> None:
        """Build (or find cached) the engine's simulator before the first sync."""
        if self.opts.engine == "verilator":
            from gen.sim_verilator import build_simulator
            build_simulator(self.arch, self.opts.bus_bits, progress)

    def images(self, shards_per_device: list[list[torch.Tensor]]) -> list[bytes]:
        """Device memory images: each device's shards, flattened fp32, back to back at address 0."""
        if len(shards_per_device) != self.devices:
            raise InputError(f"{len(shards_per_device)} ranks' shards for {self.devices} devices")
        out = []
        for d, shards in enumerate(shards_per_device):
            flat = b"".join(t.detach().to(torch.float32).contiguous().view(torch.uint8).numpy().tobytes()
                            for t in shards)
            if len(flat) > self.train_span:
                raise InputError(f"device {d}: {len(flat):,} B of shards exceed the compiled training "
                                 f"region ({self.train_span:,} B)")
            out.append(flat.ljust(self.arch.mem_bytes, b"\0"))
        return out

    def run(self, images: list[bytes], programs: list[list[int]] | None = None) -> SyncResult:
        """Run the programs on the engine; read the rollout tensors if every device committed."""
        from gen.result import run_golden
        programs = programs or self.programs
        t0 = time.perf_counter()
        if self.opts.engine == "golden":
            res = run_golden(self.arch, programs, images)
        elif self.opts.engine == "amaranth":
            from gen.sim_amaranth import run_system
            res = run_system(self.arch, programs, images, data_width=self.opts.bus_bits)
        else:
            from gen.sim_verilator import run_programs
            res = run_programs(self.arch, self.opts.bus_bits, programs, images)
        seconds = time.perf_counter() - t0
        committed = all(s == "HALTED" for s in res.status) and not res.faults
        fault = None
        if not committed:
            f = res.faults[0] if res.faults else None
            bad = next((d for d, s in enumerate(res.status) if s != "HALTED"), 0)
            fault = SyncFault(device=f["device"] if f else bad, channel=f["channel"] if f else -1,
                              cause=f["cause"] if f else res.cause[bad], address=f["va"] if f else res.pc[bad],
                              records=len(res.faults), status=tuple(res.status))
        out = SyncResult(committed, list(res.status), fault, res.cycles, self.lower_bound, self.network_bytes,
                         sum(res.bytes_copied), sum(res.bytes_remapped), sum(res.descriptors), seconds,
                         [sum(1 for e in tlb if e["ctx"] == 1 and not e["staged"]) for tlb in res.tlb])
        if committed:
            out.tensors = [self._read_rollout(res, d) for d in range(self.devices)]
        return out

    def _read_rollout(self, res, d: int) -> dict[str, torch.Tensor]:
        from model.verify import read_through
        out = {}
        for t in self.tensors[d]:
            raw = read_through(res.memories, res.tlb[d], self.arch, 1, t["va"], t["bytes"])
            if raw is None:
                raise InputError(f"device {d}: rollout tensor {t['name']} is not mapped in the committed "
                                 f"rollout context")
            out[t["name"]] = torch.from_numpy(np.frombuffer(raw, np.float32).copy()).reshape(t["shape"])
        return out

    def check(self, full: dict[str, torch.Tensor], images: list[bytes] | None,
              tensors: list[dict[str, torch.Tensor]] | None) -> list[str]:
        """Differences from verl's full weights sliced by the documented rules (empty: none).

        ``full``: ``engine.get_per_tensor_param()`` as name -> fp32 tensor (a tied LM head
        is dropped: vLLM ties it too). ``images`` are checked against the FSDP2 layout
        (``model.reference.train_buffers``), ``tensors`` against ``vllm_local_tensors``.
        """
        from model.reference import train_buffers, vllm_local_tensors
        sd = reference_state(full, self.model)
        problems = []
        if images is not None:
            for d, buf in enumerate(train_buffers(sd, self.model, self.train)):
                want = np.ascontiguousarray(buf, dtype=np.float32).tobytes()
                if images[d][:len(want)] != want or any(images[d][len(want):self.train_span]):
                    problems.append(f"device {d}: memory image differs from the FSDP2 layout of verl's weights")
        if tensors is not None:
            for d in range(self.devices):
                ref = vllm_local_tensors(sd, self.model, self.rollout, d)
                got = tensors[d]
                if list(got) != list(ref):
                    problems.append(f"device {d}: rollout tensor names differ from vLLM's")
                    continue
                for name, want in ref.items():
                    g = got[name]
                    if g.shape != want.shape or not torch.equal(g.view(torch.int32),
                                                                want.contiguous().to(torch.float32).view(torch.int32)):
                        problems.append(f"device {d}: rollout tensor {name} differs from the sliced reference")
        return problems


def reference_state(full: dict[str, torch.Tensor], model) -> dict[str, torch.Tensor]:
    """verl's exported weights as the HF state dict of ``model`` (tied LM head dropped)."""
    names = {p.name for p in model.params}
    sd = {n: t for n, t in full.items() if n in names}
    missing = sorted(names - set(sd))
    if missing:
        raise InputError(f"verl's export lacks {missing[:3]} of model {model.name}")
    return sd


def vllm_tensors_from_export(full: dict[str, torch.Tensor], model, rollout, rank: int) -> dict[str, torch.Tensor]:
    """The reference rollout's weights: verl's export sliced by the vLLM rules, fp32."""
    from model.reference import vllm_local_tensors
    return {n: t.contiguous().to(torch.float32).clone()
            for n, t in vllm_local_tensors(reference_state(full, model), model, rollout, rank).items()}
