"""``python -m sundial`` is the ``sundial`` command."""

import sys

from sundial.cli import main

sys.exit(main())
