"""Audio in and out: probing and validating inputs, streaming reads and resampling, and outputs that
appear only when complete (written to a temporary file, then renamed into place)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr  # the resampler librosa uses; its streaming API keeps memory flat in file length

from .errors import InputError, UsageError

# ---- constants ----
MIN_SECONDS = 0.5             # shorter inputs carry too little speech to restore
MIN_RATE, MAX_RATE = 8000, 192000
SILENT_PEAK = 10 ** (-90 / 20)  # a file whose peak is below -90 dBFS holds no signal
BLOCK_SECONDS = 10.0          # unit of streaming reads
RESAMPLE_QUALITY = "HQ"
_READ_FORMATS = set(sf.available_formats())
# output extension -> (libsndfile format, subtype for a restored file)
WRITE_FORMATS = {
    ".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"),
    ".mp3": ("MP3", "MPEG_LAYER_III"), ".aiff": ("AIFF", "PCM_16"), ".aif": ("AIFF", "PCM_16"),
    ".au": ("AU", "PCM_16"), ".caf": ("CAF", "PCM_16"), ".w64": ("W64", "PCM_16"), ".rf64": ("RF64", "PCM_16"),
}
WRITE_FORMATS = {k: v for k, v in WRITE_FORMATS.items() if v[0] in _READ_FORMATS}
AUDIO_EXTENSIONS = set(WRITE_FORMATS) | {".oga", ".opus", ".wave", ".aifc", ".snd", ".sd2", ".voc", ".nist", ".sph"}
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: outputs get the usual permissions, not mkstemp's owner-only 0600
FILE_MODE = 0o666 & ~_UMASK


@dataclass(frozen=True)
class AudioInfo:
    path: Path
    sample_rate: int
    channels: int
    frames: int
    format: str
    subtype: str

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate


@dataclass(frozen=True)
class Levels:
    rms: float                 # over non-silent blocks, all channels
    peak: float
    channels_identical: bool   # every channel carries the same signal (to within -60 dB)


def probe(path: str | Path) -> AudioInfo:
    """Header of an input file, validated: exists, is audio, has a usable rate and length."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not an audio file")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: the file is empty (0 bytes)")
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot be read (permission denied)") from None
        raise InputError(f"{path}: not a readable audio file ({_short(e)})") from None
    frames = info.frames if info.frames and info.frames < 2**62 else _count_frames(path)
    if not MIN_RATE <= info.samplerate <= MAX_RATE:
        raise InputError(f"{path}: sample rate {info.samplerate} Hz is outside the supported "
                         f"{MIN_RATE}-{MAX_RATE} Hz")
    if frames == 0:
        raise InputError(f"{path}: the audio has zero length")
    if frames < MIN_SECONDS * info.samplerate:
        raise InputError(f"{path}: the audio is {frames / info.samplerate:.2f} s long; at least "
                         f"{MIN_SECONDS} s is needed")
    return AudioInfo(path, info.samplerate, info.channels, frames, info.format, info.subtype)


def _count_frames(path: Path) -> int:
    n = 0
    with sf.SoundFile(str(path)) as f:
        for block in f.blocks(blocksize=1 << 16, dtype="float32"):
            n += len(block)
    return n


def _short(e: Exception) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return msg.replace("Error opening ", "").rstrip(".")


def blocks(info: AudioInfo, seconds: float = BLOCK_SECONDS):
    """Yield (frames, channels) float32 blocks of the whole file, in order."""
    size = max(1, int(seconds * info.sample_rate))
    try:
        with sf.SoundFile(str(info.path)) as f:
            while True:
                block = f.read(size, dtype="float32", always_2d=True)
                if not len(block):
                    return
                yield block
    except sf.LibsndfileError as e:
        raise InputError(f"{info.path}: reading failed part-way ({_short(e)})") from None


