//! `ansible-operator test` timed from start to verdict, the operator in the command's process and
//! memcached's Pods on the local node: the repository's own scenario for the sample Memcached
//! (tests/scenarios/memcached.yaml: create, assert, idempotent, scale, delete), and upstream's
//! scaffold test project's molecule scenario through `--molecule`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

use crate::scenarios::Ctx;
use crate::stats::Summary;

/// Both, `runs` times each: a row each.
pub fn test_command(ctx: &Ctx, binary: &Path, runs: usize) -> Value {
    let molecule_project = ctx.repo.join("tests/fixtures/memcached-molecule-operator");
    json!([
        timed(ctx, binary, runs, "memcached", &ctx.repo, &["tests/scenarios/memcached.yaml"]),
        timed(ctx, binary, runs, "molecule", &molecule_project, &["--molecule=molecule/default"]),
    ])
}

/// Runs `ansible-operator test ARGS` in `dir` `runs` times; the wall time of each, and whether all
/// passed. Each run's report is kept in the results directory (`test-command-<name>-<run>.txt`).
fn timed(ctx: &Ctx, binary: &Path, runs: usize, name: &str, dir: &Path, args: &[&str]) -> Value {
    let mut seconds = Vec::new();
    let mut failures = Vec::new();
    for run in 0..runs {
        let work = ctx.work.join(format!("test-command-{name}-{run}"));
        let mut path = vec![ctx.venv.join("bin"), ctx.repo.join(".local/bin")];
        path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
        let started = Instant::now();
        let output = Command::new(binary)
            .current_dir(dir)
            .arg("test")
            .args(args)
            .arg(format!("--work-dir={}", work.display()))
            .env("PATH", std::env::join_paths(path).unwrap_or_default())
            .env("VIRTUAL_ENV", &ctx.venv)
            .env("KUBECONFIG", &ctx.kubeconfig)
            .env_remove("WATCH_NAMESPACE")
            .stdin(Stdio::null())
            .output();
        let elapsed = started.elapsed().as_secs_f64();
        if let Ok(output) = &output {
            let _ = std::fs::write(ctx.out.join(format!("test-command-{name}-{run}.txt")), &output.stdout);
        }
        match output {
            Ok(output) if output.status.success() => seconds.push(elapsed),
            Ok(output) => failures.push(format!(
                "run {run}: {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .find(|l| l.starts_with("FAIL"))
                    .unwrap_or_default()
            )),
            Err(error) => failures.push(format!("run {run}: {error}")),
        }
        eprintln!("bench: ansible-operator test {name} run {run}: {elapsed:.1} s");
    }
    let summary = Summary::of(&seconds);
    json!({
        "name": name,
        "runs": runs,
        "passed": seconds.len(),
        "failures": failures,
        "seconds": {"median": summary.median, "min": summary.min, "max": summary.max},
    })
}
