"""Every script runs from a bare checkout, as on the GPU machine, where `restore` is not installed.

A script that imports `restore` without putting its checkout on the path fails there with
ModuleNotFoundError (a GPU benchmark was once lost that way). Each script is run with
--help from another folder, with the editable install's import hook removed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p for p in (ROOT / "scripts").glob("*.py") if "from restore" in p.read_text())

BARE = """
import runpy, sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                 and "editable" not in getattr(f, "__name__", "").lower()]
sys.path = [p for p in sys.path if p not in ("", ".")]
sys.argv = [sys.argv[1], "--help"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_import_hook_is_really_removed(tmp_path):
    """Without the checkout on its path, `restore` must not import: else the test below proves nothing."""
    out = subprocess.run([sys.executable, "-c", BARE.replace('runpy.run_path(sys.argv[0], run_name="__main__")',
                                                             "import restore"), "x"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'restore'" in out.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_runs_from_a_bare_checkout(script, tmp_path):
    out = subprocess.run([sys.executable, "-c", BARE, str(script)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage" in out.stdout.lower()
