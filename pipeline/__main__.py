"""`python -m pipeline ...` is `bert-shards ...`."""

import sys

from pipeline.shell.entry import main

sys.exit(main())
