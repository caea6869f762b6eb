//! The index of what runs read (for watch entries with `watchReadResources: true`): per CR, its last
//! run's read-set; from it, the shared watches wanted (one per resource and namespace, narrowed where
//! every read of it was) and, for a change seen by one of them, the CRs that read the object. Pure:
//! [`ReadWatches`](super::read_watches::ReadWatches) does the watching.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

use serde_json::Value;

use crate::history::Read;
use crate::history::ledger::CrKey;

/// One shared watch: a resource in a namespace (`None`: all namespaces, or a cluster-scoped kind).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    /// API group ("" for the core group).
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace.
    pub namespace: Option<String>,
}

impl Scope {
    /// The scope a read falls in.
    pub fn of(read: &Read) -> Self {
        Scope {
            group: read.group.clone(),
            version: read.version.clone(),
            resource: read.resource.clone(),
            namespace: read.namespace.clone(),
        }
    }
}

/// How a scope's watch is narrowed: by the selectors every read of it shares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Narrowing {
    /// Label selector.
    pub labels: Option<String>,
    /// Field selector.
    pub fields: Option<String>,
}

/// An object a watch saw change, as far as the decision needs it.
#[derive(Debug, Clone, Copy)]
pub struct Changed<'a> {
    /// Its kind.
    pub kind: &'a str,
    /// Its namespace.
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
    /// The UIDs its ownerReferences name.
    pub owner_uids: &'a [String],
}

/// What a CR's last run read.
#[derive(Debug, Clone)]
struct Reader {
    uid: String,
    reads: Vec<Read>,
}

/// Per CR, what its last run read.
#[derive(Debug, Default)]
pub struct ReadIndex {
    readers: HashMap<CrKey, Reader>,
}

impl ReadIndex {
    /// The CR's last run read `reads` (the CR's UID is `uid`); they replace what it read before.
    pub fn replace(&mut self, cr: CrKey, uid: String, mut reads: Vec<Read>) {
        reads.sort();
        reads.dedup();
        if reads.is_empty() {
            self.readers.remove(&cr);
        } else {
            self.readers.insert(cr, Reader { uid, reads });
        }
    }

    /// Forgets a CR (it is gone, or its runs no longer read).
    pub fn forget(&mut self, cr: &CrKey) {
        self.readers.remove(cr);
    }

    /// The watches wanted: every scope some CR read, narrowed to the one name every read of it
    /// named, or to the selectors every LIST of it used; otherwise the whole scope.
    pub fn plan(&self) -> BTreeMap<Scope, Narrowing> {
        let mut reads: BTreeMap<Scope, Vec<&Read>> = BTreeMap::new();
        for read in self.readers.values().flat_map(|reader| &reader.reads) {
            reads.entry(Scope::of(read)).or_default().push(read);
        }
        reads.into_iter().map(|(scope, reads)| (scope, narrowing(&reads))).collect()
    }

    /// The CRs to re-run because `changed` (seen by the watch of `scope`) changed: those whose last
    /// run read it by name or listed it with selectors it matches. Never the object's own CR or the
    /// CR that owns it.
    pub fn hit(&self, scope: &Scope, changed: &Changed<'_>) -> Vec<CrKey> {
        let mut hit: Vec<CrKey> = self
            .readers
            .iter()
            .filter(|(cr, reader)| {
                let itself = cr.0 == scope.group
                    && cr.1 == changed.kind
                    && cr.2.as_deref() == changed.namespace
                    && cr.3 == changed.name;
                let owns = changed.owner_uids.contains(&reader.uid);
                !itself
                    && !owns
                    && reader.reads.iter().any(|read| Scope::of(read) == *scope && covers(read, changed))
            })
            .map(|(cr, _)| cr.clone())
            .collect();
        hit.sort();
        hit
    }
}

/// What to do to the running watches so that they match a plan.
#[must_use]
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Watches no longer wanted, or wanted narrowed otherwise.
    pub stop: Vec<Scope>,
    /// Watches to start (again, when their narrowing changed).
    pub start: Vec<(Scope, Narrowing)>,
}

/// The changes that turn the `running` watches into the `plan`.
pub fn changes(running: &BTreeMap<Scope, Narrowing>, plan: &BTreeMap<Scope, Narrowing>) -> Changes {
    let stop = running.iter().filter(|(scope, narrowing)| plan.get(*scope) != Some(*narrowing));
    let start = plan.iter().filter(|(scope, narrowing)| running.get(*scope) != Some(*narrowing));
    Changes {
        stop: stop.map(|(scope, _)| scope.clone()).collect(),
        start: start.map(|(scope, narrowing)| (scope.clone(), narrowing.clone())).collect(),
    }
}

