"""Compatibility: the hardware generation -> ISA versions table of hw/isa.py,
the versions a compiled program's manifest records, ``run`` refusing what this
hardware does not run, and the "Compatibility" section of docs/isa.md."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from gen.api import CompileOptions, RunOptions, compile_reshard, program_digest, run_compiled
from gen.artifacts import compatibility_error, load_compiled, workload_versions, write_compiled
from gen.hexfile import read_hex, write_hex
from gen.isadoc import isa_markdown, verified_versions
from hw.isa import (GENERATION_ISA, HW_GENERATION, ISA_VERSION, OP_SINCE, SUPPORTED_VERSIONS,
                    WORD_BITS, Op, decode, encode)
from model.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def test_generation_table():
    gens = sorted(GENERATION_ISA)
    assert HW_GENERATION == gens[-1] and GENERATION_ISA[HW_GENERATION] == SUPPORTED_VERSIONS
    assert GENERATION_ISA[1] == (1,)                      # generation 1 ran ISA v1 only
    assert max(SUPPORTED_VERSIONS) == ISA_VERSION
    for older, newer in zip(gens, gens[1:]):               # a generation runs what the last one ran
        assert set(GENERATION_ISA[older]) < set(GENERATION_ISA[newer])
    for g in gens:
        assert list(GENERATION_ISA[g]) == sorted(set(GENERATION_ISA[g]))
    # every opcode this generation has belongs to a version it runs
    assert set(OP_SINCE.values()) <= set(SUPPORTED_VERSIONS)


@pytest.fixture(scope="module")
def built():
    return compile_reshard(CompileOptions())


@pytest.fixture
def compiled(built, tmp_path):
    return built.write(tmp_path / "prog")


def _edit_manifest(path, **changes):
    m = json.loads((path / "manifest.json").read_text())
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    (path / "manifest.json").write_text(json.dumps(m))
    return m


def test_manifest_records_isa_generation_and_installed_versions(compiled):
    man = json.loads((compiled / "manifest.json").read_text())
    declared = {decode(read_hex(compiled / d["program"], WORD_BITS)[1][0]).fields["version"]
                for d in man["devices"]}
    assert declared == {man["isa_version"]}
    assert man["hw_generation"] == HW_GENERATION and man["manifest_version"] >= 2
    want = {}
    for pkg in ("verl", "torch"):
        try:
            want[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            want[pkg] = None
    assert man["versions"] == {**want, "from": "installed"}
    assert compatibility_error(man) is None


def _documented_header():
    """The example header line of docs/trace-format.md."""
    for line in (ROOT / "docs" / "trace-format.md").read_text().splitlines():
        if line.startswith('{"kind":"header"'):
            return json.loads(line)
    raise AssertionError("docs/trace-format.md has no example header line")


def test_manifest_records_the_trace_versions(built, tmp_path):
    header = _documented_header()
    assert workload_versions(header) == {"verl": header["versions"]["verl"],
                                         "torch": header["versions"]["torch"], "from": "trace"}
    out = write_compiled(tmp_path / "p", built.compiled, built.source, built.bus_bits, built.memories,
                         built.expected, built.report, trace_header=header)
    man = json.loads((out / "manifest.json").read_text())
    assert man["versions"] == workload_versions(header)
    # a header without versions: recorded as unknown, not as the installed ones
    assert workload_versions({"kind": "header"}) == {"verl": None, "torch": None, "from": "trace"}


RUNS = ", ".join(map(str, SUPPORTED_VERSIONS))


@pytest.mark.parametrize("changes,message", [
    (dict(isa_version=ISA_VERSION + 1),
     f"programs for ISA version {ISA_VERSION + 1}, this hardware (generation {HW_GENERATION}) "
     f"runs ISA versions {RUNS}"),
    (dict(isa_version=0),
     f"programs for ISA version 0, this hardware (generation {HW_GENERATION}) runs ISA versions {RUNS}"),
    (dict(isa_version=ISA_VERSION + 1, hw_generation=HW_GENERATION + 1),
     f"programs for ISA version {ISA_VERSION + 1} (hardware generation {HW_GENERATION + 1}), this "
     f"hardware (generation {HW_GENERATION}) runs ISA versions {RUNS}"),
    (dict(hw_generation=1),
     f"programs for hardware generation 1, this hardware is generation {HW_GENERATION} "
     f"(ISA versions {RUNS})"),
    (dict(hw_generation=HW_GENERATION + 1),
     f"programs for hardware generation {HW_GENERATION + 1}, this hardware is generation "
     f"{HW_GENERATION} (ISA versions {RUNS})"),
    (dict(hw_generation=None),
     f"no hardware generation recorded (a manifest from before generations), this hardware is "
     f"generation {HW_GENERATION}"),
])
def test_load_refuses_what_this_hardware_does_not_run(compiled, changes, message):
    _edit_manifest(compiled, **changes)
    with pytest.raises(InputError) as ei:
        load_compiled(compiled)
    text = str(ei.value)
    assert text.startswith(f"{compiled / 'manifest.json'}: {message}"), text
    assert "\n" not in text


def _tree(path):
    return sorted((str(p.relative_to(path)), p.stat().st_mtime_ns, p.stat().st_size)
                  for p in path.rglob("*"))


def test_run_cli_refuses_in_one_line_exit_2_nothing_written(compiled, tmp_path):
    _edit_manifest(compiled, isa_version=ISA_VERSION + 1)
    before = _tree(tmp_path)
    r = subprocess.run([sys.executable, "-m", "gen", "run", str(compiled)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (f"error: {compiled / 'manifest.json'}: programs for ISA version "
                        f"{ISA_VERSION + 1}, this hardware (generation {HW_GENERATION}) runs ISA "
                        f"versions {RUNS}; recompile\n")
    assert _tree(tmp_path) == before
    _edit_manifest(compiled, isa_version=ISA_VERSION, hw_generation=1)
    before = _tree(tmp_path)
    r = subprocess.run([sys.executable, "-m", "gen", "run", str(compiled)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1
    assert "hardware generation 1" in r.stderr and f"generation {HW_GENERATION}" in r.stderr
    assert _tree(tmp_path) == before


def test_version_1_programs_run_unchanged_on_this_generation(compiled):
    # the weight-sync programs use only ISA v1 instructions: declared version 1
    # (manifest and VERSION words), this generation runs and verifies them
    man = json.loads((compiled / "manifest.json").read_text())
    assert all(OP_SINCE.get(decode(w).op, 1) == 1
               for d in man["devices"] for w in read_hex(compiled / d["program"], WORD_BITS)[1])
    for d in man["devices"]:
        words = read_hex(compiled / d["program"], WORD_BITS)[1]
        words[0] = encode(Op.VERSION, version=1)
        write_hex(compiled / d["program"], words, WORD_BITS, 0, "declared ISA version 1")
        d["report"]["program_sha256"] = program_digest(words)
    man["isa_version"] = 1
    (compiled / "manifest.json").write_text(json.dumps(man))
    _, summary = run_compiled(RunOptions(compiled))
    assert summary["verified"] is True and summary["status"] == ["HALTED"] * len(man["devices"])
    # and the same manifest, had it claimed a version this generation does not run, is refused
    _edit_manifest(compiled, isa_version=ISA_VERSION + 1)
    with pytest.raises(InputError):
        run_compiled(RunOptions(compiled))


def test_docs_compatibility_section():
    text = (ROOT / "pyproject.toml").read_text()
    pins = {pkg: re.search(rf'"{pkg}==([^"]+)"', text).group(1) for pkg in ("verl", "torch")}
    assert verified_versions() == pins
    doc = isa_markdown()
    sec = doc[doc.index("## Compatibility"):doc.index("## Assembly syntax")]
    for g, versions in GENERATION_ISA.items():
        this = " (this hardware)" if g == HW_GENERATION else ""
        row = f"| {g}{this} | {', '.join(map(str, versions))} | "
        assert row in sec
    assert f"| {HW_GENERATION} (this hardware) | {RUNS} | verl {pins['verl']} / torch {pins['torch']} |" \
        in sec
    v2_ops = ", ".join(f"`{op.name}`" for op, v in OP_SINCE.items() if v == 2)
    assert f"| 2 | {v2_ops} | - | runs |" in sec
    assert f"| 1 | the base instruction set | runs | runs |" in sec
    assert (ROOT / "docs" / "isa.md").read_text() == doc
