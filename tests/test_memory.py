"""Memory stays flat in file length: the peak RSS of restoring a 10-minute input is within 150 MB of a
1-minute one. Each restore runs in a fresh process so the two peaks are measured apart."""

import json
import os
import subprocess
import sys

import pytest
import soundfile as sf

from tests.conftest import speechlike

RATE = 22050  # not the model rate: the streaming resamplers are part of what is measured
LIMIT_MB = 150

CHILD = """
import json, resource, sys
from restore.cli import main
sys.argv = ["restore"] + sys.argv[1:]
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code
print(json.dumps({"code": code, "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def write_minutes(path, minutes):
    with sf.SoundFile(path, "w", samplerate=RATE, channels=1, subtype="PCM_16") as f:
        for m in range(minutes):  # a minute at a time: the test itself stays small too
            f.write(speechlike(60.0, RATE, seed=m))


def peak_rss_mb(src, out, model):
    # one torch thread: the tiny model gains nothing from more, and on a shared 2-core machine a second
    # thread waiting on a busy core slows it down many times over
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [str(src), "-o", str(out), "--model", str(model), "--sampler", "flash", "--steps", "1", "--quiet"]
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 0, proc.stderr
    return result["maxrss_kb"] / 1024  # Linux reports kilobytes


@pytest.mark.slow
def test_peak_rss_flat_in_file_length(tmp_path, tiny_model):
    short, long = tmp_path / "one.wav", tmp_path / "ten.wav"
    write_minutes(short, 1)
    write_minutes(long, 10)
    rss_short = peak_rss_mb(short, tmp_path / "one_out.flac", tiny_model)
    rss_long = peak_rss_mb(long, tmp_path / "ten_out.flac", tiny_model)
    info = sf.info(str(tmp_path / "ten_out.flac"))
    assert (info.frames, info.samplerate) == (10 * 60 * RATE, RATE)
    # a whole 10-minute file held once at float32 would already be 50 MB
    assert rss_long - rss_short < LIMIT_MB, f"peak RSS {rss_short:.0f} MB (1 min) vs {rss_long:.0f} MB (10 min)"