/// The narrowing the reads of one scope share.
fn narrowing(reads: &[&Read]) -> Narrowing {
    let first = reads[0];
    if let Some(name) = &first.name
        && reads.iter().all(|read| read.name.as_ref() == Some(name))
    {
        return Narrowing { labels: None, fields: Some(format!("metadata.name={name}")) };
    }
    let same_list = |read: &&&Read| {
        read.name.is_none()
            && read.label_selector == first.label_selector
            && read.field_selector == first.field_selector
    };
    if first.name.is_none() && reads.iter().all(|read| same_list(&read)) {
        return Narrowing { labels: first.label_selector.clone(), fields: first.field_selector.clone() };
    }
    Narrowing::default()
}

/// Whether a read covers the changed object: it named it, or listed with selectors it matches.
fn covers(read: &Read, changed: &Changed<'_>) -> bool {
    match &read.name {
        Some(name) => name == changed.name,
        None => {
            read.label_selector.as_deref().is_none_or(|selector| labels_match(selector, changed.labels))
                && read.field_selector.as_deref().is_none_or(|selector| fields_match(selector, changed))
        }
    }
}

/// Whether labels match a label selector as a LIST sends it (`a=b,c!=d,e,!f,g in (h,i),j notin (k)`).
/// A requirement this cannot read matches: a change that might matter re-runs rather than is missed.
fn labels_match(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    requirements(selector).iter().all(|requirement| {
        let requirement = requirement.trim();
        if requirement.is_empty() {
            return true;
        }
        if let Some(key) = requirement.strip_prefix('!') {
            return !labels.contains_key(key.trim());
        }
        for (operator, negated) in [(" notin ", true), (" in ", false)] {
            if let Some((key, values)) = requirement.split_once(operator) {
                let values = values.trim().trim_start_matches('(').trim_end_matches(')');
                let value = labels.get(key.trim());
                let listed = value.is_some_and(|value| values.split(',').any(|v| v.trim() == value));
                return if negated { !listed } else { listed };
            }
        }
        match equality(requirement) {
            Some((key, value, true)) => labels.get(key) == Some(&value.to_string()),
            Some((key, value, false)) => labels.get(key) != Some(&value.to_string()),
            None if requirement.contains(char::is_whitespace) => true,
            None => labels.contains_key(requirement),
        }
    })
}

/// Whether the changed object matches a field selector's `metadata.name` and `metadata.namespace`
/// requirements; other fields are not known here and match.
fn fields_match(selector: &str, changed: &Changed<'_>) -> bool {
    selector.split(',').filter_map(equality).all(|(field, value, equal)| {
        let actual = match field {
            "metadata.name" => Some(changed.name),
            "metadata.namespace" => Some(changed.namespace.unwrap_or_default()),
            _ => None,
        };
        actual.is_none_or(|actual| (actual == value) == equal)
    })
}

/// `key=value`, `key==value` (equal: true) or `key!=value` (false), trimmed.
fn equality(requirement: &str) -> Option<(&str, &str, bool)> {
    if let Some((key, value)) = requirement.split_once("!=") {
        return Some((key.trim(), value.trim(), false));
    }
    let (key, value) = requirement.split_once('=')?;
    Some((key.trim(), value.trim_start_matches('=').trim(), true))
}

/// A selector's requirements: split at the commas outside parentheses.
fn requirements(selector: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&selector[start..]);
    parts
}

/// What of an object a run reads for its content: everything but metadata and status, plus the
/// labels. Annotations, resourceVersion, managedFields and status change without the content changing
/// (controllers write them), so they do not re-run the readers.
pub fn content_hash(object: &Value) -> u64 {
    let mut content = object.as_object().cloned().unwrap_or_default();
    for key in ["metadata", "status", "apiVersion", "kind"] {
        content.remove(key);
    }
    let labels = object["metadata"]["labels"].clone();
    let mut hasher = DefaultHasher::new();
    Value::Object(content).to_string().hash(&mut hasher);
    labels.to_string().hash(&mut hasher);
    hasher.finish()
}

/// What one watch has seen, by UID: after its first list, a new object, a content change or a
/// deletion is a change; the first list itself is not (the readers read those objects as they are).
#[derive(Debug, Default)]
pub struct Observed {
    hashes: HashMap<String, u64>,
    listed: bool,
}

impl Observed {
    /// The watch's first list is in.
    pub fn listed(&mut self) {
        self.listed = true;
    }

