#!/usr/bin/python3
"""Ansible module of the KubernetesCluster sample: writes many small files under one directory in
one call (a master's certificates, kubeconfigs and start scripts), instead of a `copy` task per file,
each a Python start on the host. Only files whose content or mode differ are written (atomically);
`changed_files` lists them, so the playbook restarts only the components they belong to.
"""

from __future__ import annotations

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: kube_files
short_description: Write files under a directory, reporting which changed
options:
  dir: {description: The directory; created with mode 0755 when missing., type: path, required: true}
  directories: {description: Subdirectories to create, name to octal mode., type: dict, default: {}}
  files: {description: Relative path to {content, mode}., type: dict, required: true}
"""


def write_if_changed(path: str, content: str, mode: int) -> bool:
    data = content.encode()
    try:
        with open(path, "rb") as current:
            if current.read() == data and os.stat(path).st_mode & 0o7777 == mode:
                return False
    except FileNotFoundError:
        pass
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kube_files.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "required": True},
            "directories": {"type": "dict", "default": {}},
            "files": {"type": "dict", "required": True, "no_log": True},
        },
        supports_check_mode=False,
    )
    base: str = module.params["dir"]
    created = []
    for name, mode in [(".", "0755")] + sorted(module.params["directories"].items()):
        path = os.path.normpath(os.path.join(base, name))
        if not os.path.isdir(path):
            os.makedirs(path, exist_ok=True)
            created.append(name)
        os.chmod(path, int(str(mode), 8))
    changed_files = [
        name
        for name, spec in sorted(module.params["files"].items())
        if write_if_changed(os.path.join(base, name), spec["content"], int(str(spec.get("mode", "0644")), 8))
    ]
    module.exit_json(changed=bool(created or changed_files), created=created, changed_files=changed_files)


if __name__ == "__main__":
    main()
