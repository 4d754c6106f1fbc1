"""`python -m pipeline ...` is `bert-shards ...`."""

import sys

from pipeline.shell.cli import main

sys.exit(main())
