"""``python -m qptables.cli``: the ``qptables`` command line."""

import sys

from qptables.cli.commands import main

if __name__ == "__main__":  # importing the module (the docs' autosummary does) runs nothing
    sys.exit(main())
