"""The main job end to end (``python -m gen``) and its report opened in a real headless browser.

The browser is Debian's ``chromium`` (``.ci/run`` installs it with apt-get when
it is missing): the page is loaded, each picture marks itself loaded or
broken, the DOM after loading is read back and a screenshot taken.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("trace", "layouts", "plans", "golden", "rtl", "verilog", "loop", "collectives", "model",
            "fpga", "sweeps", "iteration-model")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "the report test needs Debian's chromium: apt-get install chromium (.ci/run does this)"
    return exe


def browse(page: Path, shot: Path) -> str:
    """The page's DOM after load, and a screenshot of it in ``shot``."""
    flags = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--virtual-time-budget=10000", "--window-size=1200,4000"]
    url = page.resolve().as_uri()
    dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    r = subprocess.run(flags + [f"--screenshot={shot}", url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    return dom.stdout


@pytest.fixture(scope="module")
def main_job():
    r = subprocess.run([sys.executable, "-m", "gen"], cwd=ROOT, capture_output=True, text=True, timeout=1500)
    return r


@pytest.mark.slow
def test_main_job_passes_and_ends_with_its_verdict(main_job):
    assert main_job.returncode == 0, main_job.stdout[-3000:] + main_job.stderr[-3000:]
    lines = main_job.stdout.strip().splitlines()
    assert lines[-1].startswith("VERDICT: PASS"), lines[-5:]
    assert "report: build/report/index.html" in main_job.stdout


@pytest.mark.slow
def test_report_opens_in_a_browser_with_every_section_and_picture(main_job, tmp_path):
    page = ROOT / "build" / "report" / "index.html"
    assert main_job.returncode == 0 and page.is_file()
    dom = browse(page, tmp_path / "shot.png")
    for sec in SECTIONS:
        assert f'<section id="{sec}">' in dom, sec
    model = dom[dom.index('<section id="iteration-model">'):]
    assert len(re.findall(r"<img [^>]*>", model)) == 4           # the iteration model's four pictures
    imgs = re.findall(r"<img [^>]*>", dom)                        # and any sweep's found under build/
    for img in imgs:
        assert "data-broken" not in img, img
        width = re.search(r'data-loaded="(\d+)"', img)
        assert width and int(width.group(1)) > 100, img
    assert 'class="fail"' not in dom                      # every check of the main job passed
    from matplotlib.image import imread
    shot = imread(tmp_path / "shot.png")
    assert shot.shape[0] >= 1000 and shot.shape[1] >= 1000 and shot.std() > 0.05   # not a blank page


def test_browser_sees_a_broken_picture(tmp_path):
    """The check above can fail: a missing picture is marked broken."""
    from gen.report import IMG
    page = tmp_path / "index.html"
    page.write_text("<!doctype html><html><body>" + IMG.format(src="missing.png", alt="x") + "</body></html>")
    dom = browse(page, tmp_path / "shot.png")
    assert "data-broken" in dom and "data-loaded" not in dom
