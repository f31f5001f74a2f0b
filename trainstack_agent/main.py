"""The agent's entry point, run by every node's boot script once its digest checks out.

    python3 trainstack-agent-<digest>.pyz            the node's work (one boot)
    python3 trainstack-agent-<digest>.pyz cap PID --tpu-name ... --deadline EPOCH
                                                     a TPU VM's run-time cap (started by the above)

Exit status: the job's code's on a finished job (0 when it succeeded), 143 when a signal or
a duty ended the work, 1 when the node could not read its settings (it then records FAILED
where it can and stops the machine).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from trainstack_agent.agent import Agent
from trainstack_agent.boot import run_node
from trainstack_agent.cap import CapOrdersError, add_cap_command, read_cap_orders, refused_cap, run_cap


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainstack-agent", description=__doc__.split("\n\n")[0])
    add_cap_command(parser.add_subparsers(dest="command"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    options = parser().parse_args(argv)
    agent = Agent(os.environ)
    try:
        if options.command == "cap":
            try:
                orders = read_cap_orders(options)
            except CapOrdersError as error:
                return refused_cap(agent, error)
            return run_cap(agent, orders)
        return run_node(agent)
    finally:
        agent.log.close()
