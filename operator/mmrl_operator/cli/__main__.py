"""`python -m mmrl_operator.cli`: the `mmrl` command (the operator image's entrypoint runs `... operator`)."""

import sys

from mmrl_operator.cli.main import main

sys.exit(main())
