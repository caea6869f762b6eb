//! Several versions of one kind: entries for `v1` and `v2` of a group and kind would each run every
//! object of it, so only one reconciles: the entry of the newest version by Kubernetes' order
//! (`v2` > `v1` > `v1beta2` > `v1alpha1`), in the file's order among the rest.

use kube::core::Version;

use super::Watch;

/// The entries that reconcile, in the file's order, and each entry that does not with the version
/// that reconciles its kind instead.
pub fn one_per_kind(watches: Vec<Watch>) -> (Vec<Watch>, Vec<(Watch, String)>) {
    let newest = |watch: &Watch| {
        watches
            .iter()
            .filter(|other| other.gvk.group == watch.gvk.group && other.gvk.kind == watch.gvk.kind)
            .max_by_key(|other| Version::parse(&other.gvk.version).priority())
            .map(|other| other.gvk.version.clone())
            .unwrap_or_default()
    };
    let chosen: Vec<String> = watches.iter().map(newest).collect();
    let mut kept = Vec::with_capacity(watches.len());
    let mut dropped = Vec::new();
    for (watch, version) in watches.into_iter().zip(chosen) {
        if watch.gvk.version == version {
            kept.push(watch);
        } else {
            dropped.push((watch, version));
        }
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::watches::test_support::TempDir;
    use crate::watches::{Defaults, Environment, parse};

    fn watches(entries: &[(&str, &str, &str)]) -> Vec<Watch> {
        let dir = TempDir::new();
        dir.file("playbook.yml");
        let text: String = entries
            .iter()
            .map(|(group, version, kind)| {
                format!("- {{group: {group}, version: {version}, kind: {kind}, playbook: playbook.yml}}\n")
            })
            .collect();
        let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 2 };
        parse(&text, Path::new("watches.yaml"), &defaults, &Environment::new(dir.path()))
            .expect("loads")
            .watches
    }

    fn versions(watches: &[Watch]) -> Vec<String> {
        watches.iter().map(|w| format!("{}/{}", w.gvk.kind, w.gvk.version)).collect()
    }

    #[test]
    fn the_newest_version_of_each_kind_reconciles_and_the_others_name_it() {
        let (kept, dropped) = one_per_kind(watches(&[
            ("a.example.com", "v1", "App"),
            ("a.example.com", "v1", "Other"),
            ("a.example.com", "v2beta1", "App"),
            ("b.example.com", "v1alpha1", "App"),
            ("a.example.com", "v1alpha3", "App"),
        ]));
        assert_eq!(versions(&kept), ["App/v1", "Other/v1", "App/v1alpha1"]);
        assert_eq!(kept[2].gvk.group, "b.example.com");
        let dropped: Vec<(String, String)> =
            dropped.into_iter().map(|(w, v)| (format!("{}/{}", w.gvk.kind, w.gvk.version), v)).collect();
        assert_eq!(dropped, [("App/v2beta1".into(), "v1".into()), ("App/v1alpha3".into(), "v1".into())]);
    }

    #[test]
    fn one_entry_per_kind_is_kept_as_is() {
        let (kept, dropped) = one_per_kind(watches(&[("a.example.com", "v1beta1", "App")]));
        assert_eq!(versions(&kept), ["App/v1beta1"]);
        assert!(dropped.is_empty());
    }
}
