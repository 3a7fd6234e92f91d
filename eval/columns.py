"""The reported metrics: their columns in the per-clip table, direction, units and formatting."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSpec:
    key: str                 # column in the per-clip table
    label: str               # name in report and plots
    group: str               # the --metrics group that turns it on
    higher_is_better: bool
    unit: str = ""
    scale: float = 1.0       # multiply for display (WER is stored as a fraction, shown in %)
    decimals: int = 2
    weight: str | None = None  # column of per-clip weights for the mean (WER: reference words)

    def fmt(self, value: float, signed: bool = False) -> str:
        if value != value:  # NaN
            return "—"
        v = value * self.scale
        return f"{v:+.{self.decimals}f}" if signed else f"{v:.{self.decimals}f}"

    @property
    def arrow(self) -> str:
        return "↑" if self.higher_is_better else "↓"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("wer_human", "WER vs human transcript", "wer", False, "%", 100.0, 1, "ref_words_human"),
    MetricSpec("wer_asr", "WER vs ASR of clean", "wer", False, "%", 100.0, 1, "ref_words_asr"),
    MetricSpec("wer_jit", "WER vs ASR of clean, jitter-averaged", "wer", False, "%", 100.0, 1, "ref_words_jit"),
    MetricSpec("spk_sim", "Speaker similarity", "speaker", True, "cosine", 1.0, 3),
    MetricSpec("dnsmos_sig", "DNSMOS SIG", "dnsmos", True, "MOS"),
    MetricSpec("dnsmos_bak", "DNSMOS BAK", "dnsmos", True, "MOS"),
    MetricSpec("dnsmos_ovrl", "DNSMOS OVRL", "dnsmos", True, "MOS"),
    MetricSpec("pesq", "PESQ (WB)", "pesq", True, "MOS-LQO"),
    MetricSpec("stoi", "STOI", "stoi", True, "", 1.0, 3),
    MetricSpec("si_sdr", "SI-SDR", "si_sdr", True, "dB", 1.0, 1),
)

# --metrics groups and the cached analyses each one needs. The lag check rides along with any
# reference-based metric because it explains their failures.
GROUPS: dict[str, tuple[str, ...]] = {
    "wer": ("asr", "asr_jitter"),
    "speaker": ("speaker_embedding",),
    "dnsmos": ("dnsmos",),
    "pesq": ("pesq", "lag"),
    "stoi": ("stoi", "lag"),
    "si_sdr": ("si_sdr", "lag"),
}

REFERENCE_GROUPS = ("pesq", "stoi", "si_sdr")

# The packages (import names) each group needs; speechmos needs onnxruntime without declaring it.
GROUP_PACKAGES: dict[str, tuple[str, ...]] = {
    "wer": ("pocketsphinx", "jiwer"),
    "speaker": ("resemblyzer", "webrtcvad", "torch"),
    "dnsmos": ("speechmos", "onnxruntime", "librosa"),
    "pesq": ("pesq",),
    "stoi": ("pystoi",),
    "si_sdr": (),
}


def missing_packages(groups) -> dict[str, list[str]]:
    """Group -> packages it needs that cannot be found (nothing is imported)."""
    from importlib.util import find_spec

    missing = {}
    for g in groups:
        absent = [p for p in GROUP_PACKAGES.get(g, ()) if find_spec(p) is None]
        if absent:
            missing[g] = absent
    return missing


def metric(key: str) -> MetricSpec:
    for m in METRICS:
        if m.key == key:
            return m
    raise KeyError(key)
