"""``python -m gen run --engine golden|amaranth|verilator DIR``: execute a compiled program and verify it."""
from __future__ import annotations

import json
import sys
import time

NAME = "run"
HELP = "run a compiled program directory on an engine and verify the rollout shards"
ORDER = 34
ENGINES = ("golden", "amaranth", "verilator")


def add_arguments(p):
    p.add_argument("dir", help="compiled program directory (from `compile`)")
    p.add_argument("--engine", default="golden", help=f"{' | '.join(ENGINES)} (default golden)")
    p.add_argument("--vcd", default=None, help="amaranth engine: write a VCD waveform here")


def execute(loaded, engine: str, vcd=None, progress=None) -> dict:
    """Run on an engine; returns the executor-neutral result dict (memories, tlb, ...)."""
    from model.errors import InputError
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    if loaded.memories is None:
        raise InputError(f"{loaded.path}: compiled without memory images (--no-images); nothing to run")
    if engine == "amaranth":
        from gen.sim_amaranth import run_amaranth
        return run_amaranth(loaded, vcd=vcd, progress=progress)
    if engine == "verilator":
        from gen.sim_verilator import run_verilator
        return run_verilator(loaded, progress=progress)
    from model.golden import GoldenSystem
    t0 = time.perf_counter()
    res = GoldenSystem(loaded.arch, loaded.programs, loaded.memories).run()
    return {"engine": "golden", "memories": res.memories, "tlb": res.tlb,
            "status": [s.name for s in res.status], "cause": [c.name for c in res.cause], "pc": res.pc,
            "faults": res.faults, "bytes_copied": res.bytes_copied, "bytes_remapped": res.bytes_remapped,
            "descriptors": res.descriptors, "seconds": time.perf_counter() - t0}


def program_digest(words) -> str:
    import hashlib
    return hashlib.sha256(b"".join(w.to_bytes(32, "little") for w in words)).hexdigest()


def summarize(loaded, res: dict, check_program_hash: bool = True) -> dict:
    from model.verify import verify
    v = verify(loaded.manifest, res["memories"], res["tlb"])
    # zero-copy bytes: rollout pages the compiler pointed at training pages
    remapped = [d["report"]["bytes_remapped"] for d in loaded.manifest["devices"]]
    # the compiled end state (golden model at compile time): memories and committed mappings
    end_state = []
    for dev in loaded.manifest["devices"]:
        d = dev["device"]
        want = dev["report"].get("program_sha256")
        if check_program_hash and want and program_digest(loaded.programs[d]) != want:
            end_state.append(f"device {d}: program differs from the one compiled (SHA-256)")
        exp_tlb = dev["report"].get("expected_tlb")
        if exp_tlb is not None and _norm_tlb(res["tlb"][d]) != _norm_tlb(exp_tlb):
            end_state.append(f"device {d}: final TLB differs from the compiled end state")
        exp = loaded.expected[d] if loaded.expected else None
        if exp is not None and bytes(res["memories"][d]) != exp:
            end_state.append(f"device {d}: final memory differs from mem_expected.hex")
    ok = (v["verified"] and not end_state and not res["faults"]
          and all(s == "HALTED" for s in res["status"]))
    out = {"verified": ok, "engine": res["engine"], "status": res["status"], "cause": res["cause"],
           "pc": res["pc"], "faults": res["faults"], "bytes_copied": sum(res["bytes_copied"]),
           "bytes_remapped": sum(remapped), "descriptors": sum(res["descriptors"]),
           "per_device": {"bytes_copied": res["bytes_copied"], "bytes_remapped": remapped,
                          "descriptors": res["descriptors"],
                          "rollout_bytes_mapped": res["bytes_remapped"]},
           "rollout_bytes_checked": v["bytes_checked"], "mismatches": v["mismatches"],
           "end_state_mismatches": end_state}
    for k in ("cycles", "lower_bound_cycles", "sim_cycles_per_s"):
        if k in res:
            out[k] = res[k]
    return out


def _norm_tlb(entries):
    return sorted((e["index"], e["ctx"], e["staged"], e["size"], e["va"], e["pa"], e["dev"], e["perm"])
                  for e in entries)


def run(args) -> int:
    from gen.artifacts import load_compiled
    loaded = load_compiled(args.dir)
    res = execute(loaded, args.engine, vcd=getattr(args, "vcd", None),
                  progress=lambda s: print(s, file=sys.stderr, flush=True))
    out = summarize(loaded, res)
    json.dump(out, sys.stdout)
    print()
    return 0 if out["verified"] else 1
