"""``python -m probe script.py [args]``: run a script with the kernel probe on.

``python -m probe --hook-dir`` prints the directory to put on ``PYTHONPATH`` instead (with
``GPUWATCH_PROBE=1``), and ``python -m probe --check`` says whether CUPTI loads here and
where windows would go.
"""

from __future__ import annotations

import runpy
import sys

USAGE = ("usage: python -m probe [-m module | script.py] [args...]\n"
         "       python -m probe --hook-dir | --check")


def main(argv: list[str]) -> int:
    import probe

    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    if argv[0] == "--hook-dir":
        print(probe.hook_dir())
        return 0
    if argv[0] == "--check":
        from probe.cupti_source import load
        from probe.settings import from_env
        module, version = load()
        settings = from_env()
        print(f"cupti-python: {version if module is not None else 'not loaded: ' + version}")
        print(f"window: up to {settings.window_s:g} s in every {settings.period_s:g} s, "
              f"at most {settings.max_records} records; agent socket: {settings.socket}")
        return 0 if module is not None else 1
    if argv[0].startswith("-") and argv[0] != "-m":
        print(f"python -m probe: unknown option {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    probe.enable()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(f"python -m probe: -m needs a module name\n{USAGE}", file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
