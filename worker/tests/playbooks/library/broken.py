#!/usr/bin/python
"""A module that prints something that is not its JSON result and fails."""
from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    AnsibleModule(argument_spec={})
    print("not json")
    raise SystemExit(3)


if __name__ == "__main__":
    main()
