import sys

from mdband_launcher import main

sys.exit(main())
