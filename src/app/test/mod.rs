//! `ansible-operator test`: runs scenario files against the current kubeconfig's cluster, with the
//! operator in this process on the project's watches file. Each scenario gets a fresh namespace
//! (removed after it, kept on failure with `--keep`); the CRDs are applied once first; scenarios run
//! `--parallel` at a time; the exit code is 0 only when every step of every scenario passed.

mod context;
mod manager;
mod manager_env;
mod molecule;
mod operator;
mod record;
mod report;
mod stage;
mod steps;
mod watch;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use futures::StreamExt as _;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;

use crate::cli::{Cli, Command, RunArgs, TestArgs};
use crate::scenario::{self, Action, Scenario};
use report::{Outcome, ScenarioResult, StepResult};
use stage::Stage;

/// The label on the namespaces scenarios run in: the scenario's name.
const SCENARIO_LABEL: &str = "ansible-operator.dev/test-scenario";
/// How long the CRs in a scenario's namespace may take to go (their finalizers run) once it is deleted.
const CLEANUP: Duration = Duration::from_secs(180);
/// How long a CRD may take to be established.
const ESTABLISHED: Duration = Duration::from_secs(60);

/// Runs the subcommand.
pub fn main(args: TestArgs) -> ExitCode {
    match prepare(&args) {
        Ok((scenarios, run_args, work)) => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => {
                    eprintln!("error: start the async runtime: {error}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(test(&args, scenarios, run_args, &work)) {
                Ok(true) => {
                    if args.work_dir.is_none() && !args.keep {
                        let _ = std::fs::remove_dir_all(&work);
                    }
                    ExitCode::SUCCESS
                }
                Ok(false) => {
                    println!("the operator's log and runner directory: {}", work.display());
                    ExitCode::FAILURE
                }
                Err(error) => {
                    eprintln!("error: {error:#}");
                    eprintln!("the operator's log: {}", work.join("operator.log").display());
                    ExitCode::FAILURE
                }
            }
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Reads every scenario (a broken one stops the command before anything starts), the operator's
/// flags, and makes the work directory the operator logs to.
fn prepare(args: &TestArgs) -> anyhow::Result<(Vec<Scenario>, RunArgs, PathBuf)> {
    let mut scenarios =
        scenario_files(args)?.iter().map(|file| scenario::load(file)).collect::<Result<Vec<_>, _>>()?;
    let project = std::path::absolute(project_dir(args)).context("the project's directory")?;
    for dir in &args.molecule {
        scenarios.push(scenario::molecule::load(dir, &project, args.image.as_deref())?);
    }
    let work = match &args.work_dir {
        Some(dir) => dir.clone(),
        None => {
            std::env::temp_dir().join(format!("ansible-operator-test-{}", crate::ident::Ident::generate()))
        }
    };
    crate::runner::fs::create_private_dir(&work).with_context(|| format!("create {}", work.display()))?;
    let run_args = run_args(args, &work)?;
    let log = std::fs::File::create(work.join("operator.log")).context("create the operator's log")?;
    crate::logging::init_with(&run_args.log, Mutex::new(log));
    Ok((scenarios, run_args, work))
}

/// The scenario files: those given (a directory's `*.yaml` and `*.yml`), else `tests/scenarios`
/// beside the watches file unless molecule scenarios are given.
fn scenario_files(args: &TestArgs) -> anyhow::Result<Vec<PathBuf>> {
    let paths = match (args.paths.is_empty(), args.molecule.is_empty()) {
        (true, true) => vec![project_dir(args).join("tests/scenarios")],
        _ => args.paths.clone(),
    };
    let mut files = Vec::new();
    for path in &paths {
        // What `--record` wrote beside a scenario is not one to run.
        let mut found = yaml_files(path)?;
        found.retain(|file| !file.to_string_lossy().ends_with(".recorded.yaml"));
        if found.is_empty() {
            bail!("{}: no scenario files (*.yaml, *.yml)", path.display());
        }
        files.extend(found);
    }
    Ok(files)
}

/// `path` when it is a file, else the directory's `*.yaml` and `*.yml` files in name order.
fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("read {}", path.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|file| file.extension().is_some_and(|ext| ext == "yaml" || ext == "yml"))
        .collect();
    found.sort();
    Ok(found)
}

fn project_dir(args: &TestArgs) -> PathBuf {
    args.watches_file
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// `run`'s flags for the operator: the watches file, a runner directory in `work`, the project's
/// `roles/` as the roles path (unless `ANSIBLE_ROLES_PATH` is set), every port chosen by the system,
/// console logs; then the user's flags after `--`, which win.
fn run_args(args: &TestArgs, work: &Path) -> anyhow::Result<RunArgs> {
    let mut argv: Vec<String> = vec![
        "ansible-operator".into(),
        "run".into(),
        format!("--watches-file={}", args.watches_file.display()),
        format!("--runner-dir={}", work.join("runner").display()),
        "--zap-encoder=console".into(),
    ];
    // As the scaffold's `make run`: roles from the project's `roles/` unless a path is set.
    let roles = std::path::absolute(project_dir(args).join("roles")).context("the project's roles")?;
    if std::env::var_os("ANSIBLE_ROLES_PATH").is_none() && roles.is_dir() {
        argv.push(format!("--ansible-roles-path={}", roles.display()));
    }
    for flag in
        ["--proxy-port", "--metrics-bind-address", "--health-probe-bind-address", "--api-bind-address"]
    {
        argv.push(format!("{flag}=0"));
    }
    // A free port for the metrics playbooks send (`osdk_metric` finds it in the runs' environment).
    let free = std::net::TcpListener::bind("127.0.0.1:0").and_then(|listener| listener.local_addr());
    argv.push(format!("--user-metrics-bind-address={}", free.context("find a free port")?));
    argv.extend(args.operator_args.iter().cloned());
    match Cli::try_parse_from(argv).context("the operator's flags (after --)")?.command {
        Command::Run(run) => Ok(*run),
        _ => unreachable!("parsed as `run`"),
    }
}

/// Applies the CRDs and runs the scenarios once; with `--watch`, again as their files change.
/// Whether all passed (the first time).
async fn test(
    args: &TestArgs,
    scenarios: Vec<Scenario>,
    run_args: RunArgs,
    work: &Path,
) -> anyhow::Result<bool> {
    let client =
        kube::Client::try_default().await.context("connect to the cluster of the current kubeconfig")?;
    for file in crd_files(args)? {
        install_crds(&client, &file).await?;
    }
    let (passed, targets) = pass(args, &client, &scenarios, run_args, work).await?;
    if args.watch {
        watch::watch(args, &client, scenarios, &targets, work).await?;
    }
    Ok(passed)
}

/// Runs the scenarios once: a namespace each, the operator started on them, the scenarios printed
/// as each ends, the summary (and `--junit`), the operator stopped. Whether all passed, and what
/// each watched kind runs.
async fn pass(
    args: &TestArgs,
    client: &kube::Client,
    scenarios: &[Scenario],
    run_args: RunArgs,
    work: &Path,
) -> anyhow::Result<(bool, Vec<operator::Target>)> {
    let started = Instant::now();
    let suffix = crate::ident::Ident::generate().to_string();
    let namespaces: Vec<String> = scenarios
        .iter()
        .enumerate()
        .map(|(index, scenario)| namespace_name(&scenario.name, &suffix[suffix.len() - 5..], index))
        .collect();
    let api: Api<Namespace> = Api::all(client.clone());
    for (scenario, name) in scenarios.iter().zip(&namespaces) {
        let namespace =
            json!({"metadata": {"name": name, "labels": {SCENARIO_LABEL: label_value(&scenario.name)}}});
        let namespace: Namespace = serde_json::from_value(namespace)?;
        api.create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("create namespace {name}"))?;
    }
    // A namespace where the manager is deployed (`--image`) is the manager's alone. With no other,
    // the operator here watches an empty one: its kinds and records still serve the steps.
    let mut watched: Vec<String> = scenarios
        .iter()
        .zip(&namespaces)
        .filter(|(scenario, _)| !scenario.deploys_manager())
        .map(|(_, namespace)| namespace.clone())
        .collect();
    let idle = match watched.is_empty() {
        true => {
            let name = format!("test-idle-{}", &suffix[suffix.len() - 5..]);
            let namespace: Namespace = serde_json::from_value(
                json!({"metadata": {"name": name, "labels": {SCENARIO_LABEL: "idle"}}}),
            )?;
            api.create(&PostParams::default(), &namespace)
                .await
                .with_context(|| format!("create namespace {name}"))?;
            watched.push(name.clone());
            Some(name)
        }
        false => None,
    };
    let (manifest, settings) =
        manager_env::ansible_settings(&project_dir(args), |name| std::env::var_os(name).is_some())?;
    if let Some(manifest) = manifest {
        let names: Vec<&str> = settings.iter().map(|(name, _)| name.as_str()).collect();
        tracing::info!(manifest = %manifest.display(), ?names, "the manager's Ansible settings, as deployed");
    }
    let operator = operator::start(run_args, &watched, &settings).await?;
    let (history, kinds) = (&operator.history, &operator.kinds);
    let mut results = Vec::new();
    let mut running =
        futures::stream::iter(scenarios.iter().zip(namespaces).map(|(scenario, namespace)| async move {
            run_scenario(client, history, kinds, scenario, &namespace, work, args).await
        }))
        .buffer_unordered(args.parallel.into());
    while let Some(result) = running.next().await {
        print!("{}", report::render(&result));
        results.push(result);
    }
    drop(running);
    if operator.ended() {
        println!("the operator stopped during the scenarios: see {}", work.join("operator.log").display());
    }
    let targets = operator.targets.clone();
    operator.stop().await?;
    if let Some(name) = idle {
        api.delete(&name, &DeleteParams::default())
            .await
            .with_context(|| format!("delete namespace {name}"))?;
    }
    let elapsed = started.elapsed();
    println!("{}", report::summary(&results, elapsed));
    if let Some(file) = &args.junit {
        std::fs::write(file, report::junit(&results, elapsed))
            .with_context(|| format!("write {}", file.display()))?;
    }
    Ok((results.iter().all(ScenarioResult::passed), targets))
}

async fn run_scenario(
    client: &kube::Client,
    history: &Arc<crate::history::History>,
    kinds: &[crate::api::Kind],
    scenario: &Scenario,
    namespace: &str,
    work: &Path,
    args: &TestArgs,
) -> ScenarioResult {
    let started = Instant::now();
    let dir = scenario.path.parent().unwrap_or(Path::new("."));
    let stage = Stage::new(client, history, kinds, namespace, dir, work);
    let mut steps = Vec::new();
    // When the newest step that changes something (apply, patch, delete, idempotent) started.
    let mut change = Timestamp::now();
    let mut failed = false;
    for step in &scenario.steps {
        let skipped = match &step.action {
            Action::NotHere(why) => Some(Some(why.clone())),
            _ if failed => Some(None),
            _ => None,
        };
        if let Some(why) = skipped {
            steps.push(StepResult {
                name: step.name.clone(),
                duration: Duration::ZERO,
                outcome: Outcome::Skipped(why),
            });
            continue;
        }
        if step.action.changes() {
            change = Timestamp::now();
        }
        let clock = Instant::now();
        let outcome = match stage.run(step, change).await {
            Ok(()) => Outcome::Passed,
            Err(why) => {
                failed = true;
                Outcome::Failed(why)
            }
        };
        steps.push(StepResult { name: step.name.clone(), duration: clock.elapsed(), outcome });
    }
    let context = if failed { stage.context().await } else { String::new() };
    let recorded = match args.record {
        true => Some(match stage.record(scenario).await {
            Ok((file, count)) => format!("recorded {count} object(s) in {}", file.display()),
            Err(error) => format!("not recorded: {error}"),
        }),
        false => None,
    };
    let cleanup = match (failed && args.keep, scenario.deploys_manager()) {
        (true, _) => Some(format!("namespace {namespace} kept (--keep)")),
        (false, false) => remove_namespace(&stage).await.err(),
        // The CRs go while their manager runs; then the namespace, with it, and what it made
        // outside the namespace.
        (false, true) => match remove_crs(&stage).await {
            Ok(()) => remove_namespace(&stage).await.and(stage.remove_manager().await).err(),
            Err(error) => Some(error),
        },
    };
    ScenarioResult {
        name: scenario.name.clone(),
        file: scenario.path.clone(),
        namespace: namespace.to_string(),
        steps,
        context,
        recorded,
        cleanup,
        duration: started.elapsed(),
    }
}

/// Deletes the CRs of the watched kinds in the namespace and waits until they are gone: the
/// manager deployed there finalizes them.
async fn remove_crs(stage: &Stage<'_>) -> Result<(), String> {
    let step =
        scenario::Step { name: "delete".into(), timeout: CLEANUP, action: Action::Delete(stage.crs().await) };
    stage.run(&step, Timestamp::now()).await.map_err(|error| format!("the CRs were not finalized: {error}"))
}

/// Deletes the namespace and waits until no CR of the watched kinds is left in it: those are what
/// the operator, still running, must finalize; the rest (Pods terminating) goes without it.
async fn remove_namespace(stage: &Stage<'_>) -> Result<(), String> {
    let name = stage.namespace;
    let api: Api<Namespace> = Api::all(stage.client.clone());
    if let Err(error) = api.delete(name, &DeleteParams::default()).await {
        return Err(format!("namespace {name} not removed: {error}"));
    }
    let deadline = Instant::now() + CLEANUP;
    loop {
        let left = stage.crs().await;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let names: Vec<String> = left.iter().map(scenario::name_of).collect();
            return Err(format!(
                "namespace {name}: {} still there after {}",
                names.join(", "),
                crate::go_duration::format(CLEANUP)
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The CRD files to apply: `--crds`, else the scaffold's `config/crd/bases`, else `deploy/crds`,
/// beside the watches file (neither there: none).
fn crd_files(args: &TestArgs) -> anyhow::Result<Vec<PathBuf>> {
    let project = project_dir(args);
    let paths = match args.crds.is_empty() {
        false => args.crds.clone(),
        true => ["config/crd/bases", "deploy/crds"]
            .iter()
            .map(|dir| project.join(dir))
            .find(|dir| dir.is_dir())
            .into_iter()
            .collect(),
    };
    let mut files = Vec::new();
    for path in paths {
        files.extend(yaml_files(&path)?);
    }
    Ok(files)
}

/// Server-side applies the file's CRDs and waits until each is established.
async fn install_crds(client: &kube::Client, file: &Path) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for document in scenario::objects_file(file)? {
        if document["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let name = document["metadata"]["name"].as_str().unwrap_or_default().to_string();
        api.patch(&name, &PatchParams::apply("ansible-operator-test").force(), &Patch::Apply(&document))
            .await
            .with_context(|| format!("{}: apply CRD {name}", file.display()))?;
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(ESTABLISHED, established).await.with_context(|| {
            format!("CRD {name} not established after {}", crate::go_duration::format(ESTABLISHED))
        })??;
    }
    Ok(())
}

/// `test-<scenario>-<suffix><index>`, within a namespace name's 63 characters.
fn namespace_name(scenario: &str, suffix: &str, index: usize) -> String {
    let cleaned: String = scenario
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let tail = format!("-{suffix}{index}");
    let room = 63 - "test-".len() - tail.len();
    let head: String = cleaned.chars().take(room).collect();
    format!("test-{}{tail}", head.trim_matches('-'))
}

/// The scenario's name as a label value (63 characters of letters, digits, `-`, `_`, `.`).
fn label_value(name: &str) -> String {
    let value: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
        .take(63)
        .collect();
    value.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_valid_names_unique_per_scenario() {
        assert_eq!(namespace_name("Scale_Up", "12345", 0), "test-scale-up-123450");
        let long = namespace_name(&"x".repeat(100), "12345", 12);
        assert_eq!(long.len(), 63);
        assert!(long.ends_with("-1234512"));
        assert_eq!(label_value("scale up!"), "scale_up");
    }

    #[test]
    fn the_operators_flags_come_after_the_defaults_and_win() {
        let parse = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().command {
            Command::Test(args) => *args,
            other => panic!("{other:?}"),
        };
        let args =
            parse(&["ansible-operator", "test", "--", "--proxy-port=9999", "--max-concurrent-reconciles=3"]);
        let run = run_args(&args, Path::new("/tmp/work")).unwrap();
        assert_eq!(run.proxy_port, 9999);
        assert_eq!(run.max_concurrent_reconciles, Some(3));
        assert_eq!(run.runner_dir, Path::new("/tmp/work/runner"));
        assert_eq!(run.metrics_bind_address, "0");
        let error = run_args(&parse(&["ansible-operator", "test", "--", "--no-such-flag"]), Path::new("/w"));
        assert!(format!("{:#}", error.unwrap_err()).contains("--no-such-flag"));
    }
}
