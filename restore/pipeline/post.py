"""Post-processing: what happens to the sampler's result before it becomes the output file.

1. **Strength** (`blend_strength`). The sampler always runs at full strength; strength s then keeps
   lin + s (x - lin) of its result x, where lin is the observation skip's clean estimate at the first
   step with the network's part left out (`linear_estimate`). At one step that is exactly what a network
   whose output is scaled by s gives; at more steps it keeps the sampler sound, where scaling every
   step's correction would leave part of each step's noise in. The linear estimate is a strong shrinkage
   of the input (gains of ~0.1-0.4 on the latents), so the blend takes the audio energy of the
   full-strength result in each frequency bin, file by file (over each file's own frames where short
   files share a window).

2. **Keeping the input** (`keep_input`). A one-step restoration is a conditional mean: even where the
   input was already clean it redraws the speech a little. Where the input is reliable, the input is
   the better estimate. Per time-frequency bin of the codec's spectrum, with S the restoration
   (levelled to the input by least squares, per window, or per file where files share one) and
   R = Y - S what it took out of the input Y:

       out = S + b R,   b = |S|^2 / (|S|^2 + 10^(keep_db / 10) |R|^2)

   (both powers averaged over 3 x 3 neighbouring bins). Where what was removed lies more than `keep_db`
   below the restoration, b -> 1 and the input comes back, its own fine structure and phase included;
   where the restoration removed or added much (noise, reverberation tails, a missing band), b -> 0 and
   the restoration stays. Higher keep_db keeps less of the input.

3. **The input's spectral balance** (`match_balance`, on unless a model's config sets `balance`
   false). A one-step estimate's long-term spectrum is a little off the speech's: on a clean recording
   it lifts 1.2-3 kHz by up to 2.5 dB. Where the input lies BALANCE_DB above the noise the restoration
   removed (per bin, over the file) the input's level is the speech's, so per sixth of an octave, file
   by file, the restoration is scaled to the input's energy over those bins (at most BALANCE_MAX_DB);
   bands with no trusted bins (noise, a missing band) stay as restored.

4. **A band-limited input's missing band** (`extend_band`). Where the input holds nothing but a floor
   above a cut-off below the model's band edge (restore/bandwidth.py, measured per file), the model's
   fill of the missing band is its guess. By default (`extend_band` true) it is kept: on the realistic
   band-limit + noise clips it keeps more words and PESQ than the band alone (docs/eval/fullband.md).
   With `extend_band` false nothing is added above the cut-off (`limit_band`: the restoration faded out
   over RAMP_HZ below it).

5. **The first step mixed back** (`mix`, the sampler's `mix_first`). A sampler of more than one step
   keeps its first step's estimate (the one-step restoration) beside its last; each is post-processed
   as above and the output's complex spectrum is their weighted mean. The steps take out noise the
   one step leaves (most in reverberant pauses) and add fine structure and noise of their own, drawn
   afresh; the one step keeps the voice. The mean keeps what both take out and halves what either
   adds alone (docs/training.md). It is linear in the spectrum, so it is the mean of the two decoded
   restorations; the output level (6) follows it.

6. **The output level** (`LevelledOutput`, the one place that sets it). The model hears every window
   at the level it was trained at and its output is scaled back by the same factor
   (restore/pipeline/job.py); that is the audio "as the model restores it" (`--level model`). A one-step
   estimate is quiet where it is unsure (reverberant speech comes out ~12 dB below the dry speech), so by
   default (`--level input`) the finished file is scaled to the input's RMS over its non-silent audio,
   lowered only as far as keeps its peaks below PEAK_CEILING.
"""

from __future__ import annotations

import functools

import numpy as np
import soundfile as sf
import torch
import torch.nn.functional as F

from ..audio import AtomicWriter, active_power, disk_full, temp_file
from ..config import PostConfig, SamplerConfig
from ..errors import InputError
from ..sampling import combine

