import sys

from wasmrun.cli.main import main

sys.exit(main())
