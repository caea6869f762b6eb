"""The warm Ansible executor's worker: a Python process that imports ansible-runner, Ansible and the
libraries modules use once, then serves each run of the operator by fork().

Process tree of one warm run (everything below the zygote is a fork, nothing is exec'd unless a
fallback says so):

    zygote (zygote.py)                 long-lived, started and supervised by the operator
    └─ run process (run.py)            what `ansible-runner run <dir> ...` would be
       └─ playbook process (playbook.py)   what `ansible-playbook ...` would be, on ansible-runner's pty
          └─ Ansible worker processes      forked by Ansible itself, as always
             └─ module processes (speedups/modules.py)  what `python AnsiballZ_<module>.py` would be

Each stage puts back, after the fork, the state a freshly started interpreter would have had; what
cannot be put back makes that stage exec the real program instead (a fallback).
"""
