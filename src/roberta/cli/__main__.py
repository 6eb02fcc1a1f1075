"""`python -m roberta.cli`: the `roberta` command, as torchrun and the tests start it."""

import sys

from roberta.cli import main

sys.exit(main())
