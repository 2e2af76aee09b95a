"""``python -m mdband.cli``: the ``mdband`` command, through the console script's launcher."""

import sys

from mdband_launcher import main

sys.exit(main())
