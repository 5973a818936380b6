"""``python -m broker`` is the ``sundial`` command."""

import sys

from .cli import main

sys.exit(main())
