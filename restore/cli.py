"""Command line: `restore INPUT -o OUTPUT`. Parses and forwards to restore.api; nothing else. The
choices come from the constants the library validates against."""

from __future__ import annotations

import signal
import sys
import traceback
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__
from .engines.plan import COMPILE_MODES, PLANS
from .errors import RestoreError, Terminated, command_line_words
from .options import CHANNEL_MODES, LEVEL_MODES, SAMPLERS, RestoreOptions


def _choices(name: str, values) -> type[Enum]:
    """An Enum whose members are `values` (typer shows and checks them as choices)."""
    return Enum(name, {v: v for v in values}, type=str)


Sampler = _choices("Sampler", SAMPLERS)
PlanName = _choices("PlanName", PLANS)
CompileMode = _choices("CompileMode", COMPILE_MODES)
Channels = _choices("Channels", CHANNEL_MODES)
Level = _choices("Level", LEVEL_MODES)
Band = _choices("Band", ("extend", "keep"))

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def _version(value: bool) -> None:
    if value:
        typer.echo(f"restore {__version__}")
        raise typer.Exit()


@app.command(help="Restore damaged speech recordings: a file, or a folder of them (its tree is mirrored).")
def restore(
    input: Annotated[Path, typer.Argument(help="Audio file or folder of audio files.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file, or folder for a folder input. Default: beside the input, with '.restored' (file) or '_restored' (folder) added.")] = None,
    sampler: Annotated[Sampler, typer.Option(help="The model's quality (pro) or speed (flash) preset from its config.json. The shipped model: flash is one unguided step; pro takes eight stochastic steps anchored on that first step, mixes the first step's restoration back in half and half, at two offsets of the frame grid, averaged (less background and better OVRL; an eighth of the speed of its one step; --steps 1 gives its one step at two offsets).")] = Sampler("pro"),
    steps: Annotated[Optional[int], typer.Option(help="Sampler steps (default: the model's setting for the sampler, else the preset's).")] = None,
    guidance: Annotated[Optional[float], typer.Option(help="Guidance weight for conditions and transcript (1 = none).")] = None,
    strength: Annotated[Optional[float], typer.Option(help="How much of the model's correction to apply on top of its gentle linear estimate, 0-2 (default: the model's setting, else 1).")] = None,
    keep_input: Annotated[Optional[str], typer.Option("--keep-input", help="Keep the input where the restoration took out less than this many dB below itself (higher keeps less), or 'off' (default: the model's setting, else off).")] = None,
    shifts: Annotated[Optional[int], typer.Option(help="Restore each window this many times, 1-8, at offsets of the model's frame grid, and average (default: the model's setting; 1 is the fastest).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the sampler noise; the same seed gives the same output.")] = 0,
    transcript: Annotated[Optional[str], typer.Option(help="Transcript text, or a .txt file. Default: a sidecar NAME.txt if present.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    plan: Annotated[PlanName, typer.Option(help="Which engine runs what (auto picks for this machine).")] = PlanName("auto"),
    sample_rate: Annotated[Optional[int], typer.Option("--sample-rate", help="Output sample rate (default: the input's).")] = None,
    channels: Annotated[Channels, typer.Option(help="auto: restore identical channels once, else each; each: every channel; mix: downmix to mono.")] = Channels("auto"),
    level: Annotated[Level, typer.Option(help="input: the restored file as loud as the input (peaks kept below full scale); model: as the model restores it.")] = Level("input"),
    band: Annotated[Optional[Band], typer.Option(help="A band-limited input (phone line, low-rate MP3): extend: the model fills its missing band up to 8 kHz (the shipped model's default: more words kept); keep: nothing is added above its cut-off.", show_default=False)] = None,
    format: Annotated[Optional[str], typer.Option("--format", help="Output extension for folder runs, e.g. flac (default: each input's own).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace outputs that exist (folder runs skip them otherwise).")] = False,
    model: Annotated[Optional[Path], typer.Option(help="Model folder (default: $RESTORE_MODEL, else the shipped model).")] = None,
    report: Annotated[Optional[Path], typer.Option(help="Where to write the JSON report; a folder run writes restore-report.json in the output folder unless given. An earlier report there is kept in its history.")] = None,
    batch: Annotated[Optional[int], typer.Option(help="Folder runs: channel windows restored together (default 16 on a GPU, 1 on the CPU).")] = None,
    cluster: Annotated[Optional[str], typer.Option(help="Folder runs on Ray: local (a Ray runtime in this process), auto (the cluster RAY_ADDRESS names) or ray://HOST:PORT. Needs pip install 'restore[cluster]'.")] = None,
    trace: Annotated[Optional[Path], typer.Option(help="Write a Chrome/Perfetto trace (JSON) of what ran where and when.")] = None,
    compile: Annotated[CompileMode, typer.Option(help="cpu/cuda plans: compile the model's forward (cuda-graphs: also capture CUDA graphs; pays off on long folder runs).")] = CompileMode("off"),
    mlp_share: Annotated[Optional[float], typer.Option("--mlp-share", help="split and apple plans: share of each MLP on the second engine (default: measured).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")] = False,
    debug: Annotated[bool, typer.Option(help="Show tracebacks of errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    from . import api

    try:
        with command_line_words(), terminate_as_interrupt():
            options = RestoreOptions(sampler=sampler.value, steps=steps, guidance=guidance, strength=strength,
                                     keep_input=keep_input, seed=seed, transcript=transcript, channels=channels.value,
                                     sample_rate=sample_rate, level=level.value,
                                     extend_band=None if band is None else band.value == "extend", shifts=shifts)
            code = api.run(input, output, options, device=device, plan=plan.value, format=format, overwrite=overwrite,
                           model=model, report=report, batch=batch, trace=trace, mlp_share=mlp_share,
                           compile=compile.value, cluster=cluster, progress=not quiet and sys.stderr.isatty())
    except RestoreError as e:
        if debug:
            traceback.print_exc()
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(e.exit_code) from None
    except Terminated:
        typer.echo("terminated: finished outputs are kept, unfinished ones dropped; run the same command again "
                   "to resume", err=True)
        raise typer.Exit(128 + signal.SIGTERM) from None
    except KeyboardInterrupt:
        typer.echo("interrupted: finished outputs are kept; run the same command again to resume", err=True)
        raise typer.Exit(130) from None
    except Exception as e:  # an unexpected failure: one line, the traceback on request
        if debug:
            traceback.print_exc()
        typer.echo(f"error: {type(e).__name__}: {e} (run with --debug for details)", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@contextmanager
def terminate_as_interrupt():
    """SIGTERM (kill, a service manager, a job scheduler) stops a run as Ctrl-C does: the exception
    unwinds through the same clean-up (the file in progress and its temporary files dropped, a worker
    process stopped, its shared memory freed). Signals that come while it unwinds are ignored."""
    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise Terminated()

    before = signal.signal(signal.SIGTERM, terminate)
    before_int = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, before_int)


def main() -> None:
    app()
