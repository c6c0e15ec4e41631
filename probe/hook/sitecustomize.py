"""Enables gpuwatch's kernel probe at interpreter start when ``GPUWATCH_PROBE=1``.

Put this directory on ``PYTHONPATH`` (``python -m probe --hook-dir`` prints it). Python
imports one ``sitecustomize``; if the image had its own, this one runs it afterwards.
"""

import os as _os

if _os.environ.get("GPUWATCH_PROBE", "").strip().lower() in ("1", "true", "yes", "on"):
    try:
        import probe as _probe

        _probe.enable()
    except Exception:  # noqa: BLE001 - never into the application
        pass


def _chain() -> None:
    """Run the next sitecustomize on sys.path (the image's own), if there is one."""
    import contextlib
    import importlib.util
    import sys

    here = _os.path.dirname(_os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or _os.path.abspath(entry) == here:
            continue
        candidate = _os.path.join(entry, "sitecustomize.py")
        if _os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_gpuwatch_next_sitecustomize", candidate)
            if spec and spec.loader:
                with contextlib.suppress(Exception):  # theirs, not ours to break
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_chain()
