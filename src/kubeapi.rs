//! Calls to the Kubernetes API: a deadline on every call and the error cases callers branch on.

use std::future::Future;
use std::time::Duration;

/// The field manager of every write the operator makes itself (status, finalizers, leases,
/// events), as upstream's controller-runtime client names it.
pub const FIELD_MANAGER: &str = "ansible-operator";

/// Deadline for one API call; the API server answers in milliseconds when healthy.
pub const API_TIMEOUT: Duration = Duration::from_secs(30);

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server answered with an error, or the request failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// No answer within the deadline.
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// The HTTP status code, when the API server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Kube(kube::Error::Api(status)) => Some(status.code),
            _ => None,
        }
    }

    /// 409: the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 404: the object (or its subresource) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 403 because the namespace is being deleted: nothing new may be created in it, whatever the
    /// rights (the API server's `NamespaceTerminating` cause).
    pub fn is_namespace_terminating(&self) -> bool {
        match self {
            Error::Kube(kube::Error::Api(status)) => {
                status.code == 403 && status.message.contains("because it is being terminated")
            }
            _ => false,
        }
    }
}

/// Parameters of the operator's own patches: its field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// Parameters of the operator's own creates and replaces: its field manager.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// The watch of a watched kind's objects: the watch entry's label selector (with sharding, the
/// shard's too) and its `fieldSelector`; the controller and the sharder watch the same objects.
pub fn primary_watch(
    selector: &kube::core::Selector,
    field_selector: Option<&str>,
) -> kube::runtime::watcher::Config {
    let config = kube::runtime::watcher::Config::default().labels_from(selector);
    match field_selector {
        Some(fields) => config.fields(fields),
        None => config,
    }
}

/// Runs an API call with [`API_TIMEOUT`].
pub async fn with_timeout<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Error> {
    match tokio::time::timeout(API_TIMEOUT, call).await {
        Ok(result) => result.map_err(Error::Kube),
        Err(_) => Err(Error::Timeout(API_TIMEOUT)),
    }
}

#[cfg(test)]
mod tests {
    use super::Error;

    fn answered(code: u16, message: &str) -> Error {
        Error::Kube(kube::Error::Api(Box::new(kube::core::Status::failure(message, "").with_code(code))))
    }

    #[test]
    fn a_terminating_namespace_is_told_from_a_missing_right() {
        let terminating = answered(
            403,
            "events \"cr.1\" is forbidden: unable to create new content in namespace ns because it is being terminated",
        );
        assert!(terminating.is_namespace_terminating());
        assert!(
            !answered(403, "events is forbidden: User \"x\" cannot create resource")
                .is_namespace_terminating()
        );
        assert!(!answered(409, "because it is being terminated").is_namespace_terminating());
    }
}
