"""``python -m trace_lab report ...`` = the headless lab (see trace_lab.cli)."""
import sys

from .cli import main

sys.exit(main())