def active_power(block: np.ndarray, sample_rate: int) -> tuple[float, int]:
    """Summed power and sample count of a block's 100 ms pieces that are not digital silence: the
    level of a recording leaves its silent stretches out."""
    size = max(1, sample_rate // 10)
    power, count = 0.0, 0
    for i in range(0, len(block), size):
        piece = block[i : i + size]
        p = float(np.square(piece, dtype=np.float64).sum())
        if p > 1e-10 * piece.size:
            power, count = power + p, count + piece.size
    return power, count


def scan(info: AudioInfo) -> Levels:
    """One streaming pass: reject non-finite and silent audio, measure the level the model is fed at,
    and whether the channels are copies of each other."""
    power, count, peak = 0.0, 0, 0.0
    diff_power = 0.0
    for block in blocks(info):
        if not np.isfinite(block).all():
            raise InputError(f"{info.path}: the audio contains NaN or infinite samples")
        peak = max(peak, float(np.abs(block).max()))
        if info.channels > 1:
            diff_power += float(np.square(block - block[:, :1]).sum())
        p, n = active_power(block, info.sample_rate)
        power, count = power + p, count + n
    if peak < SILENT_PEAK:
        raise InputError(f"{info.path}: the audio is silent (peak below -90 dBFS); there is no speech to restore")
    rms = float(np.sqrt(power / max(count, 1)))
    identical = info.channels == 1 or diff_power <= 1e-6 * power
    return Levels(rms=rms, peak=peak, channels_identical=identical)


class StreamResampler:
    """Stateful resampling of a (frames, channels) stream; identity when the rates match."""

    def __init__(self, rate_in: int, rate_out: int, channels: int):
        self.same = rate_in == rate_out
        if not self.same:
            self.stream = soxr.ResampleStream(rate_in, rate_out, channels, dtype="float32",
                                              quality=RESAMPLE_QUALITY)

    def __call__(self, block: np.ndarray, last: bool = False) -> np.ndarray:
        block = np.ascontiguousarray(block, dtype=np.float32)
        if self.same:
            return block
        return self.stream.resample_chunk(block, last=last)


def model_rate_stream(info: AudioInfo, rate: int):
    """Yield the whole input resampled to `rate`, as (frames, channels) float32 blocks."""
    rs = StreamResampler(info.sample_rate, rate, info.channels)
    for block in blocks(info):
        out = rs(block)
        if len(out):
            yield out
    tail = rs(np.zeros((0, info.channels), np.float32), last=True)
    if len(tail):
        yield tail


def check_output(input_path: Path | None, output: Path, overwrite: bool = True) -> tuple[str, str]:
    """Validate an output path before any work is done; returns (format, subtype)."""
    ext = output.suffix.lower()
    if ext not in WRITE_FORMATS:
        raise UsageError(f"{output}: cannot write '{ext or 'no extension'}' files; use one of "
                         f"{', '.join(sorted(WRITE_FORMATS))}")
    if input_path is not None and output.resolve() == Path(input_path).resolve():
        raise UsageError(f"{output}: the output path is the input file; choose another so the input is kept")
    if output.is_dir():
        raise UsageError(f"{output}: is a folder; give a file name for the output")
    if output.exists() and not overwrite:
        raise UsageError(f"{output}: already exists (use --overwrite to replace it)")
    parent = output.parent if str(output.parent) else Path(".")
    probe_dir = parent
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise UsageError(f"{output}: cannot create the output there, {probe_dir} is a file, not a folder")
    if not os.access(probe_dir, os.W_OK | os.X_OK):
        raise InputError(f"{output}: no permission to write in {probe_dir}")
    return WRITE_FORMATS[ext]


class AtomicWriter:
    """Writes audio to a hidden temporary file beside the output and renames it into place on
    `commit()`; if the work fails or is interrupted, the temporary file is removed and any existing
    output stays as it was. Samples beyond full scale are clipped and counted (`clipped`)."""

    def __init__(self, path: str | Path, sample_rate: int, channels: int, subtype: str | None = None):
        self.path = Path(path)
        ext = self.path.suffix.lower()
        if ext not in WRITE_FORMATS:
            raise UsageError(f"{self.path}: cannot write '{ext or 'no extension'}' files; use one of "
                             f"{', '.join(sorted(WRITE_FORMATS))}")
        fmt, default_subtype = WRITE_FORMATS[ext]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".part", dir=self.path.parent)
        except OSError as e:
            raise InputError(f"{self.path}: cannot write the output ({e.strerror or e})") from None
        os.close(fd)
        self.tmp = Path(tmp)
        try:
            self.file = sf.SoundFile(str(self.tmp), "w", samplerate=sample_rate, channels=channels,
                                     format=fmt, subtype=subtype or default_subtype)
        except Exception as e:
            self.tmp.unlink(missing_ok=True)
            reason = _short(e).replace(f"'{self.tmp}': ", "").replace(f"'{self.tmp}'", "").strip()  # no temp name
            raise InputError(f"{self.path}: cannot write {channels} channel(s) at {sample_rate} Hz as "
                             f"{fmt} ({reason})") from None
        self.rate, self.channels = sample_rate, channels
        self.clipped = 0

    def write(self, block: np.ndarray) -> None:
        over = np.abs(block) > 1.0
        if over.any():
            self.clipped += int(over.sum())
            block = np.clip(block, -1.0, 1.0)
        self.file.write(block)

    def commit(self) -> None:
        try:
            self.file.close()
            os.chmod(self.tmp, FILE_MODE)
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()  # a failed commit (disk full...) leaves no temporary file
            raise

    def abort(self) -> None:
        if not self.file.closed:
            self.file.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "AtomicWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def output_subtype(info: AudioInfo, ext: str) -> str | None:
    """Keep the input's bit depth when the output format can hold it (24-bit in, 24-bit out)."""
    fmt = WRITE_FORMATS[ext][0]
    if info.subtype in ("PCM_24", "PCM_32", "FLOAT", "DOUBLE") and sf.check_format(fmt, info.subtype):
        return info.subtype
    return None


def read(path: str | Path, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """Whole file as (frames, channels) float32, optionally resampled (for tests and tools)."""
    audio, sr = sf.read(str(path), dtype="float32", always_2d=True)
    if sample_rate and sr != sample_rate:
        audio = soxr.resample(audio, sr, sample_rate, quality=RESAMPLE_QUALITY).astype(np.float32)
        sr = sample_rate
    return audio, sr


def write(path: str | Path, audio: np.ndarray, sample_rate: int) -> None:
    """Whole array (frames[, channels]) to a file, atomically."""
    audio = audio[:, None] if audio.ndim == 1 else audio
    with AtomicWriter(path, sample_rate, audio.shape[1]) as w:
        w.write(audio)
