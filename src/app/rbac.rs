//! `ansible-operator rbac`: loads the watches as `run` does, renders their RBAC and prints it or
//! writes it as kustomize files; warnings (a watch without `permissions`) go to stderr. With
//! `--from-history`, prints the `permissions:` each kind's recorded runs call for instead.

use std::process::ExitCode;

use super::wiring;
use crate::cli::RbacArgs;
use crate::rbac::{self, Settings};
use crate::watches::{self, Defaults};

/// Runs `rbac` and returns the exit code.
pub(super) fn main(args: &RbacArgs) -> ExitCode {
    match rbac(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn rbac(args: &RbacArgs) -> anyhow::Result<()> {
    let (env, _) = wiring::paths_environment(&args.ansible_roles_path, &args.ansible_collections_path)?;
    let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 0 };
    let loaded = watches::load(&args.watches_file, &defaults, &env)?;
    let file = args.watches_file.display().to_string();
    for warning in &loaded.warnings {
        eprintln!("warning: {file}: {warning}");
    }
    if args.from_history {
        let mut namespaces = watches::watch_namespaces(Some(&args.namespace.join(",")));
        if !namespaces.is_empty() && !namespaces.contains(&args.operator_namespace) {
            // The records of cluster-scoped CRs are kept in the operator's namespace.
            namespaces.push(args.operator_namespace.clone());
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let proposal = runtime.block_on(async {
            let client = kube::Client::try_default().await?;
            anyhow::Ok(rbac::from_history::propose(&client, &loaded.watches, &namespaces).await?)
        })?;
        print!("{proposal}");
        return Ok(());
    }
    let kinds = match &args.crds {
        Some(dir) => rbac::crds::read(dir)?,
        None => rbac::Kinds::default(),
    };
    let settings = Settings {
        watches_file: file,
        operator_namespace: args.operator_namespace.clone(),
        service_account: args.service_account.clone(),
        namespaces: watches::watch_namespaces(Some(&args.namespace.join(","))),
        kind_identities: args.kind_identities,
        webhook_configuration_name: args.webhook_configuration_name.clone(),
        run_history_limit: args.run_history_limit,
        inject_owner_ref: args.inject_owner_ref,
    };
    let rendered = rbac::render(&loaded.watches, &kinds, &settings);
    for warning in &rendered.warnings {
        eprintln!("warning: {warning}");
    }
    match &args.output_dir {
        Some(dir) => {
            rbac::files::write(dir, &rendered)?;
            eprintln!("wrote {} files to {}", rendered.files.len(), dir.display());
        }
        None => print!("{}", rbac::files::stream(&rendered)?),
    }
    Ok(())
}
