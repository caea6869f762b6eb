//! The group/version/kind that names what a watch reconciles, and the names derived from it.

use std::fmt;

/// A Kubernetes group, version and kind; the core group is the empty string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gvk {
    /// API group, empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1alpha1`.
    pub version: String,
    /// Kind, e.g. `Memcached`.
    pub kind: String,
}

impl Gvk {
    /// Builds a GVK from its three parts.
    pub fn new(group: impl Into<String>, version: impl Into<String>, kind: impl Into<String>) -> Self {
        Self { group: group.into(), version: version.into(), kind: kind.into() }
    }

    /// The `apiVersion` of objects of this kind: `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The name of a per-kind environment variable, built as upstream does: `<PREFIX>_<KIND>_<GROUP>`
    /// upper-cased with only `.` replaced by `_` (so the core group leaves a trailing `_`).
    pub fn env_var(&self, prefix: &str) -> String {
        format!("{prefix}_{}_{}", self.kind, self.group).replace('.', "_").to_uppercase()
    }

    /// The same GVK as kube-rs spells it, for building API resources and watches.
    pub fn to_kube(&self) -> kube::core::GroupVersionKind {
        kube::core::GroupVersionKind::gvk(&self.group, &self.version, &self.kind)
    }
}

/// Formats like upstream's `GroupVersionKind.String()`: `cache.example.com/v1alpha1, Kind=Memcached`,
/// and `/v1, Kind=Secret` for the core group. Metric labels and log fields use this form.
impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_upstream_gvk_string() {
        let gvk = Gvk::new("cache.example.com", "v1alpha1", "Memcached");
        assert_eq!(gvk.to_string(), "cache.example.com/v1alpha1, Kind=Memcached");
    }

    #[test]
    fn display_of_core_group_starts_with_a_slash() {
        assert_eq!(Gvk::new("", "v1", "Secret").to_string(), "/v1, Kind=Secret");
    }

    #[test]
    fn api_version_joins_group_and_version() {
        assert_eq!(
            Gvk::new("cache.example.com", "v1alpha1", "Memcached").api_version(),
            "cache.example.com/v1alpha1"
        );
    }

    #[test]
    fn api_version_of_core_group_is_the_version_alone() {
        assert_eq!(Gvk::new("", "v1", "Secret").api_version(), "v1");
    }

    #[test]
    fn env_var_is_kind_then_group_upper_cased_with_dots_replaced() {
        let gvk = Gvk::new("cache.example.com", "v1alpha1", "Memcached");
        assert_eq!(
            gvk.env_var("MAX_CONCURRENT_RECONCILES"),
            "MAX_CONCURRENT_RECONCILES_MEMCACHED_CACHE_EXAMPLE_COM"
        );
    }

    #[test]
    fn env_var_keeps_hyphens_and_leaves_a_trailing_underscore_for_the_core_group() {
        assert_eq!(Gvk::new("my-group.io", "v1", "Thing").env_var("WORKER"), "WORKER_THING_MY-GROUP_IO");
        assert_eq!(Gvk::new("", "v1", "Secret").env_var("ANSIBLE_VERBOSITY"), "ANSIBLE_VERBOSITY_SECRET_");
    }

    #[test]
    fn to_kube_keeps_all_three_parts() {
        let kube = Gvk::new("apps", "v1", "Deployment").to_kube();
        assert_eq!(
            (kube.group.as_str(), kube.version.as_str(), kube.kind.as_str()),
            ("apps", "v1", "Deployment")
        );
    }
}
