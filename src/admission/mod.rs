//! Admission playbooks: a watch's `validate` playbook or role run once, in Ansible check mode, for
//! each CREATE and UPDATE of its kind the API server sends to the operator's webhook, with the
//! incoming object's usual extra vars plus `ansible_operator_admission`. A failed task denies the
//! request with its message. Validation runs are not reconciles: no status, no run record, no
//! reconcile metrics, and no proxy credential (the kubeconfig they get names a token the proxy
//! refuses, so a playbook that calls the API cannot write, or read, through it).

pub mod configuration;
pub mod review;

use std::path::PathBuf;
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::Value;

use crate::mask::Secrets;
use crate::reconcile::inputs::Composer;
use crate::reconcile::{new_ident, run_spec, trusts_cr_variables, unsafe_strings, vars_input};
use crate::runner;
use crate::vars;
use crate::watches::Gvk;
pub use review::{Request, Verdict};

/// The token in a validation run's kubeconfig: no credential has it, so the proxy refuses it.
const NO_CREDENTIAL: &str = "admission-runs-have-no-credential";

/// Runs the validations of the watched kinds that have one.
pub struct Validator {
    /// The composers of the kinds with `validate`.
    kinds: Vec<Arc<Composer>>,
    /// How runs start (the warm executor, the cold one).
    runner: runner::Settings,
    /// Where validation runs' directories are made (`<runner dir>/.admission/<ident>`).
    root: PathBuf,
    /// The API proxy's port, for the kubeconfig that names no credential.
    proxy_port: u16,
    /// `--trust-cr-variables`.
    trust_cr_variables: bool,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator").field("kinds", &self.kinds.len()).finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator for the kinds among `kinds` whose watch has `validate`.
    pub fn new(
        kinds: impl IntoIterator<Item = Arc<Composer>>,
        runner: runner::Settings,
        runner_dir: PathBuf,
        proxy_port: u16,
        trust_cr_variables: bool,
    ) -> Self {
        let kinds = kinds.into_iter().filter(|c| c.watch.extensions.validate.is_some()).collect();
        Validator { kinds, runner, root: runner_dir.join(".admission"), proxy_port, trust_cr_variables }
    }

    /// The composer of a kind this validator serves.
    fn kind(&self, gvk: &Gvk) -> Option<&Arc<Composer>> {
        self.kinds.iter().find(|c| &c.watch.gvk == gvk)
    }

    /// Answers one AdmissionReview body for `gvk`: an answer always, denying on any error of ours.
    pub async fn review(&self, gvk: &Gvk, body: &Value) -> Value {
        let request = match Request::parse(body) {
            Ok(request) => request,
            Err(error) => {
                let uid = body.pointer("/request/uid").and_then(Value::as_str).unwrap_or_default();
                return review::answer(uid, &Verdict::Denied(error.to_string()));
            }
        };
        let started = std::time::Instant::now();
        let verdict = self.validate(gvk, &request).await;
        let allowed = verdict == Verdict::Allowed;
        tracing::info!(
            kind = %gvk, operation = %request.operation, allowed,
            elapsed_ms = started.elapsed().as_millis() as u64, "validated"
        );
        review::answer(&request.uid, &verdict)
    }

    async fn validate(&self, gvk: &Gvk, request: &Request) -> Verdict {
        let Some(composer) = self.kind(gvk) else {
            return Verdict::Denied(format!("the operator has no validate playbook for {gvk}"));
        };
        let watch = &composer.watch;
        let Some(validate) = &watch.extensions.validate else {
            return Verdict::Denied(format!("the operator has no validate playbook for {gvk}"));
        };
        let inputs = &composer.inputs;
        if !trusts_cr_variables(watch, self.trust_cr_variables) {
            let input = vars_input(watch, inputs.trust_cr_templates, &request.object, false);
            if let Err(reserved) = vars::check_reserved(&input) {
                return Verdict::Denied(reserved.to_string());
            }
        }
        let object: DynamicObject = match serde_json::from_value(request.object.clone()) {
            Ok(object) => object,
            Err(error) => return Verdict::Denied(format!("the object could not be read: {error}")),
        };
        let ident = new_ident();
        let mut spec = run_spec(watch, inputs, &object, &request.object, false, ident.clone(), None);
        spec.target = validate.target.clone();
        spec.dir = self.root.join(&ident);
        spec.timeout = Some(validate.timeout);
        spec.rotate_artifacts = 1;
        spec.ansible_args = check_mode(&inputs.ansible_args);
        let which = unsafe_strings(watch, inputs.trust_cr_templates);
        let admission = request.admission_var(|value| vars::wrap(value, which));
        spec.extra_vars.insert(review::ADMISSION_VAR.into(), admission);
        let verdict = match self.run(&mut spec).await {
            Ok(report) => review::verdict(&report),
            Err(error) => {
                let error = crate::logging::error_chain(&error);
                tracing::warn!(kind = %gvk, %error, "validation could not run");
                Verdict::Denied(format!("validation could not run: {error}"))
            }
        };
        let _ = std::fs::remove_dir_all(&spec.dir);
        verdict
    }

    /// Writes the kubeconfig naming no credential and runs.
    async fn run(&self, spec: &mut runner::RunSpec) -> Result<runner::Report, runner::Error> {
        let write_error = |source| runner::Error::WriteInput { dir: spec.dir.clone(), source };
        runner::fs::create_private_dir(&spec.dir).map_err(write_error)?;
        let path = spec.dir.join("kubeconfig");
        let namespace =
            spec.extra_vars["ansible_operator_meta"]["namespace"].as_str().filter(|n| !n.is_empty());
        let text = crate::proxy::kubeconfig::render(self.proxy_port, NO_CREDENTIAL, namespace);
        runner::fs::write_private(&path, text).map_err(write_error)?;
        let value = Value::from(path.display().to_string());
        spec.env_vars.insert("K8S_AUTH_KUBECONFIG".into(), value.clone());
        spec.env_vars.insert("KUBECONFIG".into(), value);
        runner::run(&self.runner, spec, None, &Arc::new(Secrets::default())).await
    }
}

/// `--ansible-args` with `--check` added: the validation runs in Ansible's check mode.
fn check_mode(ansible_args: &str) -> String {
    match runner::input_dir::cmdline(ansible_args) {
        Some(line) => format!("{line} --check"),
        None => "--check".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_runs_in_check_mode_after_the_operators_own_ansible_args() {
        assert_eq!(check_mode(""), "--check");
        assert_eq!(check_mode("'--tags \"a,b\"'"), "--tags \"a,b\" --check");
    }
}
