//! The image on Python 3.13 (Debian trixie) with the newest toolchain (ansible-core 2.21), as
//! `make docker-build BASE_SUITE=trixie ANSIBLE_TOOLCHAIN=2.21` builds it: it reports its versions,
//! and the memcached sample's scenario passes with the operator, its warm worker and Ansible all
//! inside it, against the real API server and node. Runs in `make test`'s newest-toolchain pass.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use support::operator::scratch_dir;

const IMAGE: &str = "localhost/ansible-operator:trixie-2.21";

/// `hack/images.sh ARGS` with the newest toolchain on Debian trixie.
fn images(args: &[&str]) -> Output {
    Command::new(support::repo().join("hack/images.sh"))
        .args(args)
        .env("BASE_SUITE", "trixie")
        .env("ANSIBLE_TOOLCHAIN", "2.21")
        .output()
        .expect("run hack/images.sh")
}

/// Limits for the container: podman's defaults (over a million) are above what this sandbox's
/// root may set (raising a hard limit needs CAP_SYS_RESOURCE: runc then fails with "error setting
/// rlimits"); these are ample for one operator.
const ULIMITS: [&str; 2] = ["--ulimit=nofile=16384:16384", "--ulimit=nproc=16384:16384"];

#[tokio::test]
async fn the_python_3_13_image_runs_the_samples_on_ansible_core_2_21() {
    support::node::require_ready_node(&support::client().await).await;
    let built = images(&["operator", IMAGE]);
    assert!(built.status.success(), "build {IMAGE}: {}", support::describe_output(&built));

    let mut args = vec!["podman", "run", "--rm"];
    args.extend(ULIMITS);
    let version =
        images(&[&args[..], &["--entrypoint=/usr/local/bin/ansible-operator", IMAGE, "version"]].concat());
    assert!(version.status.success(), "{}", support::describe_output(&version));
    let line = String::from_utf8_lossy(&version.stdout);
    assert!(line.contains("ansible-core: \"2.21."), "{line}");
    assert!(line.contains("python: \"3.13."), "{line}");

    // The image's user (1001) reads a copy of the admin kubeconfig (made 0644); the sample CRDs and
    // the scenario come from the repository, the watches file, roles and playbooks from the image.
    let work = scratch_dir("trixie-image");
    let kubeconfig = work.join("kubeconfig");
    std::fs::copy(support::repo().join(".local/cluster/kubeconfig"), &kubeconfig)
        .expect("copy the kubeconfig");
    std::fs::set_permissions(&kubeconfig, PermissionsExt::from_mode(0o644)).unwrap();
    // The sample CRDs, links resolved (one links to deploy/history/).
    let crds = work.join("crds");
    std::fs::create_dir(&crds).unwrap();
    for entry in std::fs::read_dir(support::repo().join("deploy/crds")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, crds.join(path.file_name().unwrap())).expect("copy a CRD");
    }
    let run = work.join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, PermissionsExt::from_mode(0o777)).unwrap();
    let mounts = [
        format!("{}:/work/run", run.display()),
        format!("{}:/work/kubeconfig:ro", kubeconfig.display()),
        format!("{}:/work/crds:ro", crds.display()),
        format!(
            "{}:/work/memcached.yaml:ro",
            support::repo().join("tests/scenarios/memcached.yaml").display()
        ),
    ];
    args.extend(["--network=host", "--env=KUBECONFIG=/work/kubeconfig"]);
    let volumes: Vec<String> = mounts.iter().map(|m| format!("--volume={m}")).collect();
    args.extend(volumes.iter().map(String::as_str));
    args.extend([
        "--entrypoint=/usr/local/bin/ansible-operator",
        IMAGE,
        "test",
        "--crds=/work/crds",
        "--work-dir=/work/run",
    ]);
    args.push("/work/memcached.yaml");
    let scenario = images(&args);
    let shown = support::describe_output(&scenario);
    assert!(scenario.status.success(), "{shown}");
    let stdout = String::from_utf8_lossy(&scenario.stdout);
    assert!(stdout.contains("1 scenario(s): 1 passed, 0 failed"), "{shown}");
    assert!(stdout.lines().any(|line| line.starts_with("  ok      idempotent Memcached/sample")), "{shown}");
    // The runs were warm: the worker started inside the image.
    let log = std::fs::read_to_string(run.join("operator.log")).expect("the operator's log");
    assert!(log.contains("warm Ansible worker ready"), "{log}");
}
