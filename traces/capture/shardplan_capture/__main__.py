"""`python3 -m shardplan_capture` (with traces/capture on PYTHONPATH): the same as the
traces/capture/shardplan-capture launcher."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
