import sys

from fedbench.runners.cli.cli import main

sys.exit(main())