PEAK_CEILING = 10 ** (-0.1 / 20)  # a levelled output's peaks stay below -0.1 dBFS
MEMORY_BYTES = 16 << 20  # a levelled output is held in memory up to this size (~45 s of 48 kHz stereo)
_TINY = 1e-20
SMOOTH = 3  # bins (frames and frequencies) the powers of `keep_input` and `match_balance` are averaged over
BALANCE_DB = 10.0     # `match_balance` trusts the input where it lies this far above the noise the restoration
                      # removed, unless what was taken out there lies this far above what was kept
BALANCE_NOISE = 0.3   # that noise: this quantile of the removed power, per bin, over a file's live frames
BALANCE_OCTAVES = 1 / 6  # each bin's correction is measured over this much of an octave around it
BALANCE_MAX_DB = 3.0  # the most it moves a band
BALANCE_COVER = 0.2   # the share of a band's live frames trusted for the full correction
LIVE_DB = 60.0        # a file's live frames: its input within this of its loudest (not the window's padding)
RAMP_HZ = 300.0       # `limit_band` fades the restoration out over this much below a band-limited input's cut-off


# ---------------------------------------------------------------- on latents
def linear_estimate(skip, noise: torch.Tensor, sampler: SamplerConfig) -> torch.Tensor:
    """The observation skip's clean estimate (B, T, D) from the sampler's starting noise (B, T, D) at its
    first step, with the network's part left out (raw output zero), guided as that step is."""
    plan = sampler.schedule()
    t, guided = plan.times[0], plan.guided[0]
    zero = torch.zeros_like(noise)
    v = skip((zero,) * (3 if guided else 1), noise, t)
    return noise - t * (combine(*v, sampler.w_so, sampler.w_t) if guided else v[0])


Spans = list[list[tuple[int, int]]]  # per row of latents, the frame runs (start, stop) of each file in it


