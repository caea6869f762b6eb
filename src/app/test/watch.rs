//! `--watch`: after the first run, the scenarios' files and what the watched kinds run (their
//! playbooks and roles, the project's `roles/` and `playbooks/`) are watched. A change runs again
//! the scenarios it touches, each in a fresh namespace with the operator started anew on them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use notify::{RecursiveMode, Watcher as _};
use tokio::signal::unix::{SignalKind, signal};

use super::operator::Target;
use crate::cli::TestArgs;
use crate::scenario::{self, Scenario};
use crate::watches;

/// How long after a change the others of the same save are taken with it.
const SETTLE: Duration = Duration::from_millis(300);

/// Watches until interrupted.
pub(super) async fn watch(
    args: &TestArgs,
    client: &kube::Client,
    mut scenarios: Vec<Scenario>,
    targets: &[Target],
    work: &Path,
) -> anyhow::Result<()> {
    let project = std::path::absolute(super::project_dir(args)).context("the project's directory")?;
    let (sender, mut changes) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && !event.kind.is_access()
        {
            let _ = sender.send(event.paths);
        }
    })
    .context("watch files")?;
    let watched = watched_paths(&project, &scenarios, targets);
    for path in &watched {
        watcher.watch(path, RecursiveMode::Recursive).with_context(|| format!("watch {}", path.display()))?;
    }
    let listed: Vec<String> = watched.iter().map(|path| shown(path, &project)).collect();
    println!("watching {}: a change runs the scenarios it touches again (Ctrl-C stops)", listed.join(", "));
    // Made once, so a Ctrl-C during a run is seen when it ends.
    let mut interrupt = signal(SignalKind::interrupt()).context("listen for Ctrl-C")?;
    loop {
        let mut changed = tokio::select! {
            changed = changes.recv() => match changed {
                Some(changed) => changed,
                None => return Ok(()),
            },
            _ = interrupt.recv() => return Ok(()),
        };
        // One save is several events: those of the next moment go with it.
        tokio::time::sleep(SETTLE).await;
        while let Ok(more) = changes.try_recv() {
            changed.extend(more);
        }
        let changed: BTreeSet<PathBuf> = changed.into_iter().filter(|path| !ignored(path, work)).collect();
        let picked = touched(&scenarios, targets, &project, &args.watches_file, &changed);
        if picked.is_empty() {
            continue;
        }
        let mut again = Vec::new();
        for index in picked {
            match reload(&scenarios[index], &project, args.image.as_deref()) {
                Ok(read) => {
                    scenarios[index] = read.clone();
                    again.push(read);
                }
                Err(error) => println!("{error}"),
            }
        }
        let changed: Vec<String> = changed.iter().map(|path| shown(path, &project)).collect();
        let names: Vec<&str> = again.iter().map(|scenario| scenario.name.as_str()).collect();
        println!("\n{} changed: running {} again", changed.join(", "), names.join(", "));
        if again.is_empty() {
            continue;
        }
        let run_args = super::run_args(args, work)?;
        super::pass(args, client, &again, run_args, work).await?;
    }
}

/// The scenario read again from its file (or molecule directory).
fn reload(scenario: &Scenario, project: &Path, image: Option<&str>) -> Result<Scenario, scenario::Error> {
    match scenario.is_molecule() {
        true => scenario::molecule::load(&scenario.path, project, image),
        false => scenario::load(&scenario.path),
    }
}

/// The directories of the scenarios, the project's `roles/` and `playbooks/`, and what each kind
/// runs; none inside another.
fn watched_paths(project: &Path, scenarios: &[Scenario], targets: &[Target]) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> =
        scenarios.iter().map(|scenario| scenario_dir(scenario).to_path_buf()).collect();
    paths.extend(["roles", "playbooks"].map(|dir| project.join(dir)));
    paths.extend(targets.iter().flat_map(|target| target.runs.iter().map(|run| run.path().to_path_buf())));
    let mut paths: Vec<PathBuf> = paths
        .into_iter()
        .filter(|path| path.exists())
        .filter_map(|path| std::path::absolute(path).ok())
        .collect();
    paths.sort();
    paths.dedup();
    let all = paths.clone();
    paths.retain(|path| !all.iter().any(|other| other != path && path.starts_with(other)));
    paths
}

/// Where a scenario's own files are: a scenario file's directory, a molecule scenario's.
fn scenario_dir(scenario: &Scenario) -> &Path {
    match scenario.is_molecule() {
        true => &scenario.path,
        false => scenario.path.parent().unwrap_or(Path::new(".")),
    }
}

/// Changes that are not the author's: the command's own work, what `--record` writes, editors'
/// and Python's leftovers.
fn ignored(path: &Path, work: &Path) -> bool {
    let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
    path.starts_with(work)
        || name.ends_with(".recorded.yaml")
        || name == "recorded.yaml"
        || name.ends_with('~')
        || name.ends_with(".swp")
        || name.ends_with(".pyc")
        || path.components().any(|part| part.as_os_str() == "__pycache__")
}

