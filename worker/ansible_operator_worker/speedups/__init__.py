"""The worker's speed-ups: each changes one piece of Ansible, ansible-runner, Jinja2 or the kubernetes
client, or keeps what it computes, so that a fork runs as a fresh `ansible-playbook` would, faster."""
