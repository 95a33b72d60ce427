"""Compiler + golden model end to end: real tensors in, vLLM shards out."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gen.api import CompileOptions, compile_reshard, execute, summarize
from gen.artifacts import load_compiled
from gen.asm import assemble, disassemble
from hw.isa import HW_GENERATION, ISA_VERSION, SUPPORTED_VERSIONS, Op, Status, decode, encode
from model.errors import InputError


def _compile(tmp_path, **kw):
    built = compile_reshard(CompileOptions(**kw))
    return built.compiled, load_compiled(built.write(tmp_path / "prog"))


SMALL = {"model_type": "qwen2", "vocab_size": 150, "hidden_size": 32, "intermediate_size": 48,
         "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
         "tie_word_embeddings": False, "max_position_embeddings": 64}


@pytest.mark.parametrize("train,rollout,dtype", [
    ("fsdp2:dp=2", "vllm:tp=2", "bf16"), ("fsdp1:dp=2", "vllm:tp=2", "fp32"),
    ("fsdp2:dp=4", "vllm:tp=2", "bf16"), ("fsdp1:dp=4", "vllm:tp=4", "fp16"),
    ("megatron:tp=2,pp=1,dp=2", "vllm:tp=4", "bf16"), ("megatron:tp=2,pp=2,dp=1", "vllm:tp=1", "fp32"),
])
def test_tiny_reshards_verify_on_golden(tmp_path, train, rollout, dtype):
    comp, loaded = _compile(tmp_path, train=train, rollout=rollout, dtype=dtype)
    res = summarize(loaded, execute(loaded, "golden"))
    assert res["verified"], res["mismatches"]
    assert res["faults"] == [] and set(res["status"]) == {"HALTED"}
    # the compiler's byte counts are what the golden model moved
    assert res["per_device"]["bytes_copied"] == [d.bytes_copied for d in comp.devices]
    assert res["per_device"]["descriptors"] == [len(d.copies) for d in comp.devices]
    # every program survives disassembly and reassembly unchanged
    for words in loaded.programs:
        assert assemble(disassemble(words)) == words


@pytest.mark.parametrize("cfg_over,train,rollout", [
    ({}, "fsdp2:dp=8", "vllm:tp=8"),                          # tp > KV heads: replicated KV
    ({"tie_word_embeddings": True}, "fsdp1:dp=4", "vllm:tp=2"),
    ({"model_type": "llama", "num_key_value_heads": 4}, "megatron:tp=2,pp=2,dp=1", "vllm:tp=4"),
])
def test_random_small_configs(tmp_path, cfg_over, train, rollout):
    cfg = dict(SMALL, **cfg_over)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    _, loaded = _compile(tmp_path, model=str(path), train=train, rollout=rollout)
    res = summarize(loaded, execute(loaded, "golden"))
    assert res["verified"], res["mismatches"]


def test_zero_copy_remaps_happen(tmp_path):
    comp, loaded = _compile(tmp_path, dtype="fp32")
    assert all(d.bytes_remapped > 0 for d in comp.devices)
    res = summarize(loaded, execute(loaded, "golden"))
    assert res["verified"] and res["bytes_remapped"] == sum(d.bytes_remapped for d in comp.devices)


def _corrupt_and_run(loaded, dev, index, flip_bit, check_program_hash=False):
    programs = [list(p) for p in loaded.programs]
    programs[dev][index] ^= 1 << flip_bit
    loaded.programs = programs
    return summarize(loaded, execute(loaded, "golden"), check_program_hash=check_program_hash)


@pytest.mark.parametrize("seed", range(12))
def test_corrupted_program_word_is_detected(tmp_path, seed):
    rng = np.random.default_rng(seed)
    _, loaded = _compile(tmp_path)
    dev = int(rng.integers(0, 2))
    words = loaded.programs[dev]
    # change one word that matters: a copy, a remap, the commit or the version
    candidates = [i for i, w in enumerate(words) if decode(w).op in (Op.COPY, Op.REMAP, Op.COMMIT, Op.VERSION)]
    index = int(rng.choice(candidates))
    op = decode(words[index]).op
    if op is Op.COPY:
        # address and length bits (a stride bit of a one-row copy is a don't-care:
        # the program hash catches that, see below)
        bit = int(rng.choice([32 + int(rng.integers(0, 20)), 80 + int(rng.integers(0, 20)),
                              128 + int(rng.integers(0, 12)), 160]))
    elif op is Op.REMAP:
        bit = int(rng.choice([14, 15, 24, 80 + int(rng.integers(12, 20)), 200]))
    else:
        bit = int(rng.choice([8, 9, 100]))
    # executed as is, the run must not verify: the end state differs, or the program hash does
    res = _corrupt_and_run(loaded, dev, index, bit, check_program_hash=True)
    assert not res["verified"], (op, bit)


def test_corrupted_copy_address_changes_the_result(tmp_path):
    _, loaded = _compile(tmp_path)
    copy = next(i for i, w in enumerate(loaded.programs[1]) if decode(w).op is Op.COPY)
    res = _corrupt_and_run(loaded, 1, copy, 32 + 6)       # source address + 64 bytes
    assert not res["verified"] and res["mismatches"]


def test_any_changed_word_fails_the_program_hash(tmp_path):
    _, loaded = _compile(tmp_path)
    copy = next(i for i, w in enumerate(loaded.programs[0]) if decode(w).op is Op.COPY and
                decode(w).fields["rows"] == 1)
    # a stride bit of a one-row copy changes nothing the copy does ...
    assert _corrupt_and_run(load_compiled(loaded.path), 0, copy, 250)["verified"]
    # ... but the program is not the one compiled, and that is not accepted
    res = _corrupt_and_run(loaded, 0, copy, 250, check_program_hash=True)
    assert not res["verified"] and "SHA-256" in res["end_state_mismatches"][0]


def test_corrupted_memory_image_is_detected(tmp_path):
    _, loaded = _compile(tmp_path)
    mems = [bytearray(m) for m in loaded.memories]
    # flip one byte of a training shard that the rollout needs (first bytes: embedding)
    mems[1][5] ^= 0x40
    loaded.memories = [bytes(m) for m in mems]
    res = summarize(loaded, execute(loaded, "golden"))
    assert not res["verified"]
    assert res["mismatches"] and res["mismatches"][0]["problem"] == "bytes differ"


def test_compile_cli_reports_and_files(tmp_path):
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "gen", "compile", "--out", str(out), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert len(rep["devices"]) == 2
    man = json.loads((out / "manifest.json").read_text())
    for d in rep["devices"]:
        assert d["descriptors"] > 0 and d["lower_bound_beats"] > 0
        for f in ("program.hex", "program.s", "mem_init.bin", "mem_expected.bin"):
            assert (out / f"dev{d['device']}" / f).is_file()
        for f in ("mem_init.bin", "mem_expected.bin"):       # raw images of the whole memory
            assert (out / f"dev{d['device']}" / f).stat().st_size == man["arch"]["mem_bytes"]
        assert not (out / f"dev{d['device']}" / "mem_init.hex").exists()   # text only on request
    # the version the programs declare (the compiler writes the newest)
    assert man["isa_version"] == ISA_VERSION and man["word_bits"] == {"program": 256, "memory": 64}
    assert man["hw_generation"] == HW_GENERATION and man["versions"]["from"] == "installed"
    r = subprocess.run([sys.executable, "-m", "gen", "run", "--engine", "golden", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verified"] is True
    # mem_expected is the golden final state; a rerun reproduces it
    loaded = load_compiled(out)
    res = execute(loaded, "golden")
    want = (out / "dev1" / "mem_expected.bin").read_bytes()
    assert res.memories[1].tobytes() == want and any(want)
    # --hex adds the same images as $readmemh text
    hx = tmp_path / "h"
    assert _cli("compile", "--out", str(hx), "--hex").returncode == 0
    from gen.hexfile import read_hex_bytes
    head = (hx / "dev0" / "mem_init.hex").read_text().splitlines()[0]
    assert head.startswith("// word_bits=64 base=0x0")
    for name in ("mem_init", "mem_expected"):
        assert read_hex_bytes(hx / "dev1" / f"{name}.hex", 64, loaded.arch.mem_bytes) == \
            (out / "dev1" / f"{name}.bin").read_bytes()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gen", *args], capture_output=True, text=True)


def test_run_refuses_other_isa_version(tmp_path):
    out = tmp_path / "p"
    assert _cli("compile", "--out", str(out)).returncode == 0
    man = json.loads((out / "manifest.json").read_text())
    man["isa_version"] = max(SUPPORTED_VERSIONS) + 1
    (out / "manifest.json").write_text(json.dumps(man))
    r = _cli("run", str(out))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and r.stdout == ""
    assert r.stderr.startswith(f"error: {out / 'manifest.json'}: programs for ISA version "
                               f"{max(SUPPORTED_VERSIONS) + 1}, this hardware (generation "
                               f"{HW_GENERATION}) runs ISA versions 1, 2"), r.stderr


def test_run_bad_hex_names_file_and_line(tmp_path):
    out = tmp_path / "p"
    assert _cli("compile", "--out", str(out)).returncode == 0
    lines = (out / "dev1" / "program.hex").read_text().splitlines()
    lines[4] = "zz" + lines[4][2:]
    (out / "dev1" / "program.hex").write_text("\n".join(lines) + "\n")
    r = _cli("run", str(out))
    assert r.returncode == 2 and "program.hex:5" in r.stderr, r.stderr


def test_run_image_of_the_wrong_size(tmp_path):
    out = tmp_path / "p"
    assert _cli("compile", "--out", str(out), "--hex").returncode == 0
    size = json.loads((out / "manifest.json").read_text())["arch"]["mem_bytes"]
    # a truncated binary image: refused before any run, naming the file and both sizes
    img = out / "dev1" / "mem_init.bin"
    img.write_bytes(img.read_bytes()[:size - 64])
    r = _cli("run", "--engine", "verilator", str(out))
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
    assert f"{img}: {size - 64:,} bytes, the device memory is {size:,} bytes" in r.stderr
    # only text images: a truncated one is refused the same way
    for f in out.glob("dev*/mem_*.bin"):
        f.unlink()
    text = out / "dev0" / "mem_init.hex"
    whole = text.read_text()
    text.write_text("\n".join(whole.splitlines()[:-1]) + "\n")
    r = _cli("run", str(out))
    assert r.returncode == 2 and str(text) in r.stderr and "truncated" in r.stderr, r.stderr
    text.write_text(whole)
    # an image larger than the memory
    man = json.loads((out / "manifest.json").read_text())
    man["arch"]["mem_bytes"] = 4096 * 4
    (out / "manifest.json").write_text(json.dumps(man))
    r = _cli("run", str(out))
    assert r.returncode == 2 and "mem_init.hex" in r.stderr and "beyond" in r.stderr, r.stderr


def test_program_version_mismatch_stops_golden(tmp_path):
    _, loaded = _compile(tmp_path)
    programs = [list(p) for p in loaded.programs]
    programs[0][0] = encode(Op.VERSION, version=7)
    loaded.programs = programs
    res = summarize(loaded, execute(loaded, "golden"))
    assert not res["verified"]
    assert res["status"][0] == "ILLEGAL" and res["cause"][0] == "VERSION_MISMATCH"


def test_tlb_too_small_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="TLB entries"):
        compile_reshard(CompileOptions(tlb_entries=4, train="fsdp2:dp=4"))


def test_layouts_must_fit_memory(tmp_path):
    r = _cli("compile", "--out", str(tmp_path / "p"), "--mem-bytes", "65536")
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and last.startswith("error: ") and "--mem-bytes is 65,536" in last
    assert not (tmp_path / "p").exists()


def test_compile_failure_leaves_nothing(tmp_path):
    out = tmp_path / "p"
    r = _cli("compile", "--out", str(out), "--tlb-entries", "4")
    assert r.returncode == 2 and "TLB entries" in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_single_device_compile_without_images(tmp_path):
    comp, loaded = _compile(tmp_path, only=[1], model="qwen2.5-0.5b", train="fsdp2:dp=4",
                            rollout="vllm:tp=2", images=False, page_sizes="4K,64K,16M,256M",
                            tlb_entries=4096)
    assert [d.device for d in comp.devices] == [1]
    assert loaded.memories is None
    assert len(comp.devices[0].copies) > 0


def test_library_imports_no_command_line_and_no_tests():
    """gen's library modules never import argparse, a cmd_* module or tests (process entry
    points, ``cmd_*``, ``cli``, ``__main__`` and the ``*_worker`` processes (rank workers, the
    FPGA build script's floorplan step), parse argv)."""
    import ast
    root = Path(__file__).resolve().parent.parent / "gen"
    for f in sorted(root.glob("*.py")):
        if f.name.startswith("cmd_") or f.name.endswith("_worker.py") or f.name in ("cli.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for n in names:
                assert n != "argparse" and not n.startswith(("gen.cmd_", "tests")), (f.name, n)
    for f in sorted(root.glob("*.py")):
        assert "import tests" not in f.read_text() and "from tests" not in f.read_text(), f.name


def test_run_results_compare_field_by_field(tmp_path):
    from gen.result import RunResult, compare_results
    _, loaded = _compile(tmp_path)
    a = execute(loaded, "golden")
    b = execute(loaded, "golden")
    assert isinstance(a, RunResult) and a.status == ["HALTED", "HALTED"] and a.cycles is None
    assert compare_results(a, b) == []
    b.pc[1] += 1
    b.memories[0][17] ^= 1
    diffs = compare_results(a, b)
    assert len(diffs) == 2 and diffs[0].startswith("pc differs") and "device 0: final memory differs at [17]" in diffs[1]
    # statuses and causes are names whatever an executor hands in
    r = RunResult("x", [b"\0"], [[]], [Status.HALTED.value], [0], [0], [], [0], [0], [0])
    assert (r.status, r.cause, r["status"]) == (["HALTED"], ["NONE"], ["HALTED"])


def test_compile_options_errors_name_the_option():
    with pytest.raises(InputError, match=r"^--bus-bits must be one of 32, 64, 128, 256, not 48$"):
        compile_reshard(CompileOptions(bus_bits=48))
    with pytest.raises(InputError, match=r"^--page-sizes '4K,x': want four sizes"):
        CompileOptions(page_sizes="4K,x")
    with pytest.raises(InputError, match=r"^--devices 3 does not match"):
        compile_reshard(CompileOptions(devices=3))


def test_the_compiler_sizes_for_shared_builds_and_large_models():
    from gen.compiler import LARGE_PAGES, SHARED_IMEM_WORDS
    exact = compile_reshard(CompileOptions(images=False, shared_build=False)).arch
    shared = compile_reshard(CompileOptions(images=False)).arch
    # memory rounded up to a power of two, instruction memory at least the shared size
    assert shared.mem_bytes == 1 << (exact.mem_bytes - 1).bit_length() and shared.mem_bytes & (shared.mem_bytes - 1) == 0
    assert shared.imem_words == max(SHARED_IMEM_WORDS, exact.imem_words) and exact.imem_words < SHARED_IMEM_WORDS
    # a model the default pages cannot map: large pages and the smallest TLB that fits, said so
    said = []
    big = compile_reshard(CompileOptions(model="qwen2.5-0.5b", bus_bits=256, images=False), said.append)
    assert big.arch.page_sizes == LARGE_PAGES and big.arch.tlb_entries == 128
    assert any("do not fit" in m and "128 TLB entries" in m for m in said)
    # given sizes are never second-guessed
    with pytest.raises(InputError, match="TLB entries"):
        compile_reshard(CompileOptions(model="qwen2.5-0.5b", images=False, tlb_entries=64))
