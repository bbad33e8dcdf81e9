"""`python -m devcluster`: the same as `sedna-devcluster`."""

import sys

from devcluster.cli import main

if __name__ == "__main__":
    sys.exit(main())
