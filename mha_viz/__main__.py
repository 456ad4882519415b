"""`python -m mha_viz` and the `mha-viz` command: the command line lives in mha_viz/cli/."""

import sys

from mha_viz.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
