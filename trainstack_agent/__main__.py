"""``python3 -m trainstack_agent``, and the entry point of the agent's archive."""

import sys

from trainstack_agent.main import main

sys.exit(main())
