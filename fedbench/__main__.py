import sys

from fedbench.runners.cli import main

sys.exit(main())
