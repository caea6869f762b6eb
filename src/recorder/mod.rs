//! Core `v1` Events written as client-go's recorder writes them (controller-runtime's
//! `GetEventRecorderFor`), so that upstream's scaffolded RBAC (`events` in the core group) covers
//! them: repeats fold into one Event whose `count` grows (see [`correlator`]).

pub mod correlator;

use std::collections::HashSet;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Event, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch};

use correlator::{Action, Correlator};
pub use correlator::{EventType, Note, Reporter};

use crate::kubeapi::{self, with_timeout};

/// The rule an operator needs to record Events, as a Role or ClusterRole says it.
pub const EVENTS_RULE: &str = r#"apiGroups: [""], resources: [events], verbs: [create, patch]"#;

/// Why an Event was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating it failed.
    #[error("create Event {reason} in namespace {namespace}")]
    Create {
        /// The Event's reason.
        reason: String,
        /// Where it was to go.
        namespace: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// Adding a repeat to the recorded one failed.
    #[error("patch Event {name} in namespace {namespace}")]
    Patch {
        /// The recorded Event.
        name: String,
        /// Its namespace.
        namespace: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
}

impl Error {
    /// The API server refused (403): the operator lacks [`EVENTS_RULE`].
    fn is_forbidden(&self) -> bool {
        self.api_error().code() == Some(403) && !self.api_error().is_namespace_terminating()
    }

    fn api_error(&self) -> &kubeapi::Error {
        let (Error::Create { source, .. } | Error::Patch { source, .. }) = self;
        source
    }
}

/// Records Events for one reporter.
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    correlator: Mutex<Correlator>,
    /// Involved kinds whose refusal was logged at warn already.
    refused: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("reporter", &self.reporter).finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder { client, reporter, correlator: Mutex::default(), refused: Mutex::default() }
    }

    /// Records `note` about `involved`; a failure is logged, not returned (what it tells happened
    /// anyway). A refusal is logged at warn once per involved kind, with the missing rule.
    pub async fn record(&self, involved: &ObjectReference, note: &Note) {
        let Err(error) = self.write(involved, note).await else { return };
        let kind = involved.kind.clone().unwrap_or_default();
        let chain = crate::logging::error_chain(&error);
        if error.api_error().is_namespace_terminating() {
            tracing::debug!(error = %chain, reason = note.reason, "no Event: the namespace is being deleted");
        } else if !error.is_forbidden() {
            tracing::warn!(error = %chain, reason = note.reason, "could not record the Event");
        } else if first_refusal(&mut lock(&self.refused), &kind) {
            let namespace = correlator::namespace(involved);
            tracing::warn!(
                error = %chain,
                kind,
                namespace,
                missing_rule = EVENTS_RULE,
                "Events are refused: grant the operator this rule in the namespace (further refusals for this kind are logged at debug)"
            );
        } else {
            tracing::debug!(error = %chain, reason = note.reason, "Event refused");
        }
    }

    /// Creates the Event, or patches the recorded one it repeats.
    async fn write(&self, involved: &ObjectReference, note: &Note) -> Result<(), Error> {
        let draft = correlator::draft(involved, note, &self.reporter, Timestamp::now());
        let action = lock(&self.correlator).correlate(draft);
        let namespace = action.event().metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let written = match action {
            Action::Create(event) => self.create(&api, event).await?,
            Action::Patch(event) => {
                let name = event.metadata.name.clone().unwrap_or_default();
                let patch = correlator::repeat_patch(&event);
                match with_timeout(api.patch(&name, &kubeapi::patch_params(), &Patch::Merge(&patch))).await {
                    Ok(written) => written,
                    // Gone (expired, deleted): written anew, as client-go does.
                    Err(error) if error.is_not_found() => self.create(&api, event).await?,
                    Err(source) => return Err(Error::Patch { name, namespace, source }),
                }
            }
        };
        lock(&self.correlator).recorded(&written);
        Ok(())
    }

    async fn create(&self, api: &Api<Event>, event: Event) -> Result<Event, Error> {
        with_timeout(api.create(&kubeapi::post_params(), &event)).await.map_err(|source| Error::Create {
            reason: event.reason.clone().unwrap_or_default(),
            namespace: event.metadata.namespace.clone().unwrap_or_default(),
            source,
        })
    }
}

/// Whether this is the first refusal for `kind` (and notes it).
fn first_refusal(refused: &mut HashSet<String>, kind: &str) -> bool {
    refused.insert(kind.to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_logged_at_warn_once_per_involved_kind() {
        let mut refused = HashSet::new();
        assert!(first_refusal(&mut refused, "Memcached"));
        assert!(!first_refusal(&mut refused, "Memcached"));
        assert!(first_refusal(&mut refused, "Lease"));
    }
}
