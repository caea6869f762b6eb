//! Watch errors, reported once per streak: a watch that keeps failing (a permission it lacks, an API
//! server that is down) is retried with backoff, and its log says so once, not at every retry.

use kube::runtime::watcher;

/// The error state of one watch.
#[derive(Debug)]
pub struct WatchErrors {
    /// What is watched, for the log (`/api/v1/namespaces`, a GVK).
    resource: String,
    /// What the operator loses while the watch fails.
    consequence: &'static str,
    failing: bool,
}

impl WatchErrors {
    /// Reports errors of the watch of `resource`; `consequence` says what is lost while it fails.
    pub fn new(resource: impl Into<String>, consequence: &'static str) -> Self {
        Self { resource: resource.into(), consequence, failing: false }
    }

    /// A failed list or watch: a warning at the first of a streak, debug after that.
    pub fn failed(&mut self, error: &watcher::Error) {
        let resource = self.resource.as_str();
        if std::mem::replace(&mut self.failing, true) {
            tracing::debug!(resource, %error, "watch still failing");
        } else if is_forbidden(error) {
            tracing::warn!(
                resource,
                %error,
                consequence = self.consequence,
                "not allowed to list and watch: grant list and watch on this resource to the operator; retrying quietly"
            );
        } else {
            tracing::warn!(resource, %error, consequence = self.consequence, "watch failed: retrying with backoff");
        }
    }

    /// A successful list: the streak, if any, is over.
    pub fn listed(&mut self) {
        if std::mem::take(&mut self.failing) {
            tracing::info!(resource = self.resource, "watch works again");
        }
    }
}

/// A list or watch the API server refused for lack of permission.
pub fn is_forbidden(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 403,
        watcher::Error::WatchError(status) => status.code == 403,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Box<kube::core::Status> {
        Box::new(kube::core::Status { code, ..Default::default() })
    }

    #[test]
    fn forbidden_is_recognised_in_every_phase_of_a_watch() {
        assert!(is_forbidden(&watcher::Error::InitialListFailed(kube::Error::Api(status(403)))));
        assert!(is_forbidden(&watcher::Error::WatchStartFailed(kube::Error::Api(status(403)))));
        assert!(is_forbidden(&watcher::Error::WatchError(status(403))));
        assert!(!is_forbidden(&watcher::Error::WatchError(status(410))));
        assert!(!is_forbidden(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn a_streak_ends_with_a_successful_list() {
        let mut errors = WatchErrors::new("/api/v1/namespaces", "nothing");
        errors.failed(&watcher::Error::NoResourceVersion);
        assert!(errors.failing);
        errors.failed(&watcher::Error::NoResourceVersion);
        errors.listed();
        assert!(!errors.failing);
    }
}
