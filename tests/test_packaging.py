"""A non-editable install works: the wheel carries the package and the shipped model and nothing else
(no top-level `eval`), and its `restore` command restores a file from any folder with the model it
carries. Built offline, from a copy of what the wheel is made of."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import soundfile as sf

from restore import __version__
from tests.conftest import speechlike

ROOT = Path(__file__).resolve().parent.parent


def source_tree(dst: Path) -> Path:
    """What a source distribution holds: the project files, the package and the model (hard links
    where possible: the model is ~100 MB)."""
    dst.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dst / name)
    shutil.copytree(ROOT / "restore", dst / "restore", ignore=shutil.ignore_patterns("__pycache__"))
    link = lambda s, d: os.link(s, d) if os.stat(s).st_dev == os.stat(dst).st_dev else shutil.copy2(s, d)  # noqa: E731
    shutil.copytree(ROOT / "assets" / "model", dst / "assets" / "model", copy_function=link)
    return dst


@pytest.mark.slow
def test_the_wheel_installs_and_restores_from_anywhere(tmp_path):
    src = source_tree(tmp_path / "src")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"),
                          str(src)], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("restore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"restore", f"restore-{__version__}.dist-info"}  # no `eval`
    shipped = {p.name for p in (ROOT / "assets" / "model").iterdir() if p.suffix in (".json", ".safetensors")}
    assert {n.rpartition("/")[2] for n in names if n.startswith("restore/assets/model/")} == shipped

    site = tmp_path / "site"
    subprocess.run(pip + ["install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True)
    run = tmp_path / "elsewhere"
    run.mkdir()
    sf.write(run / "x.wav", speechlike(1.5), 16000)
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("RESTORE_MODEL", None)
    where = subprocess.run([sys.executable, "-c", "import restore, restore.weights as w; "
                            "print(restore.__file__); print(w.find_model())"],
                           cwd=run, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), where  # the installed package and its model
    command = site / "bin" / "restore"
    version = subprocess.run([command, "--version"], cwd=run, env=env, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"restore {__version__}"
    out = subprocess.run([command, "x.wav", "-o", "y.wav", "--plan", "cpu"], cwd=run, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    y, sr = sf.read(run / "y.wav")
    assert sr == 16000 and len(y) == 24000 and abs(y).max() > 0
