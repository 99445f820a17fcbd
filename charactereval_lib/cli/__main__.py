"""``python -m charactereval_lib.cli``: the ``charactereval`` command."""

import sys

from charactereval_lib.cli import main

sys.exit(main())
