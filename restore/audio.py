"""Audio in and out: probing and validating inputs, streaming reads and resampling, and outputs that
appear only when complete (written to a temporary file, then renamed into place).

Temporary files are hidden and named `.NAME.PID.XXXXXXXX.part` (`.float.part` for a levelled output's
float copy) beside the output NAME, PID being the writing process: a run removes those whose writer no
longer runs (`remove_stale_temps`), which is all a killed run leaves behind."""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr  # the resampler librosa uses; its streaming API keeps memory flat in file length

from .bandwidth import LongTermSpectrum
from .errors import DiskFullError, InputError, UsageError, option

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
UNCOMPRESSED = {".wav", ".aiff", ".aif", ".au", ".caf", ".w64", ".rf64"}  # their size is known before writing
# audio and video files libsndfile does not read (MP3 where it is too old): named in folder reports
NOT_READ = {".m4a": "AAC or ALAC", ".aac": "AAC", ".mp4": "MP4", ".m4b": "AAC", ".3gp": "AMR or AAC",
            ".amr": "AMR", ".wma": "WMA", ".ape": "Monkey's Audio", ".wv": "WavPack", ".mka": "Matroska",
            ".webm": "WebM", ".mov": "QuickTime", ".ac3": "AC-3", ".mp3": "MP3"}
NOT_READ = {k: v for k, v in NOT_READ.items() if k not in AUDIO_EXTENSIONS}
_COMMON = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".aiff", ".au", ".caf", ".w64", ".rf64")
READ_NAMES = ", ".join(e[1:] for e in _COMMON if e in AUDIO_EXTENSIONS)
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
    header_frames: int | None = None  # more frames than the file holds, where its header says so (cut short)

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate

    def truncation(self) -> str | None:
        """A warning when the file holds less audio than its header says (a copy or recording cut short)."""
        if self.header_frames is None:
            return None
        return (f"the file is cut short: its header says {self.header_frames / self.sample_rate:.1f} s, it holds "
                f"{self.duration:.1f} s; that much was restored")


@dataclass(frozen=True)
class Levels:
    rms: float                 # over non-silent blocks, all channels
    peak: float
    channels_identical: bool   # every channel carries the same signal (to within -60 dB)
    cutoff_hz: float | None = None  # the highest frequency it carries: its band's cut-off (restore.bandwidth),
                                    # else half its rate; None: not measured


def as_path(value, name: str) -> Path:
    """A path argument of the API, refused with one sentence unless it is a str or os.PathLike."""
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise UsageError(f"{option(name)} must be a file or folder path (str or pathlib.Path), got {value!r}")
    return Path(value)


def not_read(path: Path, why: str = "") -> str:
    """Why `path` is not restored, and what to do: one sentence naming the formats that are read."""
    ext = path.suffix.lower()
    what = (f"{ext} files ({NOT_READ[ext]}) are not read" if ext in NOT_READ
            else f"not a readable audio file ({why})")
    return (f"{path}: {what}; restore reads {READ_NAMES} and what else libsndfile reads; convert it first, "
            f"e.g. {convert_hint(path)}")


def convert_hint(path: Path) -> str:
    return f"ffmpeg -i {shlex.quote(path.name)} {shlex.quote(path.stem + '.flac')}"


def probe(path: str | Path) -> AudioInfo:
    """Header of an input file, validated: exists, is audio, has a usable rate and length."""
    path = as_path(path, "input")
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
        raise InputError(not_read(path, short_reason(e))) from None
    frames = info.frames if info.frames and info.frames < 2**62 else _count_frames(path)
    if not MIN_RATE <= info.samplerate <= MAX_RATE:
        raise InputError(f"{path}: sample rate {info.samplerate} Hz is outside the supported "
                         f"{MIN_RATE}-{MAX_RATE} Hz")
    if frames == 0:
        raise InputError(f"{path}: the audio has zero length")
    if frames < MIN_SECONDS * info.samplerate:
        raise InputError(f"{path}: the audio is {frames / info.samplerate:.2f} s long; at least "
                         f"{MIN_SECONDS} s is needed")
    return AudioInfo(path, info.samplerate, info.channels, frames, info.format, info.subtype,
                     _header_frames(info.extra_info, frames))


def _header_frames(log: str, frames: int) -> int | None:
    """The length a header promises where libsndfile found less data (it reads what is there, silently;
    its log says `data : 96000 (should be 47978)`, or that a frame count does not match)."""
    for declared, found in re.findall(r"^\s*(?:data|SSND|Data Size)\s*:\s*(\d+) \(should be (\d+)\)", log, re.M):
        if int(declared) > int(found) > 0:
            return round(frames * int(declared) / int(found))
    m = re.search(r"frame count (\d+) does not match value from '\w+' chunk of (\d+)", log)
    if m and int(m.group(2)) > int(m.group(1)):
        return int(m.group(2))
    return None


def _count_frames(path: Path) -> int:
    n = 0
    with sf.SoundFile(str(path)) as f:
        for block in f.blocks(blocksize=1 << 16, dtype="float32"):
            n += len(block)
    return n


