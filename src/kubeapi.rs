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
}

/// Parameters of the operator's own patches: its field manager.
pub fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// Parameters of the operator's own creates and replaces: its field manager.
pub fn post_params() -> kube::api::PostParams {
    kube::api::PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() }
}

/// Runs an API call with [`API_TIMEOUT`].
pub async fn with_timeout<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, Error> {
    match tokio::time::timeout(API_TIMEOUT, call).await {
        Ok(result) => result.map_err(Error::Kube),
        Err(_) => Err(Error::Timeout(API_TIMEOUT)),
    }
}
