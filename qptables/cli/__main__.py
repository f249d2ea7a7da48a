"""``python -m qptables.cli``: the ``qptables`` command line."""

import sys

from qptables.cli.commands import main

sys.exit(main())
