set -e; export PYTHONPATH=/tmp/site; mkdir -p /tmp/m12 && cp /tmp/m12b/* .stage/carry/i12a/* /tmp/m12/ && ls /tmp/m12 | wc -l
python3 -c "
import numpy as np, soundfile as sf, pathlib
x, sr = sf.read('assets/example/interview.flac', dtype='float32'); f = pathlib.Path('/tmp/bf'); f.mkdir(exist_ok=True)
rec = np.tile(x, int(np.ceil(180 * sr / len(x))))[: 180 * sr]
[sf.write(f / f'rec{i:03d}.wav', np.roll(rec, i * 997), sr) for i in range(16)]"
run(){ python3 -m restore /tmp/bf -o /tmp/o_$3_$1 --plan cuda --sampler $1 --steps $2 --batch 16 --overwrite -q --model /tmp/$3 >/dev/null 2>/tmp/err || tail -3 /tmp/err; python3 -c "import json;s=json.load(open('/tmp/o_$3_$1/restore-report.json'))['summary'];print('$3','$1',s['seconds_wall'],round(2880/s['seconds_wall']),s.get('gpu_peak_mb'))"; }
run pro 32 m8; run pro 32 m12; run flash 8 m8; run flash 8 m12; run pro 32 m12; run pro 32 m8; run flash 8 m12; run flash 8 m8
