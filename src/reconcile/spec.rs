//! What a run is given: its `RunSpec` (target, vars, environment, verbosity, inventory, timeout)
//! from the watch, the settings and the CR, and the directory it runs in.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::DynamicObject;
use kube::{Resource, ResourceExt};
use serde_json::{Map, Value};

use super::annotations::{self, Bounded};
use super::context::Settings;
use crate::ident::Ident;
use crate::remote::Remote;
use crate::runner::{Inventory, RunSpec};
use crate::vars::{self, VarsInput};
use crate::watches::Watch;

/// The zap logger of these lines: `reconcile`, as before they moved into this file.
const TARGET: &str = "ansible_operator::reconcile";

/// What a run's inputs are composed from besides the watch and the CR: the process-wide flags and
/// environment. The operator takes them from its [`Settings`]; `ansible-operator replay` from its
/// own flags, so that both compose a run with [`run_spec`] alone.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Where the per-CR data directories live.
    pub runner_dir: PathBuf,
    /// `--ansible-args`.
    pub ansible_args: String,
    /// Inventory for every run.
    pub inventory: Inventory,
    /// `ANSIBLE_GATHERING=explicit`: skip facts in role mode.
    pub role_skip_facts: bool,
    /// Further environment for playbooks (`--ansible-roles-path`, `--ansible-collections-path`).
    pub playbook_env: Vec<(String, String)>,
    /// `--trust-cr-templates`.
    pub trust_cr_templates: bool,
    /// `--trust-cr-variables`.
    pub trust_cr_variables: bool,
    /// `--ansible-run-timeout`.
    pub run_timeout: Duration,
}

impl Settings {
    /// The settings a run's inputs are composed from.
    pub fn inputs(&self) -> Inputs {
        Inputs {
            runner_dir: self.runner_dir.clone(),
            ansible_args: self.ansible_args.clone(),
            inventory: self.inventory.clone(),
            role_skip_facts: self.role_skip_facts,
            playbook_env: self.playbook_env.clone(),
            trust_cr_templates: self.trust_cr_templates,
            trust_cr_variables: self.trust_cr_variables,
            run_timeout: self.run_timeout,
        }
    }
}

/// The spec of a run of `object` (`object_json` is its JSON): the finalizer's target when
/// `finalizing`, else the watch's. The one place a run's inputs are composed: the operator's runs
/// and `ansible-operator replay` both come here.
pub fn run_spec(
    watch: &Watch,
    settings: &Inputs,
    object: &DynamicObject,
    object_json: &Value,
    finalizing: bool,
    ident: String,
    remote: Option<&Remote>,
) -> RunSpec {
    let finalizer = watch.finalizer.as_ref().filter(|_| finalizing);
    let target = finalizer.and_then(|f| f.target.clone()).unwrap_or_else(|| watch.target.clone());
    if !object_json["spec"].is_object() {
        tracing::debug!(target: TARGET, "spec was not found for CR");
    }
    let input = vars_input(watch, settings.trust_cr_templates, object_json, finalizing);
    let extra_vars = vars::extra_vars(&input);
    let env_vars: Map<String, Value> = settings
        .playbook_env
        .iter()
        .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
        .collect();
    let annotations = object.annotations();
    RunSpec {
        dir: runner_dir(&settings.runner_dir, watch, object),
        target,
        extra_vars,
        env_vars,
        verbosity: bounded(
            annotations::VERBOSITY,
            annotations::verbosity(annotations, watch.ansible_verbosity),
            watch.ansible_verbosity,
        ),
        rotate_artifacts: bounded(
            annotations::MAX_RUNNER_ARTIFACTS,
            annotations::max_runner_artifacts(annotations, watch.max_runner_artifacts),
            watch.max_runner_artifacts,
        ),
        ident,
        ansible_args: settings.ansible_args.clone(),
        inventory: match remote.and_then(|r| r.inventory.as_ref()) {
            Some((text, _)) => Inventory::Rendered(text.clone()),
            None => settings.inventory.clone(),
        },
        role_skip_facts: settings.role_skip_facts,
        ssh: remote.map(|r| r.ssh.clone()),
        executor: watch.extensions.executor,
        timeout: watch.extensions.run_timeout(settings.run_timeout),
        env_removed: Vec::new(),
    }
}

