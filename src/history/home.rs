//! Where the records of a cluster-scoped CR live. A record is an `AnsibleRun` in its CR's namespace,
//! and a cluster-scoped CR (a `Namespace`, a cluster-scoped custom kind) has none: its records go to
//! the operator's own namespace, owned by the CR all the same, so they go when it goes.

/// Where the operator's namespace comes from, in the order asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `POD_NAMESPACE` (set from the downward API in upstream's scaffolded manager Deployment).
    PodNamespace,
    /// The service account's namespace file, present in a pod.
    ServiceAccount,
    /// Out of a cluster, with `WATCH_NAMESPACE`: the first namespace watched, where the operator is
    /// known to be allowed to keep records.
    Watched,
    /// Out of a cluster, watching all namespaces.
    Default,
}

/// The namespace the records of cluster-scoped CRs go to, and where that came from: the first of
/// `pod_namespace`, `service_account` (the namespace file's content), the first of `watched`, else
/// `default`. Empty values count as absent.
#[must_use]
pub fn decide(
    pod_namespace: Option<&str>,
    service_account: Option<&str>,
    watched: &[String],
) -> (String, Source) {
    let given = |value: Option<&str>| value.map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
    if let Some(namespace) = given(pod_namespace) {
        return (namespace, Source::PodNamespace);
    }
    if let Some(namespace) = given(service_account) {
        return (namespace, Source::ServiceAccount);
    }
    match watched.first() {
        Some(namespace) => (namespace.clone(), Source::Watched),
        None => ("default".to_string(), Source::Default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_namespace_wins_then_the_service_account_then_the_watched_namespace() {
        let watched = vec!["team-a".to_string(), "team-b".to_string()];
        assert_eq!(
            decide(Some("operators"), Some("sa-ns"), &watched),
            ("operators".into(), Source::PodNamespace)
        );
        assert_eq!(decide(None, Some("sa-ns\n"), &watched), ("sa-ns".into(), Source::ServiceAccount));
        assert_eq!(decide(Some(""), None, &watched), ("team-a".into(), Source::Watched));
        assert_eq!(decide(None, Some("  "), &[]), ("default".into(), Source::Default));
    }
}
