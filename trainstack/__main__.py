import sys

from trainstack.cli import main

sys.exit(main())
