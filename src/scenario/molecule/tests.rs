use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/memcached-molecule-operator")
}

fn skip(files: &[(&str, &str)]) -> (Vec<Skipped>, Vec<String>) {
    let mut files: Vec<(PathBuf, Vec<u8>)> =
        files.iter().map(|(path, text)| (PathBuf::from(path), text.as_bytes().to_vec())).collect();
    let skipped = skip_manager_tasks(&mut files, &[SCAFFOLD_SELECTOR.to_string()]);
    (skipped, files.into_iter().map(|(_, bytes)| String::from_utf8(bytes).unwrap()).collect())
}

#[test]
fn variables_are_filled_in_as_molecule_fills_them() {
    let var = |name: &str| match name {
        "SET" => Some("value".to_string()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    let fill = |text: &str| interpolate(text, var);
    assert_eq!(fill("a: ${SET} $SET ${SET:-d}").unwrap(), "a: value value value");
    assert_eq!(fill("${UNSET:-\"~/.kube/config\"}").unwrap(), "\"~/.kube/config\"");
    assert_eq!(fill("${EMPTY:-d} ${EMPTY-d} ${UNSET-d} ${UNSET}.").unwrap(), "d  d .");
    assert_eq!(fill("cost: $$5, $ alone").unwrap(), "cost: $5, $ alone");
    assert_eq!(fill("${UNSET:?must be set}").unwrap_err(), "UNSET: must be set");
    assert_eq!(fill("${SET").unwrap_err(), "`${SET`: no closing `}`");
    assert_eq!(
        fill("${SET:+x}").unwrap_err(),
        "`${SET:+x}`: not `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?error}` or `${NAME?error}`"
    );
}

#[test]
fn tasks_that_need_the_managers_pod_are_replaced_and_the_rest_is_left_byte_for_byte() {
    let tasks = "---\n# checks\n- name: Find the manager\n  k8s_info:\n    kind: Pod\n    label_selectors:\n      - \"control-plane = controller-manager\"\n  register: output\n\n- name: Exec into it\n  kubernetes.core.k8s_exec:\n    pod: \"{{ output.resources[0].metadata.name }}\"\n    command: curl localhost:8443/metrics\n  register: metrics_output\n\n- {name: Check metrics, assert: {that: \"'x' in metrics_output.stdout\"}}\n- name: Unrelated, mentions output only as an attribute\n  debug: {var: result.output}\n- name: Sets a fact from it\n  set_fact:\n    pod_name: \"{{ output.resources[0].metadata.name }}\"\n- debug: {msg: \"{{ pod_name }}\"}\n";
    let verify = "- hosts: localhost\n  vars:\n    ctrl_label: control-plane=controller-manager\n  tasks:\n    - block:\n        - include_tasks: tasks.yml\n      rescue:\n        - name: Logs\n          k8s_log: {label_selectors: [\"{{ ctrl_label }}\"]}\n          register: logs\n        - debug: {var: logs}\n        - fail: {msg: failed}\n";
    let (skipped, files) = skip(&[("tasks.yml", tasks), ("verify.yml", verify)]);
    let names: Vec<(&str, &str)> =
        skipped.iter().map(|s| (s.file.to_str().unwrap(), s.task.as_str())).collect();
    assert_eq!(
        names,
        [
            ("tasks.yml", "Find the manager"),
            ("tasks.yml", "Exec into it"),
            ("tasks.yml", "Check metrics"),
            ("tasks.yml", "Sets a fact from it"),
            ("tasks.yml", "unnamed task"),
            ("verify.yml", "Logs"),
            ("verify.yml", "unnamed task"),
        ]
    );
    assert_eq!(
        skipped[0].reason,
        "it looks for the manager's Pod (control-plane=controller-manager); the operator runs in this process, not in a Pod"
    );
    assert_eq!(skipped[1].reason, "it uses `output`, which comes from the manager's Pod");
    assert_eq!(skipped[5].reason, "it uses `ctrl_label`, which comes from the manager's Pod");
    let replaced = "{\"ansible.builtin.debug\":{\"msg\":\"skipped by ansible-operator test: it uses `output`, which comes from the manager's Pod\"},\"name\":\"Exec into it\"}";
    assert!(
        files[0].contains(&format!("\n- {replaced}\n\n\n\n\n\n- {{\"ansible.builtin.debug\"")),
        "{}",
        files[0]
    );
    assert_eq!(files[0].lines().count(), tasks.lines().count());
    assert_eq!(files[1].lines().count(), verify.lines().count());
    assert!(files[0].starts_with("---\n# checks\n- {"), "{}", files[0]);
    assert!(files[0].contains(
        "- name: Unrelated, mentions output only as an attribute\n  debug: {var: result.output}\n"
    ));
    assert!(files[1].contains("      rescue:\n        - {\"ansible.builtin.debug\""), "{}", files[1]);
    assert!(files[1].ends_with("\n        - fail: {msg: failed}\n"), "{}", files[1]);
    // What is left parses, and has the tasks in their places.
    let parsed: Vec<Value> = serde_saphyr::from_str(&files[0]).unwrap();
    assert_eq!(parsed.len(), 6);
    assert_eq!(parsed[4]["name"], "Sets a fact from it");
    assert_eq!(parsed[3]["debug"]["var"], "result.output");
}

#[test]
fn upstreams_scaffold_scenario_skips_only_what_reads_the_managers_pod() {
    let project = fixture();
    let scenario = load(&project.join("molecule/default"), &project, None).unwrap();
    assert_eq!(scenario.name, "molecule-default");
    let steps: Vec<(&str, &str)> =
        scenario.steps.iter().map(|step| (step.name.as_str(), super::super::kind_of(&step.action))).collect();
    assert_eq!(
        steps,
        [
            ("verify.yml", "molecule"),
            ("Search for all running pods (tasks/memcached_test.yml)", "skipped"),
            ("Curl the metrics from the manager (tasks/memcached_test.yml)", "skipped"),
            ("Assert sanity metrics were created (tasks/memcached_test.yml)", "skipped"),
            ("Assert Counter works as expected (tasks/memcached_test.yml)", "skipped"),
            ("Assert Gauge works as expected (tasks/memcached_test.yml)", "skipped"),
            ("Assert Summary works as expected (tasks/memcached_test.yml)", "skipped"),
            ("Assert Histogram works as expected (tasks/memcached_test.yml)", "skipped"),
            ("Retrieve Pod logs (verify.yml)", "skipped"),
            ("Output gathered logs (verify.yml)", "skipped"),
        ]
    );
}

#[test]
fn molecules_inventory_and_variables_are_what_the_playbooks_read() {
    let project = fixture();
    let scenario = load(&project.join("molecule/default"), &project, None).unwrap();
    let Action::Molecule(molecule) = &scenario.steps[0].action else { panic!() };
    let place =
        Place { copy: Path::new("/w/scenario"), ephemeral: Path::new("/w/eph"), namespace: "test-ns" };
    let env = molecule.environment(&place);
    let config = molecule.config(&env).unwrap();
    assert_eq!(config["scenario"]["name"], "default");
    let inventory = inventory(&config, &place);
    let vars = &inventory["all"]["vars"];
    assert_eq!(vars["namespace"], "test-ns");
    assert_eq!(vars["molecule_yml"]["scenario"]["name"], "default");
    let localhost = &inventory["all"]["hosts"]["localhost"];
    assert_eq!(localhost["samples_dir"], format!("{}/config/samples", project.display()));
    assert_eq!(localhost["ansible_python_interpreter"], "{{ ansible_playbook_python }}");
    assert_eq!(inventory["all"]["children"]["k8s"]["hosts"], json!({"cluster": {}}));
    let env = provisioner_env(&config);
    let kubeconfig = std::env::var("KUBECONFIG").unwrap_or_else(|_| "~/.kube/config".into());
    assert_eq!(env, [("K8S_AUTH_KUBECONFIG".to_string(), kubeconfig)]);
}

#[test]
fn a_scenario_molecule_cannot_run_here_is_refused_with_its_file_and_field() {
    let dir = std::env::temp_dir().join(format!("molecule-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("molecule.yml"), "verifier:\n  name: testinfra\n").unwrap();
    std::fs::write(dir.join("verify.yml"), "- hosts: localhost\n").unwrap();
    let error = load(&dir, &dir, None).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "{}: verifier.name: `testinfra`: only molecule's `ansible` verifier (verify.yml) is run",
            dir.join("molecule.yml").display()
        )
    );
    std::fs::write(dir.join("molecule.yml"), "provisioner:\n  env: {A: ${NEEDED:?set NEEDED}}\n").unwrap();
    let error = load(&dir, &dir, None).unwrap_err().to_string();
    assert!(error.ends_with("molecule.yml: variables: NEEDED: set NEEDED"), "{error}");
    std::fs::remove_file(dir.join("verify.yml")).unwrap();
    let error = load(&dir, &dir, None).unwrap_err().to_string();
    assert!(
        error.ends_with(
            ": molecule scenario: no verify.yml: the playbook whose tasks are the scenario's checks"
        ),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
