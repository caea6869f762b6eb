"""The worker's speed-ups: each makes part of a run faster, or the worker smaller, by changing one
piece of Ansible, ansible-runner, Jinja2 or the kubernetes client, or by keeping what that piece
computes, while a fork still runs as a fresh `ansible-playbook` would. The rest of
`ansible_operator_worker` is the worker's own process skeleton (zygote, run, playbook, protocol,
process, agent, ansible_state, kept), which installs these: the zygote as it starts, a run process
or a playbook process after its fork. Each module's docstring opens with what it patches and the
ansible-core versions it knows; "no version check" means it is written for the toolchains'
ansible-core 2.18 to 2.21 alike ("2.18 to 2.21": the toolchains' 2.18, 2.19 and 2.21, which the
worker's tests run on; 2.20 is no toolchain).

Index: module: what it makes faster; what of Ansible, ansible-runner, Jinja2 or the kubernetes
client it patches or replaces; the ansible-core versions it knows.

The worker itself
- `lazy_kubernetes`: the worker's memory (some 700 generated model and API modules imported only
  when used, in the process that uses them); replaces the import of `kubernetes.client`,
  `kubernetes.client.models` and `kubernetes.client.api` (a finder first on `sys.meta_path`); no
  ansible-core code; kubernetes 33 (35 and later are lazy on their own and left as they are).

The run process (ansible-runner)
- `runner_cli`: ansible-runner's command line, built once (some 7 ms a run); replaces
  `ansible_runner.__main__.AnsibleRunnerArgumentParser` in a run; no ansible-core code.
- `event_files`: each job event file written at once, not in some two hundred pieces; replaces the
  `json` of `ansible_runner.runner` (its `dump`); no ansible-core code.
- `event_partials`: the partial file of each event the callback reports (made, read back and
  removed) handed over in memory when the play runs in the run process; patches the callback's
  `IsolatedFileWrite.set` and gives `ansible_runner.runner` a `codecs.open` and an `os.remove`
  that know the partials held; no ansible-core code, ansible-runner 2.4 only.

The playbook process (ansible-playbook)
- `playbook_cli`: ansible-playbook's command line, built once (some 4 ms a run); patches
  `ansible.cli.playbook.PlaybookCLI.init_parser`; 2.18 to 2.21, no version check.
- `parse_cache`: YAML every run parses (setting definitions, collections' routing metadata, plugin
  documentation), parsed once; patches `_collection_finder._meta_yml_to_dict`,
  `ConfigManager._read_config_yaml_file` and below 2.19 `AnsibleLoader` (plugin loader, plugin
  docs); 2.18 to 2.21 (documentation kept on 2.18 only).
- `plugin_settings`: the builtin plugins' settings, registered once, not at each run's first load;
  patches `ansible.plugins.loader.PluginLoader._load_config_defs`; 2.18 only (from 2.19 on: not
  installed).
- `collection_loader`: each run's install of the collection loader, which emptied the importer
  cache (some 6 ms in a fork); patches `_AnsibleCollectionFinder._install`; 2.18 to 2.21, no
  version check.

- `event_stdout`: ansible-runner's callback writing each event's data into the playbook's output in
  pieces (three or more unbuffered writes to the terminal an event, some 66 in a `debug` run),
  written at once; patches the callback's `EventContext.dump` as `PluginLoader._load_module_source`
  loads it; ansible-runner 2.4 only (another version's callback is left as it is), 2.18 to 2.21.

Tasks
- `task_forks`: plugin listings and lookups every task's fork made again (about 3 ms a task);
  patches `ansible.executor.process.worker.WorkerProcess.start`; 2.18 to 2.21, no version check.
- `inline_tasks`: the fork of a task that never leaves the controller, and of a kubernetes.core or
  operator_sdk.util task on the local connection of a one-host play (its module then runs in
  place); patches `WorkerProcess.start` to run Ansible's `TaskExecutor` in place; 2.18 only
  (`supported()`; otherwise every task forks).
- `jinja_misses`: the search for Jinja2's own filters and tests through Ansible's plugin loader
  (some 2 ms a name in every task's fork); patches
  `ansible.plugins.loader.Jinja2Loader.get_with_context`; 2.18 only (from 2.19 on: not installed).
- `template_cache`: Jinja2's compilation of templates and expressions in every task's fork; patches
  Jinja2's `Environment.compile`, `Environment.compile_expression` and
  `nodes._FilterTestCommon.as_const`; 2.18 to 2.21, no version check.

Modules
- `modules`: a new interpreter for each module call (a fork that has the kubernetes client
  imported), the compilation of its payload's sources, and the temporary file of a module on the
  local connection (pipelined, as Ansible's `pipelining` does); patches the `subprocess` of
  `ansible.plugins.connection.local`, `ActionBase._is_pipelining_enabled` (2.18) or
  `local.Connection.is_pipelining_enabled` (2.19) and, in module processes,
  `zipimport._compile_source`; 2.18 to 2.21 (any other command line goes to the real `Popen`).
- `modules_in_place`: the module process itself, for kubernetes.core and operator_sdk.util modules
  (its fork, copy-on-write faults and exit: some 25 ms of a `k8s` task): they run in the task's
  own process, which Ansible forked for that task alone, or in the playbook process running the
  task inline, with what they change put back after and exit handlers of their own;
  patches nothing of Ansible's (`modules` asks it before it forks); 2.18 to 2.21 (the module's
  name read from the AnsiballZ wrapper of each).
- `local_tmp`: the shell commands that make, change and remove a task's temporary directory on the
  local connection (`echo ~`, `mkdir`, `chmod`, `rm -rf`: some 40 to 60 ms a module task), made
  here as the same system calls; patches `ActionBase._remote_expand_user`, `._make_tmp_path`,
  `._remote_chmod` and `._remove_tmp_path`; 2.18 to 2.21, no version check (anything but the
  plain case, and any error, goes to Ansible's own method).
- `payload_cache`: the AnsiballZ payload each run builds for each module (a tenth of a second or
  more for a kubernetes.core module); patches `ansible.executor.module_common.modify_module`;
  2.18 to 2.21, no version check.
- `module_utils`: each module process's import of its payload's module_utils (some sixty for a
  kubernetes.core module, 20 to 30 ms): the zygote imports them once from the payloads it keeps,
  and a module process adopts the ones whose payload file, environment reads and dependencies are
  the same; patches nothing of Ansible's (a finder first on `sys.meta_path` in module processes);
  2.18 (2.19's payload cache is a pickle: nothing is stashed, its modules import as they come).

What `modules`, `payload_cache` and `template_cache` keep, the worker's learner makes (`kept`);
`module_utils` stashes from the payloads kept.
"""
