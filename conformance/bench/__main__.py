import sys

from conformance.bench.cli import main

sys.exit(main())