def short_reason(e: Exception) -> str:
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
        raise InputError(f"{info.path}: reading failed part-way ({short_reason(e)})") from None


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
    whether the channels are copies of each other, and the band the mono mix carries."""
    power, count, peak = 0.0, 0, 0.0
    diff_power = 0.0
    band = LongTermSpectrum(info.sample_rate)
    for block in blocks(info):
        if not np.isfinite(block).all():
            raise InputError(f"{info.path}: the audio contains NaN or infinite samples")
        peak = max(peak, float(np.abs(block).max()))
        if info.channels > 1:
            diff_power += float(np.square(block - block[:, :1]).sum())
        p, n = active_power(block, info.sample_rate)
        power, count = power + p, count + n
        band.push(block.mean(axis=1))
    if peak < SILENT_PEAK:
        raise InputError(f"{info.path}: the audio is silent (peak below -90 dBFS); there is no speech to restore")
    rms = float(np.sqrt(power / max(count, 1)))
    identical = info.channels == 1 or diff_power <= 1e-6 * power
    cutoff = band.cutoff()
    return Levels(rms=rms, peak=peak, channels_identical=identical,
                  cutoff_hz=cutoff if cutoff is not None else info.sample_rate / 2)


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
        raise UsageError(f"{output}: already exists (use {option('overwrite', True)} to replace it)")
    parent = output.parent if str(output.parent) else Path(".")
    probe_dir = parent
    while not probe_dir.exists():
        probe_dir = probe_dir.parent
    if not probe_dir.is_dir():
        raise UsageError(f"{output}: cannot create the output there, {probe_dir} is a file, not a folder")
    if not os.access(probe_dir, os.W_OK | os.X_OK):
        raise InputError(f"{output}: no permission to write in {probe_dir}")
    return WRITE_FORMATS[ext]


# ---- temporary files and disk space ----
_TEMP = re.compile(r"^\..+?(?:\.(?P<pid>\d+))?\.[a-z0-9_]{8}(?:\.float)?\.part$")
MB = 1 << 20
SPACE_MARGIN = MB  # what a file needs besides its audio: headers, the report, the filesystem's own blocks


def temp_file(path: Path, suffix: str = ".part") -> Path:
    """A new hidden temporary file beside `path`, named for it and for this process."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    return Path(tmp)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # a run cleans before it writes: a file with its own PID is an earlier process's
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True   # another user's process
    return True


def remove_stale_temps(folder: Path, name: str | None = None) -> int:
    """Remove the temporary files of outputs under `folder` (of output `name` alone, in `folder` alone,
    where given) whose writing process no longer runs (killed: SIGKILL, a power cut); returns how many.
    Files of a run that is still writing are kept; so is anything not named as this module names them."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    if name is not None:
        places = [(folder, [p.name for p in folder.iterdir() if p.name.startswith(f".{name}.")])]
    else:
        places = [(Path(root), files) for root, _, files in os.walk(folder)]
    removed = 0
    for where, files in places:
        for f in files:
            m = _TEMP.match(f)
            if m and not (m.group("pid") and _running(int(m.group("pid")))):
                try:
                    (where / f).unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
    return removed


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def free_bytes(folder: Path) -> int:
    return shutil.disk_usage(_existing(Path(folder))).free


def pcm_bytes(frames: int, channels: int, subtype: str | None) -> int:
    """Size of uncompressed audio (headers aside): exact for PCM outputs, a bound for compressed ones."""
    width = {"PCM_U8": 1, "PCM_S8": 1, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8}.get(subtype or "", 2)
    return frames * channels * width


def disk_full(path: Path, needed: int, error: BaseException | None = None, held: int = 0,
              bound: bool = False) -> DiskFullError | None:
    """The error to give when `path`'s disk cannot take the `needed` bytes of an output (at most that
    many where `bound`): before it starts (no `error`), or after `error` (by its errno, or, since
    libsndfile reports a full disk as a bare "System error", by the free space, counting the `held` bytes
    of this output's own temporary files as free); None when space is not the problem."""
    free = free_bytes(path.parent) + held
    code = getattr(error, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or free < needed:
        return DiskFullError(f"{path}: no space left on device ({'up to ' if bound else ''}{_mb(needed)} MB "
                             f"needed, {_mb(free)} MB free)")
    return None


def _mb(n: int) -> str:
    return f"{n / MB:.0f}" if n >= 10 * MB else f"{n / MB:.1f}"


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
            self.tmp = temp_file(self.path)
        except OSError as e:
            raise (disk_full(self.path, 0, e) or
                   InputError(f"{self.path}: cannot write the output ({e.strerror or e})")) from None
        try:
            self.file = sf.SoundFile(str(self.tmp), "w", samplerate=sample_rate, channels=channels,
                                     format=fmt, subtype=subtype or default_subtype)
        except Exception as e:
            self.tmp.unlink(missing_ok=True)
            reason = short_reason(e).replace(f"'{self.tmp}': ", "").replace(f"'{self.tmp}'", "").strip()  # no temp name
            raise InputError(f"{self.path}: cannot write {channels} channel(s) at {sample_rate} Hz as "
                             f"{fmt} ({reason})") from None
        self.rate, self.channels = sample_rate, channels
        self.clipped = 0

    def size(self) -> int:
        """Bytes in the temporary file so far."""
        try:
            return self.tmp.stat().st_size
        except FileNotFoundError:
            return 0

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
