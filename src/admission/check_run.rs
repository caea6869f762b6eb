//! What a validation and a conversion share: one check-mode run of a kind's playbook for an
//! incoming object, composed as the object's reconcile would be (in its own directory under
//! `<runner dir>/.admission`), with a plan's dry-run credential, through the one door; its files
//! are removed once it ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use crate::proxy::Proxy;
use crate::proxy::owner::Owner;
use crate::reconcile::inputs::Composer;
use crate::reconcile::{new_ident, plan_args, run_spec};
use crate::run::{Acting, Door, Launch, Permit};
use crate::runner::Report;
use crate::watches::Target;

/// The check runs of one operator.
#[derive(Clone)]
pub struct CheckRuns {
    /// The door runs go through, in its validation lane.
    door: Arc<Door>,
    /// Where the runs' directories are made (`<runner dir>/.admission/<ident>`).
    root: PathBuf,
    /// The API proxy, which issues each run its dry-run credential.
    proxy: Arc<Proxy>,
}

impl std::fmt::Debug for CheckRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckRuns").field("root", &self.root).finish_non_exhaustive()
    }
}

/// One check run: what it runs, for which object, and for how long.
#[derive(Debug)]
pub struct Check<'a> {
    /// The watch entry and the settings its runs are composed with.
    pub composer: &'a Composer,
    /// The kind's resource.
    pub plural: &'a str,
    /// The object the run is composed for, as JSON.
    pub object: &'a Value,
    /// The playbook or role.
    pub target: Target,
    /// Longest the run may take.
    pub timeout: Duration,
}

impl CheckRuns {
    /// The check runs that go through `door`, in directories under `runner_dir`.
    pub fn new(door: Arc<Door>, runner_dir: PathBuf, proxy: Arc<Proxy>) -> Self {
        CheckRuns { door, root: runner_dir.join(".admission"), proxy }
    }

    /// The door, for a permit of its validation lane.
    pub fn door(&self) -> &Door {
        &self.door
    }

    /// Runs `check` with its object's usual extra vars as `extra_vars` leaves them; its report, or
    /// why it did not run (`what` names the run in the message: "validation", "conversion").
    pub async fn run(
        &self,
        permit: &Permit,
        check: Check<'_>,
        extra_vars: impl FnOnce(&mut Map<String, Value>),
        what: &str,
    ) -> Result<Report, String> {
        let watch = &check.composer.watch;
        let object: DynamicObject = serde_json::from_value(check.object.clone())
            .map_err(|error| format!("the object could not be read: {error}"))?;
        let ident = new_ident();
        let inputs = &check.composer.inputs;
        let mut spec = run_spec(watch, inputs, &object, check.object, false, ident.clone(), None);
        spec.target = check.target;
        spec.dir = self.root.join(&ident);
        spec.timeout = Some(check.timeout);
        spec.rotate_artifacts = 1;
        spec.ansible_args = plan_args(&inputs.ansible_args);
        extra_vars(&mut spec.extra_vars);
        let dir = spec.dir.clone();
        let owner = Owner {
            gvk: watch.gvk.clone(),
            plural: check.plural.to_string(),
            name: object.name_any(),
            uid: object.uid().unwrap_or_default(),
            namespace: object.namespace(),
            shard_label: None,
        };
        let launch = Launch { spec, owner, acting: Acting::default(), live: None };
        let ran = self.door.launch(&self.proxy, permit, launch).await;
        // The answer does not wait for the run's files to go (about a millisecond for a short play).
        tokio::task::spawn_blocking(move || {
            let _ = std::fs::remove_dir_all(dir);
        });
        ran.report.map_err(|error| {
            let error = crate::logging::error_chain(&error);
            tracing::warn!(kind = %watch.gvk, %error, "{what} could not run");
            format!("{what} could not run: {error}")
        })
    }
}
