//! Admission playbooks: a watch's `validate` playbook or role run once, in Ansible check mode, for
//! each CREATE and UPDATE of its kind the API server sends to the operator's webhook, with the
//! incoming object's usual extra vars plus `ansible_operator_admission`. A failed task denies the
//! request with its message. Validation runs are not reconciles: no status, no run record, no
//! reconcile metrics. Their proxy credential is a plan's: a playbook may read through it (to
//! compare with other objects, say), every write is a server-side dry run, and what it reads from
//! Secrets is masked in the message it denies with. On the warm executor a validation's tasks that
//! never leave the controller (`assert`, `fail`, `debug`, `set_fact`) run in its playbook process,
//! not in a fork each (`worker/ansible_operator_worker/inline_tasks.py`).

pub mod configuration;
pub mod review;

use std::path::PathBuf;
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::Value;

use kube::ResourceExt;

use crate::proxy::Proxy;
use crate::proxy::credentials::Grant;
use crate::proxy::owner::Owner;
use crate::reconcile::inputs::Composer;
use crate::reconcile::{check_reserved, new_ident, plan_args, run_spec, unsafe_strings};
use crate::runner;
use crate::vars;
use crate::watches::Gvk;
pub use review::{Request, Verdict};

/// Runs the validations of the watched kinds that have one.
pub struct Validator {
    /// The composers of the kinds with `validate`.
    kinds: Vec<Arc<Composer>>,
    /// How runs start (the warm executor, the cold one).
    runner: runner::Settings,
    /// Where validation runs' directories are made (`<runner dir>/.admission/<ident>`).
    root: PathBuf,
    /// The API proxy, which issues each run its plan-only credential.
    proxy: Arc<Proxy>,
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
        proxy: Arc<Proxy>,
    ) -> Self {
        let kinds = kinds.into_iter().filter(|c| c.watch.extensions.validate.is_some()).collect();
        Validator { kinds, runner, root: runner_dir.join(".admission"), proxy }
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
        let trust = (inputs.trust_cr_templates, inputs.trust_cr_variables);
        if let Err(reserved) = check_reserved(watch, trust.0, trust.1, &request.object, false) {
            return Verdict::Denied(reserved.to_string());
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
        spec.ansible_args = plan_args(&inputs.ansible_args);
        // The API server waits for the answer: an assert need not wait for a fork.
        spec.inline_tasks = true;
        let which = unsafe_strings(watch, inputs.trust_cr_templates);
        let admission = request.admission_var(|value| vars::wrap(value, which));
        spec.extra_vars.insert(review::ADMISSION_VAR.into(), admission);
        let verdict = match self.run(gvk, &object, &mut spec).await {
            Ok(report) => review::verdict(&report),
            Err(error) => {
                let error = crate::logging::error_chain(&error);
                tracing::warn!(kind = %gvk, %error, "validation could not run");
                Verdict::Denied(format!("validation could not run: {error}"))
            }
        };
        // The answer does not wait for the run's files to go (about a millisecond for a short play).
        let dir = spec.dir;
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(dir);
        });
        verdict
    }

    /// Issues the run a plan-only credential, writes its kubeconfig and runs.
    async fn run(
        &self,
        gvk: &Gvk,
        object: &DynamicObject,
        spec: &mut runner::RunSpec,
    ) -> Result<runner::Report, runner::Error> {
        let dir = spec.dir.clone();
        let write_error = |source| runner::Error::WriteInput { dir: dir.clone(), source };
        let namespace = object.namespace();
        let owner = Owner {
            gvk: gvk.clone(),
            name: object.name_any(),
            uid: object.uid().unwrap_or_default(),
            namespace: namespace.clone(),
            shard_label: None,
        };
        let issued = self.proxy.credentials().issue(Grant::plan(owner)).map_err(write_error)?;
        let token = &issued.token;
        crate::proxy::kubeconfig::install(spec, self.proxy.port(), token, namespace.as_deref())
            .map_err(write_error)?;
        runner::run(&self.runner, spec, None, &issued.grant.secrets).await
    }
}
