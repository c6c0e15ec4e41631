"""``python -m gpuwatch`` is the same as the ``gpuwatch`` command."""

import sys

from gpuwatch.cli import main

sys.exit(main())
