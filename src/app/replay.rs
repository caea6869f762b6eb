//! `ansible-operator replay`: a CR's run composed as the operator composes it (the CR as it is now,
//! or as a recorded run saw it), written to a directory, printed as an `ansible-runner` command, and
//! with `--execute` run once with the user's kubeconfig.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use serde_json::Value;

use super::version::RUNNER;
use super::wiring;
use crate::cli::ReplayArgs;
use crate::history::record::{self, RunInput};
use crate::kubeapi::with_timeout;
use crate::reconcile::Inputs;
use crate::reconcile::inputs::{self, shell_line};
use crate::watches::{self, Defaults, Watch};

/// Runs `replay` and returns the exit code: ansible-runner's with `--execute`.
pub(super) fn main(args: ReplayArgs) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(replay(args)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn replay(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let (env, playbook_env) =
        wiring::paths_environment(&args.shape.ansible_roles_path, &args.shape.ansible_collections_path)?;
    let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: args.shape.ansible_verbosity };
    let loaded = watches::load(&args.shape.watches_file, &defaults, &env)?;
    let watch = pick(loaded.watches, &args)?;
    let (namespace, name) = match args.cr.split_once('/') {
        Some((namespace, name)) => (Some(namespace.to_string()), name.to_string()),
        None => (None, args.cr.clone()),
    };
    let client = kube::Client::try_default().await.context("connect with your kubeconfig")?;
    let (resource, capabilities) = discovery::pinned_kind(&client, &watch.gvk.to_kube())
        .await
        .with_context(|| format!("discover {}", watch.gvk))?;
    let namespace = namespace.filter(|_| capabilities.scope == Scope::Namespaced);
    let (object, finalizing, what) = match &args.run {
        Some(run) => {
            let record = read_record(&client, namespace.as_deref(), &name, run).await?;
            // A record a tenant wrote with some other ident is not replayed: its ident is refused
            // here as the API refuses it, though the replay names nothing after it.
            let ident = record::ident_of(&record)?;
            let input = RunInput::of_record(&record)?;
            (input.object, input.finalizing, format!("run {ident} of"))
        }
        None => {
            let api: Api<DynamicObject> = match &namespace {
                Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
                None => Api::all_with(client.clone(), &resource),
            };
            let cr = with_timeout(api.get(&name))
                .await
                .with_context(|| format!("read {} {}", watch.gvk.kind, args.cr))?;
            let finalizing = cr.metadata.deletion_timestamp.is_some() && watch.finalizer.is_some();
            (serde_json::to_value(&cr)?, finalizing, "the current state of".to_string())
        }
    };
    let inputs = Inputs {
        runner_dir: PathBuf::new(),
        ansible_args: args.shape.ansible_args.clone(),
        inventory: wiring::inventory(&env),
        role_skip_facts: wiring::role_skip_facts(&env),
        playbook_env,
        trust_cr_templates: args.shape.trust_cr_templates,
        trust_cr_variables: args.shape.trust_cr_variables,
        run_timeout: std::time::Duration::ZERO,
    };
    let dir = match &args.output {
        Some(dir) => dir.clone(),
        None => PathBuf::from(format!("replay-{name}")),
    };
    let dir = std::path::absolute(&dir).with_context(|| format!("resolve {}", dir.display()))?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("replace {}", dir.display()))?;
    }
    let ident = format!("replay-{}", jiff::Timestamp::now().as_second());
    let written = inputs::write(&watch, &inputs, &object, finalizing, ident, &dir)?;
    let report = |line: String| if args.execute { eprintln!("{line}") } else { println!("{line}") };
    report(format!("Wrote the inputs of {what} {} {} to {}", watch.gvk.kind, args.cr, dir.display()));
    report(format!("Run them with:\n  {}", shell_line(&written.command)));
    for note in &written.notes {
        report(format!("Note: {note}"));
    }
    if !args.execute {
        return Ok(ExitCode::SUCCESS);
    }
    execute(&written.command).await
}

/// The watch entry `args` pick: the only one, or the one their kind, group and version match.
fn pick(watches: Vec<Watch>, args: &ReplayArgs) -> anyhow::Result<Watch> {
    let matches = |value: &str, wanted: &Option<String>| wanted.as_deref().is_none_or(|w| w == value);
    let mut found: Vec<Watch> = watches
        .into_iter()
        .filter(|w| {
            matches(&w.gvk.kind, &args.kind)
                && matches(&w.gvk.group, &args.group)
                && matches(&w.gvk.version, &args.version)
        })
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => bail!(
            "no watch entry in {} matches the --kind, --group and --version given",
            args.shape.watches_file.display()
        ),
        _ => {
            let names: Vec<String> = found.iter().map(|w| w.gvk.to_string()).collect();
            bail!(
                "{} watch entries match ({}): pick one with --kind, --group or --version",
                names.len(),
                names.join(", ")
            )
        }
    }
}

/// The `AnsibleRun` `run` of the CR: by its name, else by its ident.
async fn read_record(
    client: &kube::Client,
    namespace: Option<&str>,
    name: &str,
    run: &str,
) -> anyhow::Result<Value> {
    let gvk = GroupVersionKind::gvk(record::GROUP, record::VERSION, record::KIND);
    let resource = ApiResource::from_gvk_with_plural(&gvk, record::PLURAL);
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    for candidate in [run.to_string(), format!("{name}-{run}")] {
        let found = with_timeout(api.get_opt(&candidate))
            .await
            .with_context(|| format!("read run record {candidate}"))?;
        if let Some(found) = found {
            let found = serde_json::to_value(found)?;
            if found["spec"]["owner"]["name"] == name {
                return Ok(found);
            }
        }
    }
    bail!("no run record {run} of {name} (kubectl get {} lists them)", record::PLURAL)
}

/// Runs the command with this process's environment (the user's kubeconfig), its output on ours.
async fn execute(command: &[String]) -> anyhow::Result<ExitCode> {
    let mut process = tokio::process::Command::new(RUNNER);
    process.args(&command[1..]);
    if let Some(kubeconfig) = std::env::var_os("KUBECONFIG") {
        // kubernetes.core reads this one first, as the operator's runs set it.
        process.env("K8S_AUTH_KUBECONFIG", kubeconfig);
    }
    let status = process.status().await.with_context(|| format!("start {RUNNER}"))?;
    Ok(ExitCode::from(status.code().map_or(1, |code| u8::try_from(code).unwrap_or(1))))
}
