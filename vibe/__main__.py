import sys

from vibe.cli import main

sys.exit(main())
