//! `WATCH_NAMESPACE`: which namespaces the operator watches.

/// Parses `WATCH_NAMESPACE` as upstream: a comma-separated list, items trimmed, empty items dropped.
/// An empty result (unset or blank) means all namespaces.
pub fn watch_namespaces(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|namespace| !namespace.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_or_blank_watch_namespace_means_all_namespaces() {
        assert!(watch_namespaces(None).is_empty());
        assert!(watch_namespaces(Some("")).is_empty());
        assert!(watch_namespaces(Some(" , ,")).is_empty());
    }

    #[test]
    fn watch_namespace_is_a_trimmed_comma_list_without_empty_items() {
        assert_eq!(watch_namespaces(Some(" team-a, team-b ,,team-c")), ["team-a", "team-b", "team-c"]);
        assert_eq!(watch_namespaces(Some("default")), ["default"]);
    }
}