    /// An object as listed or updated; true when it is a change for its readers.
    #[must_use]
    pub fn applied(&mut self, uid: &str, hash: u64) -> bool {
        match self.hashes.insert(uid.to_string(), hash) {
            Some(old) => old != hash,
            None => self.listed,
        }
    }

    /// An object was deleted: always a change for its readers.
    #[must_use]
    pub fn deleted(&mut self, uid: &str) -> bool {
        self.hashes.remove(uid);
        true
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cr(name: &str) -> CrKey {
        ("app.example.com".into(), "App".into(), Some("ns".into()), name.into())
    }

    fn get(resource: &str, name: &str) -> Read {
        crate::history::record::tests::read(resource, None, name)
    }

    fn list(resource: &str, labels: Option<&str>, fields: Option<&str>) -> Read {
        Read {
            name: None,
            label_selector: labels.map(Into::into),
            field_selector: fields.map(Into::into),
            ..get(resource, "")
        }
    }

    fn scope(resource: &str) -> Scope {
        Scope::of(&get(resource, "x"))
    }

    fn changed<'a>(name: &'a str, labels: &'a BTreeMap<String, String>, owners: &'a [String]) -> Changed<'a> {
        Changed { kind: "ConfigMap", namespace: Some("ns"), name, labels, owner_uids: owners }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn one_watch_per_resource_and_namespace_narrowed_to_the_one_name_read() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "settings"), get("secrets", "creds")]);
        index.replace(cr("b"), "ub".into(), vec![get("configmaps", "settings")]);
        let plan = index.plan();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[&scope("configmaps")].fields.as_deref(), Some("metadata.name=settings"));
        assert_eq!(plan[&scope("secrets")].fields.as_deref(), Some("metadata.name=creds"));
        index.replace(cr("b"), "ub".into(), vec![get("configmaps", "other")]);
        assert_eq!(
            index.plan()[&scope("configmaps")],
            Narrowing::default(),
            "two names: the whole namespace"
        );
    }

    #[test]
    fn lists_with_the_same_selectors_narrow_their_watch_and_mixed_reads_do_not() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![list("configmaps", Some("app=web"), None)]);
        index.replace(cr("b"), "ub".into(), vec![list("configmaps", Some("app=web"), None)]);
        assert_eq!(index.plan()[&scope("configmaps")].labels.as_deref(), Some("app=web"));
        index.replace(cr("c"), "uc".into(), vec![get("configmaps", "x")]);
        assert_eq!(index.plan()[&scope("configmaps")], Narrowing::default());
    }

    #[test]
    fn a_new_read_set_replaces_the_old_and_an_empty_one_forgets_the_cr() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "old")]);
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "new")]);
        let none = BTreeMap::new();
        assert!(index.hit(&scope("configmaps"), &changed("old", &none, &[])).is_empty());
        assert_eq!(index.hit(&scope("configmaps"), &changed("new", &none, &[])), vec![cr("a")]);
        index.replace(cr("a"), "ua".into(), Vec::new());
        assert!(index.plan().is_empty());
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "new")]);
        index.forget(&cr("a"));
        assert!(index.plan().is_empty());
    }

    #[test]
    fn a_change_hits_the_crs_that_read_the_object_by_name_and_no_other() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "settings")]);
        index.replace(cr("b"), "ub".into(), vec![get("configmaps", "settings"), get("secrets", "s")]);
        index.replace(cr("c"), "uc".into(), vec![get("configmaps", "unrelated")]);
        let none = BTreeMap::new();
        assert_eq!(index.hit(&scope("configmaps"), &changed("settings", &none, &[])), vec![cr("a"), cr("b")]);
        assert!(index.hit(&scope("configmaps"), &changed("another", &none, &[])).is_empty());
        assert!(index.hit(&scope("secrets"), &changed("settings", &none, &[])).is_empty(), "other resource");
    }

    #[test]
    fn a_change_hits_the_crs_whose_list_selectors_match_it() {
        let mut index = ReadIndex::default();
        index.replace(cr("web"), "u1".into(), vec![list("configmaps", Some("app=web,tier in (a, b)"), None)]);
        index.replace(cr("named"), "u2".into(), vec![list("configmaps", None, Some("metadata.name=x"))]);
        index.replace(cr("all"), "u3".into(), vec![list("configmaps", Some("!legacy"), None)]);
        let web = labels(&[("app", "web"), ("tier", "b")]);
        let hit = index.hit(&scope("configmaps"), &changed("y", &web, &[]));
        assert_eq!(hit, vec![cr("all"), cr("web")]);
        let legacy = labels(&[("app", "web"), ("tier", "c"), ("legacy", "")]);
        assert!(index.hit(&scope("configmaps"), &changed("y", &legacy, &[])).is_empty());
        assert_eq!(index.hit(&scope("configmaps"), &changed("x", &legacy, &[])), vec![cr("named")]);
    }

    #[test]
    fn the_reader_itself_and_its_own_children_never_hit_it() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![list("configmaps", None, None)]);
        let none = BTreeMap::new();
        assert!(index.hit(&scope("configmaps"), &changed("c", &none, &["ua".to_string()])).is_empty());
        let mut index = ReadIndex::default();
        let apps = Read { group: "app.example.com".into(), resource: "apps".into(), ..list("", None, None) };
        index.replace(cr("a"), "ua".into(), vec![apps.clone()]);
        let itself = Changed { kind: "App", ..changed("a", &none, &[]) };
        assert!(index.hit(&Scope::of(&apps), &itself).is_empty());
        let sibling = Changed { kind: "App", ..changed("b", &none, &[]) };
        assert_eq!(index.hit(&Scope::of(&apps), &sibling), vec![cr("a")]);
    }

    #[test]
    fn selectors_follow_the_api_servers_operators() {
        let l = labels(&[("app", "web"), ("env", "prod")]);
        assert!(labels_match("app=web", &l) && labels_match("app==web", &l) && labels_match("app", &l));
        assert!(labels_match("app!=db", &l) && labels_match("!tier", &l) && labels_match("", &l));
        assert!(labels_match("env in (dev,prod)", &l) && labels_match("env notin (dev)", &l));
        assert!(
            !labels_match("app=db", &l) && !labels_match("tier", &l) && !labels_match("env notin (prod)", &l)
        );
        assert!(labels_match("app=web,env in (prod, dev)", &l) && !labels_match("app=web,env=dev", &l));
        let none = BTreeMap::new();
        let object = changed("x", &none, &[]);
        assert!(fields_match("metadata.name=x,metadata.namespace=ns", &object));
        assert!(!fields_match("metadata.name!=x", &object));
        assert!(fields_match("status.phase=Running", &object), "fields not known here match");
    }

    #[test]
    fn watches_start_once_restart_when_their_narrowing_changes_and_stop_when_unread() {
        let mut index = ReadIndex::default();
        index.replace(cr("a"), "ua".into(), vec![get("configmaps", "x"), get("secrets", "s")]);
        let running = BTreeMap::new();
        let first = changes(&running, &index.plan());
        assert_eq!(first.stop, Vec::<Scope>::new());
        assert_eq!(first.start.len(), 2);
        let running = index.plan();
        assert_eq!(changes(&running, &index.plan()), Changes::default(), "another run reading the same");
        index.replace(cr("b"), "ub".into(), vec![get("configmaps", "y")]);
        let widened = changes(&running, &index.plan());
        assert_eq!(widened.stop, vec![scope("configmaps")]);
        assert_eq!(widened.start, vec![(scope("configmaps"), Narrowing::default())]);
        index.forget(&cr("a"));
        index.forget(&cr("b"));
        let gone = changes(&running, &index.plan());
        assert_eq!((gone.stop.len(), gone.start.len()), (2, 0));
    }

    #[test]
    fn content_changes_count_and_metadata_and_status_churn_does_not() {
        let base = json!({"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "1", "labels": {"a": "1"}},
                          "data": {"k": "v"}});
        let hash = content_hash(&base);
        let churn = json!({"kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "9",
                           "annotations": {"x": "y"}, "managedFields": [{}], "labels": {"a": "1"}},
                           "data": {"k": "v"}, "status": {"observed": 3}});
        assert_eq!(content_hash(&churn), hash);
        let data = json!({"metadata": {"labels": {"a": "1"}}, "data": {"k": "w"}});
        assert_ne!(content_hash(&data), hash);
        let relabelled = json!({"metadata": {"labels": {"a": "2"}}, "data": {"k": "v"}});
        assert_ne!(content_hash(&relabelled), hash);
        let spec = json!({"spec": {"replicas": 2}});
        assert_ne!(content_hash(&spec), content_hash(&json!({"spec": {"replicas": 3}})));
    }

    #[test]
    fn the_first_list_is_not_a_change_and_later_creations_updates_and_deletions_are() {
        let mut observed = Observed::default();
        assert!(!observed.applied("u1", 1), "listed before the watch was up");
        observed.listed();
        assert!(!observed.applied("u1", 1), "same content");
        assert!(observed.applied("u1", 2), "new content");
        assert!(observed.applied("u2", 5), "created after the list");
        assert!(observed.deleted("u2"));
    }
}
