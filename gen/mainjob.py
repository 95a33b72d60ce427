"""The main job: what ``python -m gen`` runs with no arguments.

1. capture tiny-qwen2 from verl's real FSDP2 engine (2 CPU ranks, gloo);
2. check derived layouts and the verl scheme's bytes against the capture;
3. compare minimal and verl plans for tiny-qwen2 and qwen2.5-7b;
4. compile the tiny-qwen2 reshard and verify it on the golden model;
5. run it on the Amaranth RTL, verified, with cycles against the lower bound;
6. emit the Verilog and run the same reshard on it under Verilator, checking
   it agrees with the Amaranth simulation cycle for cycle;
7. the closed loop, 2 iterations: verl trains with GRPO, every weight sync runs
   on the emitted Verilog, the TP rollout generates from what it left in
   memory, bit-identical to a run fed by verl's export directly;
8. the captured training step's forward and backward collectives (parameter
   all-gathers, gradient reduce-scatters) replayed on the emitted Verilog with
   ISA v2's reduce-on-write, checked against the tensors gloo produced;
9. the iteration model (three walls) for qwen2.5-7b GRPO on 8x H100, then
   ``build/report/index.html``: every step above, FPGA builds found under
   ``build/``, the model with its pictures and the published figures.

Every step prints what it found; the last line is the verdict.
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

BUILD = Path("build")


class _Steps:
    """Prints the steps and keeps what each printed (through a tee on stdout) for the report."""
    KEYS = ("trace", "layouts", "plans", "golden", "rtl", "verilog", "loop", "collectives", "model")

    def __init__(self):
        self.failures: list[str] = []
        self.t0 = time.monotonic()
        self.steps: list = []
        self._out = sys.stdout
        sys.stdout = self

    def write(self, text: str) -> int:
        self._out.write(text)
        if self.steps:
            cur = self.steps[-1]
            parts = text.split("\n")
            if cur.lines:
                cur.lines[-1] += parts[0]
            else:
                cur.lines.append(parts[0])
            cur.lines.extend(parts[1:])
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def __getattr__(self, name):
        # fileno, isatty, encoding...: whatever else a writer asks of stdout is the terminal's
        return getattr(self._out, name)

    def close(self) -> None:
        sys.stdout = self._out

    def step(self, title: str):
        from gen.report import Step
        self._out.write(f"\n== {title}\n")
        self._out.flush()
        self.steps.append(Step(self.KEYS[len(self.steps)], title.split(". ", 1)[-1]))

    def progress(self, msg: str) -> None:
        """A progress line: on the terminal, not in the report."""
        self._out.write(f"   {msg}\n")
        self._out.flush()

    def check(self, ok: bool, what: str):
        self._out.write(f"   [{'ok' if ok else 'FAIL'}] {what}\n")
        self._out.flush()
        self.steps[-1].checks.append((what, ok))
        if not ok:
            self.failures.append(what)


def _plan_line(model_name: str, train: str, rollout: str, dtype: str = "bf16") -> tuple[str, float]:
    from gen.api import fmt_bytes
    from model.models import load_model
    from model.plan import make_plan
    from model.specs import parse_spec
    model = load_model(model_name)
    ts, rs = parse_spec(train, "train"), parse_spec(rollout, "rollout")
    mn = make_plan(model, ts, rs, dtype, "minimal")
    vr = make_plan(model, ts, rs, dtype, "verl")
    ratio = mn.total_bytes / vr.total_bytes
    return (f"{model_name} {train} -> {rollout} ({dtype}): minimal {fmt_bytes(mn.total_bytes)} total, "
            f"max/rank {fmt_bytes(max(mn.bytes_in))}; verl {fmt_bytes(vr.total_bytes)} total, "
            f"max/rank {fmt_bytes(max(vr.bytes_in))}; ratio {ratio:.3f}"), ratio


def run(args) -> int:
    s = _Steps()
    try:
        return _run(s)
    finally:
        s.close()


def _run(s: _Steps) -> int:
    print("ReshardIP main job: verl capture -> layouts -> plans -> programs -> golden model -> RTL -> Verilog -> closed loop -> collectives")

    s.step("1. capture: verl 0.9.1 FSDPEngine, tiny-qwen2, fsdp2, 2 CPU ranks (gloo), collective tensors recorded")
    from model.capture import capture, read_trace
    trace_path = BUILD / "trace" / "tiny-fsdp2.jsonl"
    summary = capture("tiny-qwen2", "fsdp2", 2, trace_path, record_data=True)
    trace = read_trace(trace_path)
    phases: dict[str, int] = {}
    for c in trace["collectives"]:
        phases[c["phase"]] = phases.get(c["phase"], 0) + 1
    print(f"   {trace_path}: {len(trace['shards'])} shard, {len(trace['collectives'])} collective, "
          f"{len(trace['buckets'])} bucket records in {summary['seconds']} s; collectives by phase {phases}")
    s.check(all(phases.get(p, 0) > 0 for p in ("export", "forward", "backward")),
            "collectives recorded in export, forward and backward")

    s.step("2. derived layouts and verl-scheme bytes against the capture")
    from model.compare import compare_shards, compare_verl_bytes
    problems = compare_shards(trace)
    for p in problems[:5]:
        print(f"   {p}")
    s.check(not problems, f"derived fsdp2:dp=2 layout equals the captured shards "
                          f"({len(trace['shards'])} records, range for range)")
    got, want = compare_verl_bytes(trace)
    print(f"   export all-gather bytes in per rank: captured {got}, verl-scheme plan {want}")
    s.check(got == want, "verl-scheme plan bytes equal the captured export bytes (fp32)")

    s.step("3. transfer plans: minimal against what verl does")
    for args_ in (("tiny-qwen2", "fsdp2:dp=2", "vllm:tp=2", "fp32"), ("qwen2.5-7b", "fsdp2:dp=8", "vllm:tp=4")):
        line, ratio = _plan_line(*args_)
        print(f"   {line}")
        s.check(ratio < 1.0, f"minimal moves less than verl for {args_[0]}")

    s.step("4. compile tiny-qwen2 fsdp2:dp=2 -> vllm:tp=2 and verify on the golden model")
    from gen.api import CompileOptions, compile_reshard, execute, summarize
    from gen.artifacts import load_compiled
    from gen.result import compare_results
    built = compile_reshard(CompileOptions(), progress=lambda m: print(f"   {m}"))
    out = built.write(BUILD / "prog" / "tiny")
    for r in built.report:
        print(f"   device {r['device']}: {r['descriptors']} descriptors, {r['bytes_copied']:,} B copied, "
              f"{r['bytes_remapped']:,} B remapped, port lower bound {r['lower_bound_beats']:,} beats")
    loaded = load_compiled(out)
    res = summarize(loaded, execute(loaded, "golden"))
    print(f"   golden: status {res['status']}, {res['rollout_bytes_checked']:,} rollout bytes checked "
          f"against real sliced tensors, faults {res['faults']}")
    s.check(res["verified"], "golden model reproduces the vLLM shards bit for bit")

    s.step("5. the same reshard on the RTL (Amaranth simulator)")
    am = execute(loaded, "amaranth", progress=s.progress)
    ares = summarize(loaded, am)
    print(f"   status {ares['status']}; {am.cycles:,} cycles vs lower bound {am.lower_bound_cycles:,} "
          f"({am.cycles / am.lower_bound_cycles:.3f}x); {am.sim_cycles_per_s:,.0f} cycles/s")
    s.check(ares["verified"], "RTL rollout shards, memories and committed mappings match bit for bit")

    s.step("6. the emitted Verilog under Verilator (C++ harness, binary images)")
    vl = execute(loaded, "verilator", progress=s.progress)
    vres = summarize(loaded, vl)
    diffs = compare_results(vl, am, cycles=True)
    for d in diffs[:5]:
        print(f"   {d}")
    print(f"   {vl.cycles:,} cycles (Amaranth {am.cycles:,}); "
          f"{vl.sim_cycles_per_s:,.0f} cycles/s, {vl.sim_cycles_per_s / max(am.sim_cycles_per_s, 1):,.0f}x "
          f"the Amaranth simulator")
    s.check(vres["verified"], "Verilog run verified against the sliced tensors")
    s.check(not diffs, "Verilog and Amaranth agree: memories, mappings, faults, cycle for cycle")

    s.step("7. the closed loop: verl trains (GRPO), the Verilog syncs the weights, the TP rollout generates")
    from gen.loop import LoopError, LoopOptions, report_lines, run_loop
    try:
        loop = run_loop(LoopOptions(steps=2, engine="verilator"), progress=lambda m: print(f"   {m}", flush=True))
    except LoopError as e:
        print(f"   error: {e}")
        loop = {"verified": False}
    else:
        for line in report_lines(loop):
            print(f"   {line}")
    s.check(loop["verified"], "2 iterations: every sync verified, bit-identical to the reference run")

    s.step("8. the training step's forward and backward collectives on the Verilog (reduce-on-write)")
    from gen.collectives import CollectiveOptions, report_lines as collective_lines, run_trace
    coll = run_trace(CollectiveOptions(trace=str(trace_path), phases=("forward", "backward"),
                                       engine="verilator", small=False),
                     progress=lambda m: print(f"   {m}", flush=True))
    for line in collective_lines(coll):
        if not line.startswith("VERDICT"):          # the main job has one verdict, the last line
            print(f"   {line}")
    if loop.get("iterations"):
        sync = loop["iterations"][-1]["sync"]
        print(f"   beside the weight sync: {sync['cycles']:,} cycles per iteration (step 7)")
    s.check(coll["verified"], "every replayed collective equals what gloo produced inside verl "
                              "(bit for bit on 2 ranks)")

    s.step("9. the iteration model: qwen2.5-7b GRPO on 8x H100, three walls, weight sync by scheme")
    from gen.perf_run import PerfOptions, report_lines as perf_lines, run_perf, temp_dir, write_plots
    from model.engine_cost import load_costs
    from model.published import comparison_rows
    popts = PerfOptions()
    perf = run_perf(popts)
    for line in perf_lines(perf):
        print(f"   {line}")
    plots = write_plots(popts, temp_dir(), progress=s.progress)
    published = comparison_rows(load_costs())
    s.check(perf["iteration_s"] > 0 and len(plots) == 4, "the model placed every phase and drew its four pictures")

    elapsed = time.monotonic() - s.t0
    if s.failures:
        verdict = f"VERDICT: FAIL ({len(s.failures)} check(s) failed: {'; '.join(s.failures)}) in {elapsed:.0f} s"
    else:
        verdict = (f"VERDICT: PASS (capture, layouts, plans, golden model, RTL, Verilog, the closed loop and the "
                   f"training collectives all agree) in {elapsed:.0f} s")
    from gen.report import write_report
    page = write_report(s.steps, verdict, perf, plots, published, BUILD / "report")
    shutil.rmtree(plots[0].parent, ignore_errors=True)
    print(f"\nreport: {page}")
    print(f"\n{verdict}")
    return 1 if s.failures else 0