def _span_ids(spans: Spans | None, like: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(B, T) on `like`'s device: each frame's span index in its row, `slots` (the most spans a row has)
    for frames in no span; None: one span per row, the whole row."""
    rows, frames = like.shape[:2]
    spans = spans if spans is not None else [[(0, frames)]] * rows
    slots = max(len(row) for row in spans)
    ids = torch.full((rows, frames), slots, dtype=torch.long)
    for r, row in enumerate(spans):
        for k, (a, b) in enumerate(row):
            ids[r, a:b] = k
    return ids.to(like.device), slots


def _span_sums(x: torch.Tensor, ids: torch.Tensor, slots: int) -> torch.Tensor:
    """x (B, T, F) -> (B, slots + 1, F): its sum over each span's frames (the last: frames in none)."""
    out = torch.zeros(x.shape[0], slots + 1, x.shape[-1], device=x.device, dtype=x.dtype)
    return out.scatter_add_(1, ids[..., None].expand_as(x), x)


def _per_frame(values: torch.Tensor, ids: torch.Tensor, slots: int) -> torch.Tensor:
    """values (B, slots + 1, F), one row per span -> (B, T, F), each frame its span's; 1 in no span."""
    values = values.clone()
    values[:, slots] = 1.0
    return values.gather(1, ids[..., None].expand(*ids.shape, values.shape[-1]))


def _level(y: torch.Tensor, s: torch.Tensor, ps: torch.Tensor, ids: torch.Tensor, slots: int) -> torch.Tensor:
    """(B, T, 1): the least-squares gain that levels the restoration s to the input y, span by span
    (clamped to 0.1-10); 1 in no span. ps: |s|^2."""
    cross, power = _span_sums((y * s.conj()).real, ids, slots), _span_sums(ps, ids, slots)
    gain = (cross.sum(-1, keepdim=True) / power.sum(-1, keepdim=True).clamp_min(_TINY)).clamp(0.1, 10.0)
    return _per_frame(gain, ids, slots)


def blend_strength(codec, x: torch.Tensor, lin: torch.Tensor, strength: float, spans: Spans | None = None
                   ) -> torch.Tensor:
    """The full-strength result x and the linear estimate lin (B, T, D) -> lin + strength (x - lin), with
    the spectral balance of x: each frequency bin scaled to x's energy in it over the file's frames
    (span by span). The linear estimate's shrinkage is not flat across frequency, so a single gain
    would tilt the blend (1-3.5 dB up at 1.2-5 kHz on a clean recording); per bin, strength trades what
    the network changed within each band, not the balance between bands."""
    y, ref = codec.spectrum(lin + strength * (x - lin)), codec.spectrum(x)
    py = _power(y)
    ids, slots = _span_ids(spans, py)
    gain = (_span_sums(_power(ref), ids, slots) / _span_sums(py, ids, slots).clamp_min(_TINY)).sqrt().clamp(0.1, 10.0)
    return codec.latents(y * _per_frame(gain, ids, slots)).to(x.dtype)


def _power(z: torch.Tensor) -> torch.Tensor:
    """|z|^2 without the square root."""
    return z.real.square() + z.imag.square()


def keep_input(codec, obs: torch.Tensor, est: torch.Tensor, keep_db: float, spans: Spans | None = None
               ) -> torch.Tensor:
    """obs, est: latents (B, T, D) of the input and the restoration -> latents of the blend. The
    restoration's level is matched to the input's span by span, and its powers are smoothed within each
    span (a file's frames come out as they would alone, which the balance after it relies on)."""
    y, s = codec.spectrum(obs), codec.spectrum(est)
    s2 = _power(s)
    ids, slots = _span_ids(spans, s2)
    g = _level(y, s, s2, ids, slots)
    s = s * g
    r = y - s
    num = _span_local(s2 * g.square(), ids)
    b = num / (num + 10.0 ** (keep_db / 10.0) * _span_local(_power(r), ids)).clamp_min(_TINY)
    return codec.latents((s + b * r) / g).to(est.dtype)


@functools.lru_cache(maxsize=8)
def _band_weights(bins: int, rate: int, octaves: float = BALANCE_OCTAVES) -> torch.Tensor:
    """(F, F): row f averages the bins within `octaves` of an octave around bin f (at least its two
    neighbours). Narrower than the third-octave bands a spectrum's balance is heard and measured in, so
    that a correction measured around one band does not spill into its neighbours: a third-octave band
    whose neighbours err the other way (4 kHz between 3.15 and 5 kHz) is matched too."""
    freqs = torch.linspace(0, rate / 2, bins)
    lo, hi = freqs * 2 ** (-octaves / 2), freqs * 2 ** (octaves / 2)
    near = (freqs[None, :] >= lo[:, None] - freqs[1]) & (freqs[None, :] <= hi[:, None] + freqs[1])
    return near.float() / near.sum(1, keepdim=True)


def _span_local(p: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """p (B, T, F) averaged over SMOOTH x SMOOTH neighbouring bins, with no frame of another span among a
    frame's neighbours: each file's frames as they would be alone."""
    same = (ids[:, 1:] == ids[:, :-1]).to(p.dtype)  # (B, T - 1): frame t and t + 1 in one span
    before = F.pad(p[:, :-1] * same[..., None], (0, 0, 1, 0))
    after = F.pad(p[:, 1:] * same[..., None], (0, 0, 0, 1))
    t = (p + before + after) / (1 + F.pad(same, (1, 0)) + F.pad(same, (0, 1)))[..., None]
    b, frames, bins = t.shape
    return F.avg_pool1d(t.reshape(b * frames, 1, bins), SMOOTH, 1, SMOOTH // 2,
                        count_include_pad=False).reshape(b, frames, bins)


def _live(py: torch.Tensor, ids: torch.Tensor, slots: int) -> torch.Tensor:
    """(B, T, 1): 1 for the frames whose input power lies within LIVE_DB of the loudest frame of their span,
    0 for the rest (the window's padding, the silence between files, digital silence)."""
    e = py.sum(-1)
    top = torch.zeros(e.shape[0], slots + 1, device=e.device, dtype=e.dtype).scatter_reduce(1, ids, e, "amax")
    return (e > 10.0 ** (-LIVE_DB / 10.0) * top.gather(1, ids)).to(py.dtype)[..., None]


def _span_quantile(p: torch.Tensor, live: torch.Tensor, ids: torch.Tensor, slots: int, q: float) -> torch.Tensor:
    """p (B, T, F) -> (B, slots + 1, F): per span and bin, the q-quantile of p over the span's live frames
    (0 where it has none). One sort for all spans: frames keyed by span, then by log power."""
    frames, bins = p.shape[1:]
    group = torch.where(live[..., 0] > 0, ids, torch.full_like(ids, slots + 1))  # dead frames go last
    key = group[..., None].to(p.dtype) * 100.0 + torch.log10(p + _TINY).clamp(-45.0, 45.0)
    ordered = p.gather(1, key.argsort(dim=1))
    counts = _span_sums(live, ids, slots)[..., 0]  # (B, slots + 1): each span's live frames
    pos = (torch.cumsum(counts, 1) - counts + (q * (counts - 1).clamp_min(0)).floor()).long().clamp(max=frames - 1)
    out = ordered.gather(1, pos[..., None].expand(-1, -1, bins))
    return torch.where(counts[..., None] > 0, out, torch.zeros_like(out))


def match_balance(codec, obs: torch.Tensor, est: torch.Tensor, spans: Spans | None = None) -> torch.Tensor:
    """obs, est: latents (B, T, D) of the input and the restoration -> the restoration with the input's
    spectral balance where the input can be trusted. A one-step estimate is a conditional mean, and its
    long-term spectrum is a little off the speech's (1-2.5 dB at 1.2-3 kHz on a clean recording). Where
    the input is speech, its level is the speech's: a bin is trusted where the input lies BALANCE_DB above
    the noise the restoration removed there (the BALANCE_NOISE quantile of the removed power in that bin
    over the file's live frames: the restoration levelled to the input), unless what was taken out lies
    BALANCE_DB above what was kept (a burst of noise the floor does not hold). It is the input's level
    that is judged, not its agreement with the restoration sample by sample, which the network does not
    keep where it redraws the speech (at 4-5 kHz on a clean recording: what it takes out there lies only
    ~4 dB below what it keeps, at the input's level). Per `BALANCE_OCTAVES` around each bin, file by file
    (span by span), the restoration is scaled to the input's energy over the trusted bins, at most
    BALANCE_MAX_DB either way, and only as far as they cover the band (BALANCE_COVER of the file's live
    frames for the full correction). Where nothing can be trusted (noise, a missing band) the restoration
    is left as it is. The overall level is set later (LevelledOutput). All spans at once: no loop over
    files on the device."""
    y, s = codec.spectrum(obs), codec.spectrum(est)
    py, ps = _power(y), _power(s)
    ids, slots = _span_ids(spans, py)
    g = _level(y, s, ps, ids, slots)
    ps, pr = ps * g.square(), _power(y - s * g)
    live = _live(py, ids, slots)
    local_y, local_s, local_r = (_span_local(p, ids) for p in (py, ps, pr))
    noise = _per_frame(_span_quantile(local_r, live, ids, slots, BALANCE_NOISE), ids, slots)
    over = 10.0 ** (BALANCE_DB / 10.0)
    trusted = ((local_y > over * noise) & (local_r < over * local_s)).to(ps.dtype) * live
    weights = _band_weights(py.shape[-1], codec.config.sample_rate).to(py.device).T
    num, den = _span_sums(trusted * py, ids, slots) @ weights, _span_sums(trusted * ps, ids, slots) @ weights
    cover = _span_sums(trusted, ids, slots) @ weights / _span_sums(live, ids, slots).clamp_min(1.0)
    db = (10 * torch.log10(num.clamp_min(_TINY) / den.clamp_min(_TINY))).clamp(-BALANCE_MAX_DB, BALANCE_MAX_DB)
    db = torch.where(den > 0, db * (cover / BALANCE_COVER).clamp(max=1.0), torch.zeros_like(db))
    return codec.latents(s * _per_frame(10.0 ** (db / 20.0), ids, slots)).to(est.dtype)


def band_gain(freqs: torch.Tensor, cutoff_hz: float) -> torch.Tensor:
    """Gain per frequency that fades a restoration out below a cut-off: 1 up to RAMP_HZ below it, a
    raised cosine down to 0 at it, 0 above."""
    u = ((cutoff_hz - freqs) / RAMP_HZ).clamp(0.0, 1.0)
    return 0.5 - 0.5 * torch.cos(torch.pi * u)


def limit_band(codec, est: torch.Tensor, cutoffs: list[list[float | None]], spans: Spans | None = None
               ) -> torch.Tensor:
    """est: latents (B, T, D) of the restoration -> the same with nothing above each file's cut-off.
    `cutoffs`: per row, one per span (file) in order, the frequency above which its input holds nothing
    but a floor (restore.bandwidth.limit), or None (full band: left as it is). A band-limited input
    (a phone line, a low-pass) carries nothing above its cut-off that a restoration could restore: what
    the model puts there is its guess at the missing band, which `extend_band` false declines. The fade
    (`band_gain`) is smooth over RAMP_HZ, where the input itself falls to its floor, so the output rings
    no more than the input's own low-pass does."""
    s = codec.spectrum(est)
    ids, slots = _span_ids(spans, s.real)
    freqs = torch.linspace(0, codec.config.sample_rate / 2, s.shape[-1])
    gains = torch.ones(s.shape[0], slots + 1, s.shape[-1])
    for r, row in enumerate(cutoffs):
        for k, cut in enumerate(row):
            if cut is not None:
                gains[r, k] = band_gain(freqs, cut)
    return codec.latents(s * _per_frame(gains.to(s.device), ids, slots)).to(est.dtype)


def finish(codec, post: PostConfig, obs: torch.Tensor, x: torch.Tensor, lin: torch.Tensor | None,
           spans: Spans | None = None, cutoffs: list[list[float | None]] | None = None) -> torch.Tensor:
    """The sampler's full-strength result x (B, T, D) -> the latents to decode: strength, keeping the
    input, the input's spectral balance, then nothing above a band-limited input's cut-off where
    `post.extend_band` is false. `lin` (linear_estimate) is needed when the strength is not 1. `spans`: the
    frames of each file in each row, where files share a window (None: one file a row); `cutoffs`: each
    span's cut-off (`limit_band`; None: every file full band)."""
    if post.strength != 1.0:
        if lin is None:
            raise ValueError("a strength other than 1 needs the linear estimate of a model with the observation skip")
        x = blend_strength(codec, x, lin, post.strength, spans)
    if post.keep_db is not None:
        x = keep_input(codec, obs, x, post.keep_db, spans)
    if post.balance:
        x = match_balance(codec, obs, x, spans)
    if not post.extend_band and cutoffs is not None and any(c is not None for row in cutoffs for c in row):
        x = limit_band(codec, x, cutoffs, spans)
    return x


def mix(codec, first: torch.Tensor, last: torch.Tensor, share: float, spans: Spans | None = None) -> torch.Tensor:
    """Two post-processed restorations of the same windows (B, T, D) -> the latents whose spectrum is
    share * first's + (1 - share) * last's, the last first given the first's energy and the mean then
    given it too, file by file (span by span): the two are mixed as heard at one level, and the mix is
    as loud as the first step's restoration."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"mix_first must be between 0 and 1, got {share}")
    a, b = codec.spectrum(first), codec.spectrum(last)
    pa = _power(a)
    ids, slots = _span_ids(spans, pa)
    energy = lambda p: _span_sums(p, ids, slots).sum(-1, keepdim=True)  # noqa: E731  (B, slots + 1, 1)
    to_first = lambda z: z * _per_frame((energy(pa) / energy(_power(z)).clamp_min(_TINY)).sqrt(), ids, slots)  # noqa: E731
    return codec.latents(to_first(share * a + (1.0 - share) * to_first(b))).to(last.dtype)


# ---------------------------------------------------------------- on the output file
class LevelledOutput:
    """Where a file's restored audio goes. Without a target level it streams straight into `writer`;
    with one (an RMS over the non-silent audio, as `audio.scan` measures the input) it is held until
    `commit()` writes it out scaled to the target, or lower where the peaks would pass PEAK_CEILING
    (`limited`); `gain_db` says by how much. Up to MEMORY_BYTES it is held in memory (a short file costs
    no temporary file), beyond that in a float file beside the output, so memory stays flat in the
    length of the file."""

    def __init__(self, writer: AtomicWriter, target_rms: float | None = None):
        self.writer, self.target = writer, target_rms
        self.gain_db: float | None = None
        self.limited = False
        self.spool = self.spool_path = None
        self.memory: list[np.ndarray] = []
        self.memory_bytes = 0
        if target_rms is None:
            return
        self.power, self.count, self.peak = 0.0, 0, 0.0
        self.rest = np.zeros((0, writer.channels), np.float32)  # samples not yet in a whole 100 ms piece

    def write(self, block: np.ndarray) -> None:
        """block (frames, channels) float32 at the level the model restored it."""
        if self.target is None:
            self.writer.write(block)
            return
        self._measure(block)
        if len(block):
            self.peak = max(self.peak, float(np.abs(block).max()))
        if self.spool is None and self.memory_bytes + block.nbytes <= MEMORY_BYTES:
            self.memory.append(np.array(block, np.float32))
            self.memory_bytes += block.nbytes
            return
        if self.spool is None:
            self._open_spool()
        self.spool.write(block)

    def _open_spool(self) -> None:
        """Move what is held in memory to a float file beside the output, which takes the rest."""
        try:
            self.spool_path = temp_file(self.writer.path, ".float.part")
            self.spool = sf.SoundFile(str(self.spool_path), "w", samplerate=self.writer.rate,
                                      channels=self.writer.channels, format="RF64", subtype="FLOAT")
            for held in self.memory:
                self.spool.write(held)
        except Exception as e:
            self._drop_spool()
            reason = InputError(f"{self.writer.path}: cannot write the output ({e})")
            raise disk_full(self.writer.path, 0, e) or reason from None
        self.memory, self.memory_bytes = [], 0

    def _measure(self, block: np.ndarray) -> None:
        """Active power in 100 ms pieces of the whole stream, whatever the sizes of the blocks written:
        a piece not yet whole waits in `rest`."""
        rate = self.writer.rate
        data = np.concatenate([self.rest, block]) if len(self.rest) else block
        size = max(1, rate // 10)
        whole = len(data) // size * size
        p, n = active_power(data[:whole], rate)
        self.power, self.count, self.rest = self.power + p, self.count + n, data[whole:]

    def _gain(self) -> float:
        """The one gain the file gets: the target RMS over the audio's own, limited by its peak."""
        p, n = active_power(self.rest, self.writer.rate)  # the last, shorter piece
        power, count = self.power + p, self.count + n
        rms = (power / count) ** 0.5 if count else 0.0
        gain = self.target / rms if rms > 0 else 1.0
        if self.peak * gain > PEAK_CEILING:
            gain, self.limited = PEAK_CEILING / self.peak, True
        self.gain_db = 20 * float(np.log10(gain))
        return gain

    def commit(self) -> None:
        """Write out (levelled, when there is a target) and put the output file in place."""
        try:
            if self.target is not None:
                gain = np.float32(self._gain())
                for held in self.memory:
                    self.writer.write(held * gain)
                if self.spool is not None:
                    self.spool.close()
                    with sf.SoundFile(str(self.spool_path)) as f:
                        while True:
                            block = f.read(1 << 16, dtype="float32", always_2d=True)
                            if not len(block):
                                break
                            self.writer.write(block * gain)
                self._drop_spool()
            self.writer.commit()
        except BaseException:
            self.abort()  # a failed commit (disk full...) leaves no temporary file
            raise

    def held(self) -> int:
        """Bytes this output's temporary files take on disk now."""
        spool = self.spool_path.stat().st_size if self.spool_path is not None and self.spool_path.exists() else 0
        return spool + self.writer.size()

    def _drop_spool(self) -> None:
        self.memory, self.memory_bytes = [], 0
        if self.spool is not None and not self.spool.closed:
            self.spool.close()
        if self.spool_path is not None:
            self.spool_path.unlink(missing_ok=True)
        self.spool = self.spool_path = None

    def abort(self) -> None:
        self._drop_spool()
        self.writer.abort()

    def __enter__(self) -> "LevelledOutput":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
