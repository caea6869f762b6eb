//! Admission playbooks: a watch's `validate` playbook or role run once, in Ansible check mode, for
//! each CREATE and UPDATE of its kind the API server sends to the operator's webhook, with the
//! incoming object's usual extra vars plus `ansible_operator_admission`. A failed task denies the
//! request with its message. Validation runs are not reconciles: no status, no run record, no
//! reconcile metrics. Their proxy credential is a plan's: a playbook may read through it (to
//! compare with other objects, say), every write is a server-side dry run, and what it reads from
//! Secrets is masked in the message it denies with. A watch's `convert` playbook answers the CRD's
//! conversion webhook in the same lane ([`converter`]).

mod check_run;
pub mod configuration;
pub mod conversion;
pub mod converter;
pub mod review;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::reconcile::inputs::Composer;
use crate::reconcile::{check_reserved, unsafe_strings};
use crate::run::Permit;
use crate::vars;
use crate::watches::Gvk;
use check_run::Check;
pub use check_run::CheckRuns;
pub use converter::Converter;
pub use review::{Request, Verdict};

/// Runs the validations of the watched kinds that have one.
pub struct Validator {
    /// The composers of the kinds with `validate`, with their resource (plural).
    kinds: Vec<(Arc<Composer>, String)>,
    /// Where validations run: the door's validation lane, with a dry-run credential.
    runs: CheckRuns,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validator").field("kinds", &self.kinds.len()).finish_non_exhaustive()
    }
}

impl Validator {
    /// A validator for the kinds among `kinds` (with their plural) whose watch has `validate`.
    pub fn new(kinds: impl IntoIterator<Item = (Arc<Composer>, String)>, runs: CheckRuns) -> Self {
        let kinds = kinds.into_iter().filter(|(c, _)| c.watch.extensions.validate.is_some()).collect();
        Validator { kinds, runs }
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
        let permit = match self.runs.door().lanes().validation_permit(patience).await {
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
        let Some(validate) = &watch.extensions.validate else {
            return Verdict::Denied(format!("the operator has no validate playbook for {}", watch.gvk));
        };
        let inputs = &composer.inputs;
        let trust = (inputs.trust_cr_templates, inputs.trust_cr_variables);
        if let Err(reserved) = check_reserved(watch, trust.0, trust.1, &request.object, false) {
            return Verdict::Denied(reserved.to_string());
        }
        let which = unsafe_strings(watch, inputs.trust_cr_templates);
        let admission = request.admission_var(|value| vars::wrap(value, which));
        let check = Check {
            composer,
            plural,
            object: &request.object,
            target: validate.target.clone(),
            timeout: validate.timeout,
        };
        let add = |vars: &mut Map<String, Value>| {
            vars.insert(review::ADMISSION_VAR.into(), admission);
        };
        match self.runs.run(permit, check, add, "validation").await {
            Ok(report) => review::verdict(&report),
            Err(message) => Verdict::Denied(message),
        }
    }
}
