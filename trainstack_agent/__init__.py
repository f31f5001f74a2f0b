"""The node agent: the program every training node and TPU VM runs at boot.

A boot script only fetches the agent's archive, checks its sha256 against instance metadata
and runs it (``templates/``); everything else a node does is here, in typed Python that runs
on the node images' own Python (3.10 and later) with the standard library alone:

- ``settings``: instance metadata read once into typed settings, every value matched whole;
- ``cloud``, ``metadata``, ``storage``, ``compute``, ``secrets``: the Google Cloud calls, over
  urllib in this process, the VM's token in a header (never in any process's argv);
- ``artifacts``, ``environment``: fetch what the node runs, verified against the digests
  pinned in metadata, and install it;
- ``board``: the job's status objects (``trainstack_contract.status``);
- ``recovery``: the chief starts preempted Spot peers again, with back-off and a bound;
- ``processes``: the job's code as a supervised child process;
- ``node``: the life of one boot: prepare, wait for peers, train, recover, finish; its parts
  ``duties`` (every tick: heartbeat, watches, cancel), ``peers`` (lost and down peers),
  ``training`` (the code's runs and restarts) and ``jobend`` (recording the end, on_finish);
- ``jobqueue``: a standing node's queue of jobs, one ``node`` life each;
- ``main``: the entry point (``python3 trainstack-agent-<digest>.pyz``).

``trainstack local`` runs this same agent, with the cloud endpoints pointed at local
stand-ins through ``TRAINSTACK_*`` environment variables (:mod:`trainstack_agent.endpoints`).
"""
