"""Runs past one machine on DeepSpeed's own multi-node runner (pdsh over SSH).

hostfile.py reads and writes DeepSpeed hostfiles; ssh.py builds the ssh command lines traindeck itself uses (with
the same extra arguments pdsh is given); preflight.py checks every host before a launch; envfile.py decides which
environment reaches the other nodes; agent.py is the small per-node reporter (which also takes its node's ranks'
stacks: stack_requests.py is how one asks); watch.py is the supervisor's side of the agents (per-node resources,
stop everywhere, which node a rank ran on).
"""

import lazy_loader

# The face: every name below is declared, with its module, in __init__.pyi (what type checkers read) and imported
# on first use, so importing one module of the package never loads the rest.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
