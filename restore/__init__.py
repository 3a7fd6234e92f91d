"""restore: speech restoration with a guided rectified-flow diffusion transformer.

    from restore import Restorer, RestoreOptions
    Restorer().restore_file("interview.wav", "interview.restored.wav", RestoreOptions(sampler="flash"))
"""

from __future__ import annotations

import os

# OpenMP threads that spin while waiting make torch's CPU work crawl as soon as another process holds a
# core (measured on 2 cores: a forward pass 2.2x slower; 80-100x for small ops); yielding threads cost
# about 8% on an idle machine. Effective only when torch is imported after restore; a user's setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
__all__ = ["RestoreOptions", "Restorer", "load_model", "restore_file"]


def __getattr__(name):  # lazy: `import restore` stays cheap (the training machine has no soundfile)
    if name == "Restorer":
        from .pipeline.restorer import Restorer
        return Restorer
    if name == "RestoreOptions":
        from .options import RestoreOptions
        return RestoreOptions
    raise AttributeError(name)


def load_model(model=None, **kwargs):
    """A Restorer holding the model (default: the shipped one), ready for many files; keyword arguments:
    plan, device, window, mlp_share, compile, trace, status."""
    from .errors import UsageError
    from .pipeline.restorer import Restorer

    unknown = sorted(set(kwargs) - set(RESTORER_KEYWORDS))
    if unknown:
        raise UsageError(f"unknown keyword(s) {', '.join(unknown)}; choose from {', '.join(RESTORER_KEYWORDS)}")
    return Restorer(model, **kwargs)


RESTORER_KEYWORDS = ("plan", "device", "window", "mlp_share", "compile", "trace", "status")


def restore_file(input, output, options=None, *, model=None, overwrite=False, **changes):
    """Restore one file; `options` (a RestoreOptions) and/or its fields as keyword arguments; the
    Restorer's keywords (plan, device, mlp_share, compile) choose the engines. An existing output is kept
    unless `overwrite`."""
    engines = {k: changes.pop(k) for k in RESTORER_KEYWORDS if k in changes}
    from .options import RestoreOptions
    options = RestoreOptions.of(options, **changes)  # refused before the model loads
    with load_model(model, **engines) as restorer:
        return restorer.restore_file(input, output, options, overwrite=overwrite)