/// The scenarios (their indexes) the changed paths touch:
/// - a scenario's own file, or a file beside it that is no other scenario's (what it applies);
/// - the watches file: every scenario;
/// - a playbook or role a kind runs, or what a playbook may import (beside it, or under the
///   project's `roles/`): the scenarios that name that kind; a molecule scenario names them all.
fn touched(
    scenarios: &[Scenario],
    targets: &[Target],
    project: &Path,
    watches_file: &Path,
    changed: &BTreeSet<PathBuf>,
) -> Vec<usize> {
    let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let files: Vec<PathBuf> = scenarios.iter().map(|scenario| absolute(&scenario.path)).collect();
    let watches_file = absolute(watches_file);
    let roles = project.join("roles");
    let runs = |target: &Target, path: &Path| {
        target.runs.iter().any(|run| match run {
            watches::Target::Role(dir) => path.starts_with(dir),
            watches::Target::Playbook(file) => {
                path == file
                    || file.parent().is_some_and(|dir| path.starts_with(dir))
                    || path.starts_with(&roles)
            }
        })
    };
    let mut picked = Vec::new();
    for (index, scenario) in scenarios.iter().enumerate() {
        let dir = absolute(scenario_dir(scenario));
        let kinds: BTreeSet<(String, String)> = scenario
            .steps
            .iter()
            .flat_map(|step| step.action.objects())
            .map(|object| {
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let group = api_version.rsplit_once('/').map(|(group, _)| group).unwrap_or_default();
                (group.to_string(), object["kind"].as_str().unwrap_or_default().to_string())
            })
            .collect();
        let molecule = scenario.is_molecule();
        let names =
            |target: &Target| molecule || kinds.contains(&(target.group.clone(), target.kind.clone()));
        let touches = |path: &PathBuf| {
            *path == files[index]
                || (path.starts_with(&dir) && !files.contains(path))
                || *path == watches_file
                || targets.iter().any(|target| names(target) && runs(target, path))
        };
        if changed.iter().any(touches) {
            picked.push(index);
        }
    }
    picked
}

/// `path` relative to the project when it is inside it.
fn shown(path: &Path, project: &Path) -> String {
    path.strip_prefix(project).unwrap_or(path).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::molecule::Molecule;
    use crate::scenario::{Action, Step};
    use serde_json::json;

    fn scenario(path: &str, kind: &str) -> Scenario {
        let object =
            json!({"apiVersion": "cache.example.com/v1alpha1", "kind": kind, "metadata": {"name": "x"}});
        let step = Step {
            name: "apply".into(),
            timeout: Duration::from_secs(1),
            action: Action::Apply(vec![object]),
        };
        Scenario { name: path.into(), path: PathBuf::from(path), steps: vec![step] }
    }

    fn molecule(dir: PathBuf) -> Scenario {
        let molecule = Molecule {
            dir: dir.clone(),
            project: dir.clone(),
            config: String::new(),
            files: Vec::new(),
            image: None,
        };
        let step = Step {
            name: "verify.yml".into(),
            timeout: Duration::from_secs(1),
            action: Action::Molecule(molecule.into()),
        };
        Scenario { name: "molecule-default".into(), path: dir, steps: vec![step] }
    }

    #[test]
    fn a_change_touches_its_scenario_and_the_scenarios_of_the_kinds_that_run_it() {
        let project = std::env::temp_dir().join(format!("watch-test-{}", std::process::id()));
        for dir in ["roles/memcached/tasks", "playbooks", "tests/scenarios/files", "molecule/default"] {
            std::fs::create_dir_all(project.join(dir)).unwrap();
        }
        std::fs::write(project.join("playbooks/backup.yml"), "- hosts: localhost\n").unwrap();
        let at = |path: &str| project.join(path);
        let scenarios = [
            scenario(at("tests/scenarios/memcached.yaml").to_str().unwrap(), "Memcached"),
            scenario(at("tests/scenarios/backup.yaml").to_str().unwrap(), "Backup"),
            molecule(at("molecule/default")),
        ];
        let targets = [
            Target {
                group: "cache.example.com".into(),
                kind: "Memcached".into(),
                runs: vec![watches::Target::Role(at("roles/memcached"))],
            },
            Target {
                group: "cache.example.com".into(),
                kind: "Backup".into(),
                runs: vec![watches::Target::Playbook(at("playbooks/backup.yml"))],
            },
        ];
        let touched = |paths: &[&str]| {
            let changed = paths.iter().map(|path| at(path)).collect();
            touched(&scenarios, &targets, &project, &at("watches.yaml"), &changed)
        };
        assert_eq!(touched(&["tests/scenarios/memcached.yaml"]), [0]);
        assert_eq!(touched(&["tests/scenarios/files/cr.yaml"]), [0, 1]);
        // The role's kind, the playbook's (it may import the role), and molecule's.
        assert_eq!(touched(&["roles/memcached/tasks/main.yml"]), [0, 1, 2]);
        assert_eq!(touched(&["playbooks/backup.yml"]), [1, 2]);
        assert_eq!(touched(&["molecule/default/verify.yml"]), [2]);
        assert_eq!(touched(&["watches.yaml"]), [0, 1, 2]);
        assert!(touched(&["README.md"]).is_empty());
        let watched = watched_paths(&project, &scenarios, &targets);
        let watched: Vec<&Path> = watched.iter().map(|path| path.strip_prefix(&project).unwrap()).collect();
        assert_eq!(
            watched,
            [
                Path::new("molecule/default"),
                Path::new("playbooks"),
                Path::new("roles"),
                Path::new("tests/scenarios")
            ]
        );
        assert!(ignored(&at("tests/scenarios/memcached.recorded.yaml"), Path::new("/tmp/work")));
        std::fs::remove_dir_all(&project).unwrap();
    }
}
