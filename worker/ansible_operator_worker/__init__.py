"""The warm Ansible executor's worker: a Python process that imports ansible-runner, Ansible and the
libraries modules use once, then serves each run of the operator by fork().

Process tree of one warm run (everything below the zygote is a fork, nothing is exec'd unless a
fallback says so):

    zygote (zygote.py)                 long-lived, started and supervised by the operator
    ├─ learner (kept.py)               now and then: makes again what runs reported they lacked
    └─ run process (run.py)            what `ansible-runner run <dir> ...` would be, and what
       │                               `ansible-playbook ...` would be on its pty (in_process.py)
       ├─ playbook process (playbook.py)   only for a run with an SSH key: ansible-playbook after
       │                                   the agent, on ansible-runner's pty
       └─ Ansible worker processes     forked by Ansible itself, as always
          └─ module processes (speedups/modules.py)  what `python AnsiballZ_<module>.py` would be

Each stage puts back, after the fork, the state a freshly started interpreter would have had; what
cannot be put back makes that stage exec the real program instead (a fallback).

Layout: what is ours, and what changes Ansible.

    the process skeleton, the worker's own machinery:
        __main__.py        `python -m ansible_operator_worker`: the zygote
        zygote.py          imports once, forks a run process per request, keeps what learners make
        run.py             the run process: ansible-runner's own entry point
        playbook.py        where ansible-playbook runs: in the run process, in a fork, or exec (fallback)
        in_process.py      ansible-playbook's CLI in the run process itself, on a stand-in pty
        agent.py           the SSH agent of a run with a key, as ansible-runner's command would start it
        protocol.py        the messages between the operator and the worker
        process.py         what makes a fork look like a freshly exec'd interpreter
        ansible_state.py   what makes it look like a freshly started ansible-playbook: Ansible's
                           process-global state put back (settings, Display, ids, locks)
        kept.py            what the worker keeps for every run, and the learner that makes it
    speedups/              each a change to Ansible, ansible-runner, Jinja2 or the kubernetes client
                           (or a cache of what they compute) that makes a run faster; its
                           `__init__` is the index: what each patches, and the ansible-core
                           versions it knows
"""
