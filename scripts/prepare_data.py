"""Stage training data for the GPU machine, which has no audio decoders.

Reads ../shared/data (speech, noise, RIR manifests), applies the speaker split in
restore/training/split.json, resamples everything to the model rate and writes int16 .npy shards plus
JSON indexes, and a fixed degraded validation set from the dev speakers with dev noises:

    python scripts/prepare_data.py ../shared/data .stage/data [--pseudo FILE] [--extra .stage/tts]

--val-speech train and --val-noise train draw the validation windows from the training speakers'
speech or the training noises and rooms instead (the same count, seed and draws of degradation), so
that scripts/validate_model.py can tell how much of a model's validation error is unseen speech and
how much unseen noise. Such a folder is for measuring, not for training.

Pseudo-transcripts default to restore/training/pseudo_transcripts.json (pocketsphinx on the clean
LibriSpeech clips; 30 CPU-minutes to remake with scripts/pseudo_transcripts.py). --extra adds a folder
of synthesised, text-labelled speech (scripts/synth_speech.py) to the training clips.

Shards are at most --shard-mb MiB so that each fits in one transfer to the GPU machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import librosa
import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs from a checkout, installed or not

from restore.training.data import to_int16, write_shards  # noqa: E402
from restore.training.degrade import DegradeConfig, Degrader  # noqa: E402

SR = 16000
SPLIT = Path(__file__).resolve().parent.parent / "restore" / "training" / "split.json"


def load(path: Path) -> np.ndarray:
    audio, sr = sf.read(path, dtype="float32", always_2d=True)
    audio = audio[:, 0]  # the data set is mono (noise downmixed, RIRs channel 0)
    return librosa.resample(audio, orig_sr=sr, target_sr=SR) if sr != SR else audio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--pseudo", type=Path, default=Path(__file__).resolve().parent.parent / "restore" / "training"
                    / "pseudo_transcripts.json", help="JSON of pseudo-transcripts (scripts/pseudo_transcripts.py)")
    ap.add_argument("--shard-mb", type=float, default=40.0)
    ap.add_argument("--val-windows", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--extra", type=Path, action="append", default=[],
                    help="a folder of synthesised speech (scripts/synth_speech.py): training only")
    ap.add_argument("--val-speech", choices=("dev", "train"), default="dev",
                    help="whose recorded speech the validation windows hold (default: the dev speakers')")
    ap.add_argument("--val-noise", choices=("dev", "train"), default="dev",
                    help="which noises and rooms degrade them (default: the held-out ones)")
    args = ap.parse_args()
    split = json.loads(SPLIT.read_text())
    dev = set(split["dev_speakers"])
    args.out.mkdir(parents=True, exist_ok=True)
    pseudo = json.loads(args.pseudo.read_text()) if args.pseudo and args.pseudo.exists() else {}
    shard_bytes = int(args.shard_mb * 1024 * 1024)

    train, val_speech = [], []
    for r in csv.DictReader(open(args.data / "speech" / "manifest.csv")):
        audio = load(args.data / r["path"])
        text, kind = r["transcript"], "human"
        if not text and r["path"] in pseudo:
            text, kind = pseudo[r["path"]], "asr"
        meta = {"path": r["path"], "speaker": r["speaker"], "text": text or "", "text_kind": kind if text else ""}
        (val_speech if r["speaker"] in dev else train).append((audio, meta))
    real = len(train)
    for extra in args.extra:
        for r in csv.DictReader(open(extra / "speech" / "manifest.csv")):
            train.append((load(extra / r["path"]), {"path": f"{extra.name}/{r['path']}", "speaker": r["speaker"],
                                                    "text": r["transcript"], "text_kind": "tts"}))
    write_shards(args.out, "speech", train, shard_bytes)
    print(f"speech: {len(train)} training clips ({len(train) - real} synthesised), "
          f"{sum(len(a) for a, _ in train) / SR / 60:.1f} min; {len(val_speech)} dev clips held out")

    noises, dev_noises = [], []
    for r in csv.DictReader(open(args.data / "noise" / "manifest.csv")):
        item = (load(args.data / r["path"]), {"path": r["path"], "license": r["license"]})
        (dev_noises if r["path"] in split["dev_noises"] else noises).append(item)
    write_shards(args.out, "noise", noises, shard_bytes)
    rirs, dev_rirs = [], []
    for r in csv.DictReader(open(args.data / "rir" / "manifest.csv")):
        item = (load(args.data / r["path"]), {"path": r["path"], "license": r["license"]})
        (dev_rirs if r["path"] in split["dev_rirs"] else rirs).append(item)
    write_shards(args.out, "rir", rirs, shard_bytes)
    print(f"noise: {len(noises)} training recordings ({len(dev_noises)} held out); rir: {len(rirs)} "
          f"({len(dev_rirs)} held out)")

    # Validation: 30 s windows of dev speech, degraded with dev noises/RIRs only (unless --val-speech /
    # --val-noise say train), fixed seed.
    window = 30 * SR
    speech = np.concatenate([a for a, _ in (val_speech if args.val_speech == "dev" else train[:real])])
    n = min(args.val_windows, len(speech) // window)
    clean = torch.from_numpy(speech[: n * window].reshape(n, window).copy())
    noise_set, rir_set = (dev_noises, dev_rirs) if args.val_noise == "dev" else (noises, rirs)
    degrader = Degrader(DegradeConfig(p_gain=0.0), [torch.from_numpy(a) for a, _ in noise_set],  # as in training
                        [torch.from_numpy(a) for a, _ in rir_set])
    degraded, records = degrader(clean, torch.Generator().manual_seed(args.seed))
    gain = 0.05 / degraded.square().mean(-1, keepdim=True).sqrt().clamp_min(1e-5)
    np.savez(args.out / "val.npz", clean=to_int16((clean * gain).numpy()), degraded=to_int16((degraded * gain).numpy()))
    (args.out / "val.json").write_text(json.dumps(records, indent=0))
    kinds = [[e["kind"] for e in r] for r in records]
    print(f"validation: {n} windows of 30 s of {args.val_speech} speech, {args.val_noise} noises; degradations: {kinds}")


if __name__ == "__main__":
    main()