/// An annotation's value within its bounds, else `default`; a value out of bounds is logged.
fn bounded<T: Copy + std::fmt::Display>(
    annotation: &'static str,
    value: Option<Bounded<T>>,
    default: T,
) -> T {
    let Some(value) = value else { return default };
    if let Some(asked) = value.asked {
        tracing::warn!(
            target: TARGET,
            annotation, asked = %asked, using = %value.value, "annotation beyond what the watch allows: using the watch's limit"
        );
    }
    value.value
}

/// What the vars of a run of `object_json` are built from.
pub fn vars_input<'a>(
    watch: &'a Watch,
    trust_cr_templates: bool,
    object_json: &'a Value,
    finalizing: bool,
) -> VarsInput<'a> {
    let finalizer = watch.finalizer.as_ref().filter(|_| finalizing);
    VarsInput {
        object: object_json,
        group: &watch.gvk.group,
        kind: &watch.gvk.kind,
        snake_case_parameters: watch.snake_case_parameters,
        unsafe_strings: unsafe_strings(watch, trust_cr_templates),
        watch_vars: &watch.vars,
        finalizer_vars: finalizer.map(|f| &f.vars),
    }
}

/// Whether a watch lets its CRs' spec keys set Ansible's own variables (`trustCRVariables`, else
/// the flag), as upstream does.
pub fn trusts_cr_variables(watch: &Watch, trust_by_default: bool) -> bool {
    watch.extensions.trust_cr_variables.unwrap_or(trust_by_default)
}

/// The refusal every route from a CR toward Ansible applies (a run, a plan, a validation, a
/// replay): spec keys that would set Ansible's own variables, unless the watch (or
/// `--trust-cr-variables`) trusts its CRs' variables.
pub fn check_reserved(
    watch: &Watch,
    trust_cr_templates: bool,
    trust_cr_variables: bool,
    object_json: &Value,
    finalizing: bool,
) -> Result<(), vars::ReservedVariables> {
    if trusts_cr_variables(watch, trust_cr_variables) {
        return Ok(());
    }
    vars::check_reserved(&vars_input(watch, trust_cr_templates, object_json, finalizing))
}

/// Which CR strings a watch passes as unsafe text: all, unless the watch trusts its CRs'
/// templates (`trustCRTemplates`, else the flag) and does not also ask for `markUnsafe`.
pub fn unsafe_strings(watch: &Watch, trust_by_default: bool) -> vars::UnsafeStrings {
    if !watch.mark_unsafe && watch.extensions.trust_cr_templates.unwrap_or(trust_by_default) {
        vars::UnsafeStrings::None
    } else {
        vars::UnsafeStrings::All
    }
}

/// `<runner dir>/<group>/<version>/<kind>/<namespace>/<name>`, as upstream (no namespace segment
/// for cluster-scoped CRs).
pub fn runner_dir<K: Resource>(root: &Path, watch: &Watch, object: &K) -> PathBuf {
    let gvk = &watch.gvk;
    let mut dir = root.join(&gvk.group).join(&gvk.version).join(&gvk.kind);
    if let Some(namespace) = object.namespace() {
        dir.push(namespace);
    }
    dir.join(object.name_any())
}

/// The data directory of a plan: its own, so a plan never shares a CR's directory (and its
/// extra vars, command line and artifacts) with a real run of it. `.plans` is no API group.
pub fn plan_dir(settings: &Settings, ident: &str) -> PathBuf {
    settings.runner_dir.join(".plans").join(ident)
}

/// `--ansible-args` of a plan: the operator's, then check mode with diffs.
pub fn plan_args(ansible_args: &str) -> String {
    let args = crate::runner::input_dir::cmdline(ansible_args).unwrap_or_default();
    format!("{args} --check --diff").trim_start().to_string()
}

/// A unique run id: decimal, like upstream's non-negative random int63 (see [`Ident`]).
pub fn new_ident() -> String {
    Ident::generate().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_runs_in_check_mode_with_diffs_after_the_operators_own_args() {
        assert_eq!(plan_args(""), "--check --diff");
        assert_eq!(plan_args("--tags a"), "--tags a --check --diff");
        assert_eq!(
            plan_args("'--tags \"a,b\"'"),
            "--tags \"a,b\" --check --diff",
            "outer quotes stripped first"
        );
    }
}
