import sys

from wasmrun.cli import main

sys.exit(main())
