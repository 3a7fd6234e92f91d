"""Finding what to evaluate: the clips, their clean references, degraded inputs and transcripts,
and one folder of output files per system, all matched by clip id (file name without extension).

A test set folder (as written by eval.make_testset) holds clean/, degraded/ and manifest.csv.
Transcripts come from the manifest's `transcript` column (with `reference_kind`: human or
asr_of_clean) or from sidecar files <clip_id>.txt in transcripts/, clean/ or degraded/.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from .audio import list_audio

REFERENCE_KINDS = ("human", "asr_of_clean")
RESERVED_SYSTEMS = ("clean", "degraded")


@dataclass
class Clip:
    clip_id: str
    clean: Path | None = None
    degraded: Path | None = None
    transcript: str | None = None
    reference_kind: str | None = None      # "human" | "asr_of_clean" | None (no transcript yet)
    meta: dict[str, str] = field(default_factory=dict)  # other manifest columns


@dataclass
class EvalSet:
    clips: list[Clip]
    systems: dict[str, dict[str, Path]]   # system name -> clip id -> file, in display order
    warnings: list[str] = field(default_factory=list)

    @property
    def has_clean(self) -> bool:
        return all(c.clean is not None for c in self.clips)

    @property
    def has_degraded(self) -> bool:
        return all(c.degraded is not None for c in self.clips)


def _examples(ids) -> str:
    ids = sorted(ids)
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def read_manifest(path: str | Path) -> dict[str, dict[str, str]]:
    """Rows of a manifest CSV by clip id (column `clip_id` or `id`)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"manifest {path} does not exist.")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        id_column = next((c for c in ("clip_id", "id") if c in columns), None)
        if id_column is None:
            raise ValueError(f"manifest {path} has no clip_id column.")
        rows: dict[str, dict[str, str]] = {}
        for row in reader:
            clip_id = (row.get(id_column) or "").strip()
            if not clip_id:
                continue
            if clip_id in rows:
                raise ValueError(f"manifest {path} lists clip {clip_id!r} twice.")
            rows[clip_id] = {k: (v or "") for k, v in row.items() if k != id_column}
    if not rows:
        raise ValueError(f"manifest {path} lists no clips.")
    return rows


def parse_system(spec: str) -> tuple[str, Path]:
    """'NAME=DIR' or 'DIR' (named after the folder) -> (name, path)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        name = name.strip()
    else:
        path = spec
        name = Path(spec.rstrip("/")).name
    if not name:
        raise ValueError(f"system {spec!r} has an empty name; write it as NAME=DIR.")
    return name, Path(path)


def _sidecar(clip_id: str, folders: list[Path]) -> str | None:
    for folder in folders:
        p = folder / f"{clip_id}.txt"
        if p.is_file():
            return p.read_text(encoding="utf-8").strip()
    return None


def discover(systems: list[str] | None = None, testset: str | Path | None = None,
             clean: str | Path | None = None, degraded: str | Path | None = None,
             manifest: str | Path | None = None, clean_row: bool = True,
             degraded_row: bool = True) -> EvalSet:
    """Match clips, references, transcripts and systems by clip id.

    The clip list is the manifest's, else the degraded folder's, else the clean folder's, else the
    first system's. Every system must have a file for every clip (a paired comparison needs the
    same clips everywhere); files that match no clip are ignored with a warning. The degraded
    input and the clean reference become systems 'degraded' and 'clean' unless turned off.
    """
    warnings: list[str] = []
    if testset is not None:
        testset = Path(testset)
        if not testset.is_dir():
            raise ValueError(f"test set folder {testset} does not exist.")
        clean = clean or (testset / "clean" if (testset / "clean").is_dir() else None)
        degraded = degraded or (testset / "degraded" if (testset / "degraded").is_dir() else None)
        manifest = manifest or (testset / "manifest.csv" if (testset / "manifest.csv").is_file() else None)
        if clean is None and degraded is None:
            raise ValueError(f"test set folder {testset} has neither a clean/ nor a degraded/ folder.")
    clean_files = list_audio(clean) if clean is not None else None
    degraded_files = list_audio(degraded) if degraded is not None else None
    rows = read_manifest(manifest) if manifest is not None else None

    system_files: dict[str, dict[str, Path]] = {}
    for spec in systems or []:
        name, path = parse_system(spec)
        if name in system_files or name in RESERVED_SYSTEMS:
            raise ValueError(f"two systems would be named {name!r}; name them apart with NAME=DIR.")
        try:
            system_files[name] = list_audio(path)
        except ValueError as e:
            raise ValueError(f"system {name!r}: {e}") from None

    if rows is not None:
        clip_ids = list(rows)
    elif degraded_files is not None:
        clip_ids = list(degraded_files)
    elif clean_files is not None:
        clip_ids = list(clean_files)
    elif system_files:
        clip_ids = list(next(iter(system_files.values())))
    else:
        raise ValueError("nothing to evaluate: give a test set, a degraded or clean folder, or a system folder.")
    clip_ids = sorted(clip_ids)
    wanted = set(clip_ids)

    for label, files in (("clean", clean_files), ("degraded", degraded_files)):
        if files is None:
            continue
        missing = wanted - set(files)
        if missing:
            raise ValueError(f"the {label} folder has no file for {len(missing)} of {len(wanted)} clips "
                             f"({_examples(missing)}).")

    sidecar_folders = [p for p in ((testset / "transcripts") if testset else None, clean, degraded) if p]
    clips = []
    for clip_id in clip_ids:
        row = dict(rows[clip_id]) if rows is not None else {}
        transcript = row.pop("transcript", "").strip() or None
        kind = row.pop("reference_kind", "").strip() or None
        if transcript is None:
            transcript = _sidecar(clip_id, [Path(p) for p in sidecar_folders])
            kind = "human" if transcript is not None else None
        elif kind is None:
            kind = "human"
        if kind is not None and kind not in REFERENCE_KINDS:
            raise ValueError(f"clip {clip_id!r} has reference_kind {kind!r}; use one of {', '.join(REFERENCE_KINDS)}.")
        clips.append(Clip(clip_id, clean_files[clip_id] if clean_files else None,
                          degraded_files[clip_id] if degraded_files else None, transcript, kind, row))

    ordered: dict[str, dict[str, Path]] = {}
    if degraded_files is not None and degraded_row:
        ordered["degraded"] = {c: degraded_files[c] for c in clip_ids}
    for name, files in system_files.items():
        missing = wanted - set(files)
        if missing == wanted:
            raise ValueError(f"system {name!r} has no file named like any clip of the test set "
                             f"(its files: {_examples(files)}; the clips: {_examples(wanted)}).")
        if missing:
            raise ValueError(f"system {name!r} has no file for {len(missing)} of {len(wanted)} clips "
                             f"({_examples(missing)}); every system must cover every clip.")
        extra = set(files) - wanted
        if extra:
            warnings.append(f"system {name!r}: ignored {len(extra)} files that match no clip ({_examples(extra)}).")
        ordered[name] = {c: files[c] for c in clip_ids}
    if clean_files is not None and clean_row:
        ordered["clean"] = {c: clean_files[c] for c in clip_ids}
    if not ordered:
        raise ValueError("no system to score: give at least one system folder or a degraded folder.")
    return EvalSet(clips, ordered, warnings)
