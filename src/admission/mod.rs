//! Admission playbooks: a watch's `validate` playbook or role run once, in Ansible check mode, for
//! each CREATE and UPDATE of its kind the API server sends to the operator's webhook, with the
//! incoming object's usual extra vars plus `ansible_operator_admission`. A failed task denies the
//! request with its message. Validation runs are not reconciles: no status, no run record, no
//! reconcile metrics. Their proxy credential is a plan's: a playbook may read through it (to
//! compare with other objects, say), every write is a server-side dry run, and what it reads from
//! Secrets is masked in the message it denies with. A watch's `convert` playbook answers the CRD's
//! conversion webhook in the same lane ([`converter`]).

pub mod configuration;
pub mod conversion;
pub mod converter;
pub mod review;

use std::path::PathBuf;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::proxy::Proxy;
use crate::proxy::owner::Owner;
use crate::reconcile::inputs::Composer;
use crate::reconcile::{check_reserved, new_ident, plan_args, run_spec, unsafe_strings};
use crate::run::{Acting, Door, Launch, Permit};
use crate::vars;
use crate::watches::Gvk;
pub use converter::Converter;
pub use review::{Request, Verdict};

/// Runs the validations of the watched kinds that have one.
pub struct Validator {
    /// The composers of the kinds with `validate`, with their resource (plural).
    kinds: Vec<(Arc<Composer>, String)>,
    /// The door runs go through: a validation takes a permit of its lane there.
    door: Arc<Door>,
    /// Where validation runs' directories are made (`<runner dir>/.admission/<ident>`).
    root: PathBuf,
    /// The API proxy, which issues each run its dry-run credential.
    proxy: Arc<Proxy>,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator").field("kinds", &self.kinds.len()).finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator for the kinds among `kinds` (with their plural) whose watch has `validate`.
    pub fn new(
        kinds: impl IntoIterator<Item = (Arc<Composer>, String)>,
        door: Arc<Door>,
        runner_dir: PathBuf,
        proxy: Arc<Proxy>,
    ) -> Self {
        let kinds = kinds.into_iter().filter(|(c, _)| c.watch.extensions.validate.is_some()).collect();
        Validator { kinds, door, root: runner_dir.join(".admission"), proxy }
    }

    /// The composer of a kind this validator serves.
    fn kind(&self, gvk: &Gvk) -> Option<&(Arc<Composer>, String)> {
        self.kinds.iter().find(|(c, _)| &c.watch.gvk == gvk)
    }

    /// Answers one AdmissionReview body for `gvk`: an answer always, denying on any error of ours.
    /// A body is read in full only for a kind this validator serves, and only with a slot of the
    /// validation lane: whoever reaches the port may send one.
    pub async fn review(&self, gvk: &Gvk, body: &[u8]) -> Value {
        let deny = |message: String| review::answer(&review::uid_of(body), &Verdict::Denied(message));
        let Some((composer, plural)) = self.kind(gvk) else {
            return deny(format!("the operator has no validate playbook for {gvk}"));
        };
        // A review may wait for a slot half of the time the API server waits for its answer.
        let patience = composer.watch.extensions.validate.as_ref().map(|v| v.timeout / 2).unwrap_or_default();
        let permit = match self.door.lanes().validation_permit(patience).await {
            Ok(permit) => permit,
            Err(busy) => {
                tracing::warn!(kind = %gvk, limit = busy.limit, "validation refused: the lane is full");
                return deny(busy.to_string());
            }
        };
        let request = match Request::parse(body) {
            Ok(request) => request,
            Err(error) => {
                tracing::info!(kind = %gvk, %error, "review refused");
                return deny(error.to_string());
            }
        };
        let started = std::time::Instant::now();
        let verdict = self.validate(composer, plural, &request, &permit).await;
        let allowed = verdict == Verdict::Allowed;
        tracing::info!(
            kind = %gvk, operation = %request.operation, allowed,
            elapsed_ms = started.elapsed().as_millis() as u64, "validated"
        );
        review::answer(&request.uid, &verdict)
    }

    async fn validate(
        &self,
        composer: &Composer,
        plural: &str,
        request: &Request,
        permit: &Permit,
    ) -> Verdict {
        let watch = &composer.watch;
        let gvk = &watch.gvk;
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
        let which = unsafe_strings(watch, inputs.trust_cr_templates);
        let admission = request.admission_var(|value| vars::wrap(value, which));
        spec.extra_vars.insert(review::ADMISSION_VAR.into(), admission);
        let dir = spec.dir.clone();
        let owner = Owner {
            gvk: gvk.clone(),
            plural: plural.to_string(),
            name: object.name_any(),
            uid: object.uid().unwrap_or_default(),
            namespace: object.namespace(),
            shard_label: None,
        };
        let launch = Launch { spec, owner, acting: Acting::default(), live: None };
        let ran = self.door.launch(&self.proxy, permit, launch).await;
        let verdict = match ran.report {
            Ok(report) => review::verdict(&report),
            Err(error) => {
                let error = crate::logging::error_chain(&error);
                tracing::warn!(kind = %gvk, %error, "validation could not run");
                Verdict::Denied(format!("validation could not run: {error}"))
            }
        };
        // The answer does not wait for the run's files to go (about a millisecond for a short play).
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(dir);
        });
        verdict
    }
}
