//! Extra vars: what a playbook receives, built from the CR exactly as upstream does.
