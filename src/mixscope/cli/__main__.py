"""``python -m mixscope.cli``: the ``mixscope`` command."""

import sys

from mixscope.cli import main

sys.exit(main())
