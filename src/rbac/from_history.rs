//! `rbac --from-history`: a `permissions:` list per watched kind, proposed from the requests its
//! runs made as their `AnsibleRun` records keep them (audit2rbac for operators).
//!
//! Each write a record lists (`spec.objects`) and each read (`spec.reads`) becomes a verb on a
//! resource in a place: the run's CR's own namespace, another named namespace, or the cluster (a
//! cluster-scoped resource, or a list across namespaces). Rules are grouped by API group, resource
//! and place, never wider than what was seen: no `*`, no namespace no run used. What a run may
//! always do on its own CR (get, update and patch it and its status) is left out.
//!
//! A record keeps a run's read-set, which leaves out what the run read of the objects it wrote or
//! owns (those reads are what re-runs it on its own writes). `kubernetes.core.k8s` reads every
//! object before it writes it and while it waits for it, so `get` is proposed beside every write.
//! The proxy does not record watch requests: a list is proposed with `watch` beside it.
//!
//! Records are data: anyone who may write `AnsibleRun`s in a namespace can write one. Only
//! resources the API server serves are proposed, names are checked, and the output is quoted so
//! nothing in a record can change its shape; the user reviews the proposal before using it.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::discovery::{Discovery, Scope};
use serde_json::Value;

use crate::history::availability::INSTALL;
use crate::history::record;
use crate::kubeapi::{self, with_timeout};
use crate::watches::permissions::{self, Rule};
use crate::watches::{Gvk, Watch};

/// Why no proposal could be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `AnsibleRun` CRD is not served: records are kept in the operator's memory only.
    #[error("the run history is not in the cluster (no AnsibleRun CRD is served): {INSTALL}")]
    NoHistory {
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// Listing a kind's records failed.
    #[error("list the run records of {gvk} in {namespace}")]
    ListRecords {
        /// The watched kind.
        gvk: Gvk,
        /// Where: a namespace, or all namespaces.
        namespace: String,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
    /// Discovery of the resources the records name failed.
    #[error("discover the API server's resources")]
    Discover {
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
}

/// The verbs a record's write can have.
const WRITE_VERBS: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// What a run may always do on its own CR and its status, whatever its watch declares.
const OWN_CR_VERBS: [&str; 3] = ["get", "update", "patch"];

/// A resource the API server serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedResource {
    /// API group ("" for the core group).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Resource (plural), e.g. `deployments`.
    pub plural: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

/// The resources the API server serves, as discovery found them.
#[derive(Debug, Clone, Default)]
pub struct Served(Vec<ServedResource>);

impl Served {
    /// Adds a resource.
    pub fn insert(&mut self, resource: ServedResource) {
        if !self.0.contains(&resource) {
            self.0.push(resource);
        }
    }

    /// The resources of every group `discovery` looked at, in every version it found.
    pub fn from_discovery(discovery: &Discovery) -> Served {
        let mut served = Served::default();
        for group in discovery.groups() {
            for (resource, capabilities) in group.resources_by_stability() {
                served.insert(ServedResource {
                    group: resource.group,
                    kind: resource.kind,
                    plural: resource.plural,
                    namespaced: capabilities.scope == Scope::Namespaced,
                });
            }
        }
        served
    }

    /// The resource of a written object's kind as a record names it: its kind, or its plural when
    /// neither the request nor the answer named the kind.
    fn of_kind(&self, group: &str, kind: &str) -> Option<&ServedResource> {
        let in_group = || self.0.iter().filter(|r| r.group == group);
        in_group().find(|r| r.kind == kind).or_else(|| self.of_resource(group, kind))
    }

    /// The resource of a plural.
    fn of_resource(&self, group: &str, plural: &str) -> Option<&ServedResource> {
        self.0.iter().find(|r| r.group == group && r.plural == plural)
    }
}

/// Where a request was made, relative to its run's CR.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// The CR's own namespace.
    Own,
    /// Another namespace.
    Namespace(String),
    /// A cluster-scoped resource, or a list across namespaces.
    Cluster,
}

/// The requests seen: verbs (indices into [`permissions::VERBS`], for their usual order) by
/// (group, resource) and place.
#[derive(Debug, Default)]
struct Seen {
    verbs: BTreeMap<(String, String), BTreeMap<Place, BTreeSet<usize>>>,
    unserved: BTreeSet<String>,
    not_understood: usize,
}

impl Seen {
    fn add(&mut self, group: &str, resource: &str, place: &Place, verbs: &[&str]) {
        let at = self.verbs.entry((group.to_string(), resource.to_string())).or_default();
        let set = at.entry(place.clone()).or_default();
        set.extend(verbs.iter().filter_map(|verb| permissions::VERBS.iter().position(|v| v == verb)));
    }
}

/// What the runs of one watched kind did, as `permissions:` rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The watched kind.
    pub gvk: Gvk,
    /// Run records read.
    pub records: usize,
    /// CRs they were the runs of.
    pub crs: usize,
    /// The rules, in order: by group, resource, then own namespace, named namespaces, cluster.
    pub rules: Vec<Rule>,
    /// Kinds or resources records name that the API server does not serve (`group/name`).
    pub unserved: Vec<String>,
    /// Requests in records that are not a request (a verb, kind or namespace that cannot be).
    pub not_understood: usize,
}

/// The proposal for `gvk` from run records (`AnsibleRun` objects as JSON); records of other kinds
/// and plans are ignored.
#[must_use]
pub fn proposal(gvk: &Gvk, records: &[Value], served: &Served) -> Proposal {
    let own_plural = served.of_kind(&gvk.group, &gvk.kind).map(|r| r.plural.as_str());
    let mut seen = Seen::default();
    let mut crs = BTreeSet::new();
    let mut count = 0;
    for run in records.iter().filter(|run| is_run_of(run, gvk)) {
        count += 1;
        let owner = &run["spec"]["owner"];
        let cr = Cr {
            group: &gvk.group,
            plural: own_plural,
            namespace: owner["namespace"].as_str(),
            name: owner["name"].as_str().unwrap_or_default(),
        };
        crs.insert(owner["uid"].as_str().unwrap_or(cr.name));
        for write in run["spec"]["objects"].as_array().into_iter().flatten() {
            see_write(&mut seen, write, &cr, served);
        }
        for read in run["spec"]["reads"].as_array().into_iter().flatten() {
            see_read(&mut seen, read, &cr, served);
        }
    }
    Proposal {
        gvk: gvk.clone(),
        records: count,
        crs: crs.len(),
        rules: rules(&seen),
        unserved: seen.unserved.into_iter().collect(),
        not_understood: seen.not_understood,
    }
}

/// The CR a run was for.
struct Cr<'a> {
    group: &'a str,
    plural: Option<&'a str>,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl Cr<'_> {
    /// Whether a request is one every run may make on its own CR.
    fn allows(&self, verb: &str, group: &str, resource: &str, namespace: Option<&str>, name: &str) -> bool {
        let (plural, subresource) = split_subresource(resource);
        OWN_CR_VERBS.contains(&verb)
            && group == self.group
            && Some(plural) == self.plural
            && matches!(subresource, None | Some("status"))
            && namespace == self.namespace
            && name == self.name
    }
}

/// A run record of a CR of `gvk` (its group and kind; any version), and no plan's.
fn is_run_of(run: &Value, gvk: &Gvk) -> bool {
    let owner = &run["spec"]["owner"];
    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    run["spec"]["kind"] != "Plan" && group == gvk.group && owner["kind"].as_str() == Some(gvk.kind.as_str())
}

fn see_write(seen: &mut Seen, write: &Value, cr: &Cr, served: &Served) {
    let (Some(verb), Some(kind)) = (write["verb"].as_str(), write["kind"].as_str()) else {
        seen.not_understood += 1;
        return;
    };
    let Some(verb) = WRITE_VERBS.iter().find(|v| **v == verb) else {
        seen.not_understood += 1;
        return;
    };
    let group = write["group"].as_str().unwrap_or_default();
    let (kind, subresource) = split_subresource(kind);
    let Some(resource) = served.of_kind(group, kind) else {
        seen.unserved.insert(format!("{group}/{kind}"));
        return;
    };
    let path = match subresource {
        Some(sub) if is_name(sub) => format!("{}/{sub}", resource.plural),
        Some(_) => {
            seen.not_understood += 1;
            return;
        }
        None => resource.plural.clone(),
    };
    let namespace = write["namespace"].as_str();
    let name = write["name"].as_str().unwrap_or_default();
    if cr.allows(verb, group, &path, namespace, name) {
        return;
    }
    match place(resource, namespace, cr) {
        Some(place) => seen.add(group, &path, &place, &["get", verb]),
        None => seen.not_understood += 1,
    }
}

fn see_read(seen: &mut Seen, read: &Value, cr: &Cr, served: &Served) {
    let (Some(verb), Some(plural)) = (read["verb"].as_str(), read["resource"].as_str()) else {
        seen.not_understood += 1;
        return;
    };
    let verbs: &[&str] = match verb {
        "get" => &["get"],
        "list" => &["list", "watch"],
        _ => {
            seen.not_understood += 1;
            return;
        }
    };
    let group = read["group"].as_str().unwrap_or_default();
    let Some(resource) = served.of_resource(group, plural) else {
        seen.unserved.insert(format!("{group}/{plural}"));
        return;
    };
    let namespace = read["namespace"].as_str();
    let name = read["name"].as_str().unwrap_or_default();
    if verb == "get" && cr.allows(verb, group, plural, namespace, name) {
        return;
    }
    match place(resource, namespace, cr) {
        Some(place) => seen.add(group, plural, &place, verbs),
        None => seen.not_understood += 1,
    }
}

/// Where a request on `resource` in `namespace` was, for a run of `cr`; `None` for a namespace
/// that cannot be one.
fn place(resource: &ServedResource, namespace: Option<&str>, cr: &Cr) -> Option<Place> {
    match namespace {
        _ if !resource.namespaced => Some(Place::Cluster),
        None => Some(Place::Cluster),
        Some(namespace) if Some(namespace) == cr.namespace => Some(Place::Own),
        Some(namespace) if is_label(namespace) => Some(Place::Namespace(namespace.to_string())),
        Some(_) => None,
    }
}

/// The rules of what was seen: per resource one for the own namespace, one per set of verbs in
/// named namespaces and one for the cluster, each without the verbs the cluster rule already has.
fn rules(seen: &Seen) -> Vec<Rule> {
    let mut rules = Vec::new();
    for ((group, resource), places) in &seen.verbs {
        let cluster = places.get(&Place::Cluster).cloned().unwrap_or_default();
        let rule = |verbs: &BTreeSet<usize>, scope| Rule {
            api_groups: vec![group.clone()],
            resources: vec![resource.clone()],
            verbs: verbs.iter().map(|&i| permissions::VERBS[i].to_string()).collect(),
            resource_names: Vec::new(),
            scope,
        };
        let mut in_namespaces: BTreeMap<BTreeSet<usize>, Vec<String>> = BTreeMap::new();
        for (place, verbs) in places {
            let verbs: BTreeSet<usize> = verbs.difference(&cluster).copied().collect();
            match place {
                _ if verbs.is_empty() => {}
                Place::Own => rules.push(rule(&verbs, permissions::Scope::Own)),
                Place::Namespace(namespace) => {
                    in_namespaces.entry(verbs).or_default().push(namespace.clone())
                }
                Place::Cluster => {}
            }
        }
        for (verbs, namespaces) in in_namespaces {
            rules.push(rule(&verbs, permissions::Scope::Namespaces(namespaces)));
        }
        if !cluster.is_empty() {
            rules.push(rule(&cluster, permissions::Scope::Cluster));
        }
    }
    rules
}

/// `resource/subresource` (or `Kind/subresource`) split.
fn split_subresource(resource: &str) -> (&str, Option<&str>) {
    match resource.split_once('/') {
        Some((resource, sub)) => (resource, Some(sub)),
        None => (resource, None),
    }
}

/// A DNS label (a namespace's name).
fn is_label(text: &str) -> bool {
    (1..=63).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// A subresource's name.
fn is_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= 63 && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
}

/// The proposals as YAML: a header, then per kind a `# <group>/<version> <Kind>` line and the
/// `permissions:` list to paste under its watch.
#[must_use]
pub fn render(proposals: &[Proposal]) -> String {
    let mut out = String::from(
        "# permissions: proposed from the run history (ansible-operator rbac --from-history).\n\
         # Paste each list under its watch in watches.yaml. Each rule is what runs did: `get` goes with\n\
         # every write (a record leaves out reads of what its run wrote) and `watch` with every list.\n\
         # Anyone who may write AnsibleRuns in a namespace can write a record there: review the rules.\n",
    );
    for proposal in proposals {
        out.push_str(&format!("\n# {} {}\n", proposal.gvk.api_version(), proposal.gvk.kind));
        if proposal.records == 0 {
            out.push_str("# no run records where they were read: nothing to propose\n");
            continue;
        }
        let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        out.push_str(&format!(
            "# from {} of {}\n",
            plural(proposal.records, "run record"),
            plural(proposal.crs, "CR")
        ));
        if !proposal.unserved.is_empty() {
            let names: Vec<String> = proposal.unserved.iter().map(|name| quoted(name)).collect();
            out.push_str(&format!("# left out, not served by the API server: {}\n", names.join(", ")));
        }
        if proposal.not_understood > 0 {
            let entries = match proposal.not_understood {
                1 => "1 entry".to_string(),
                n => format!("{n} entries"),
            };
            out.push_str(&format!("# left out: {entries} in records that no request can be\n"));
        }
        if proposal.rules.is_empty() {
            out.push_str("permissions: []\n");
            continue;
        }
        out.push_str("permissions:\n");
        for rule in &proposal.rules {
            out.push_str(&format!("  - apiGroups: {}\n", list(&rule.api_groups)));
            out.push_str(&format!("    resources: {}\n", list(&rule.resources)));
            out.push_str(&format!("    verbs: {}\n", list(&rule.verbs)));
            match &rule.scope {
                permissions::Scope::Own => {}
                permissions::Scope::Namespaces(namespaces) => {
                    out.push_str(&format!("    namespaces: {}\n", list(namespaces)));
                }
                permissions::Scope::Cluster => out.push_str("    scope: cluster\n"),
            }
        }
    }
    out
}

/// A YAML flow list of strings.
fn list(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|item| quoted(item)).collect();
    format!("[{}]", items.join(", "))
}

/// A string as a YAML scalar: bare when it reads back as that string, else double-quoted.
fn quoted(text: &str) -> String {
    let plain = text.starts_with(|c: char| c.is_ascii_lowercase())
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-./".contains(&b))
        && !["true", "false", "null", "yes", "no", "on", "off", "y", "n"].contains(&text);
    if plain { text.to_string() } else { serde_json::to_string(text).unwrap_or_default() }
}

/// The proposal for each watch from the records of its runs in `namespaces` (empty: all; the
/// records of a cluster-scoped CR are in the operator's namespace), as YAML to paste under each.
pub async fn propose(client: &Client, watches: &[Watch], namespaces: &[String]) -> Result<String, Error> {
    let mut records = Vec::with_capacity(watches.len());
    for watch in watches {
        records.push(records_of(client, &watch.gvk, namespaces).await?);
    }
    let mut groups: BTreeSet<&str> = watches.iter().map(|watch| watch.gvk.group.as_str()).collect();
    for run in records.iter().flatten() {
        for request in ["objects", "reads"] {
            let named = run["spec"][request].as_array().into_iter().flatten();
            groups.extend(named.map(|entry| entry["group"].as_str().unwrap_or_default()));
        }
    }
    let groups: Vec<&str> = groups.into_iter().collect();
    let discovery = with_timeout(Discovery::new(client.clone()).filter(&groups).run())
        .await
        .map_err(|source| Error::Discover { source })?;
    let served = Served::from_discovery(&discovery);
    let proposals: Vec<Proposal> =
        watches.iter().zip(&records).map(|(watch, runs)| proposal(&watch.gvk, runs, &served)).collect();
    Ok(render(&proposals))
}

/// The run records of `gvk`'s CRs in `namespaces` (empty: all).
async fn records_of(client: &Client, gvk: &Gvk, namespaces: &[String]) -> Result<Vec<Value>, Error> {
    let kind = GroupVersionKind::gvk(record::GROUP, record::VERSION, record::KIND);
    let resource = ApiResource::from_gvk_with_plural(&kind, record::PLURAL);
    let params =
        ListParams::default().labels(&format!("{}={},!{}", record::OWNER_KIND, gvk.kind, record::PLAN));
    let places: Vec<Option<&str>> = match namespaces {
        [] => vec![None],
        namespaces => namespaces.iter().map(|namespace| Some(namespace.as_str())).collect(),
    };
    let mut records = Vec::new();
    for namespace in places {
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let listed = with_timeout(api.list(&params)).await.map_err(|source| match source.is_not_found() {
            true => Error::NoHistory { source },
            false => Error::ListRecords {
                gvk: gvk.clone(),
                namespace: namespace.unwrap_or("all namespaces").to_string(),
                source,
            },
        })?;
        records.extend(listed.items.into_iter().filter_map(|run| serde_json::to_value(run).ok()));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::watches::permissions::Scope;
    use crate::watches::{Defaults, Environment};

    fn memcached() -> Gvk {
        Gvk::new("cache.example.com", "v1alpha1", "Memcached")
    }

    fn served() -> Served {
        let mut served = Served::default();
        let resources = [
            ("", "ConfigMap", "configmaps", true),
            ("", "Secret", "secrets", true),
            ("", "Namespace", "namespaces", false),
            ("apps", "Deployment", "deployments", true),
            ("cache.example.com", "Memcached", "memcacheds", true),
        ];
        for (group, kind, plural, namespaced) in resources {
            served.insert(ServedResource {
                group: group.into(),
                kind: kind.into(),
                plural: plural.into(),
                namespaced,
            });
        }
        served
    }

    /// A record of a run of the Memcached `name` in `namespace`.
    fn run(namespace: &str, name: &str, objects: Value, reads: Value) -> Value {
        json!({
            "apiVersion": "ansible-operator.dev/v1alpha1",
            "kind": "AnsibleRun",
            "metadata": {"name": format!("{name}-1"), "namespace": namespace},
            "spec": {
                "owner": {"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
                          "namespace": namespace, "name": name, "uid": format!("uid-{namespace}-{name}")},
                "objects": objects,
                "reads": reads,
            },
        })
    }

    fn write(verb: &str, group: &str, kind: &str, namespace: Option<&str>, name: &str) -> Value {
        let mut write = json!({"verb": verb, "kind": kind, "name": name});
        if !group.is_empty() {
            write["group"] = json!(group);
        }
        if let Some(namespace) = namespace {
            write["namespace"] = json!(namespace);
        }
        write
    }

    fn rule(group: &str, resource: &str, verbs: &[&str], scope: Scope) -> Rule {
        Rule {
            api_groups: vec![group.into()],
            resources: vec![resource.into()],
            verbs: verbs.iter().map(|verb| verb.to_string()).collect(),
            resource_names: Vec::new(),
            scope,
        }
    }

    fn rules_of(records: &[Value]) -> Vec<Rule> {
        proposal(&memcached(), records, &served()).rules
    }

    #[test]
    fn writes_in_each_crs_own_namespace_are_narrowed_to_it_with_get_beside_each_write() {
        let records = [
            run(
                "a",
                "one",
                json!([
                    write("create", "", "ConfigMap", Some("a"), "one-memcached"),
                    write("patch", "apps", "Deployment", Some("a"), "one-memcached")
                ]),
                json!([]),
            ),
            run("b", "two", json!([write("update", "", "ConfigMap", Some("b"), "two-memcached")]), json!([])),
        ];
        assert_eq!(
            rules_of(&records),
            [
                rule("", "configmaps", &["get", "create", "update"], Scope::Own),
                rule("apps", "deployments", &["get", "patch"], Scope::Own),
            ]
        );
        let proposed = proposal(&memcached(), &records, &served());
        assert_eq!((proposed.records, proposed.crs), (2, 2));
    }

    #[test]
    fn verbs_of_several_runs_merge_once_each_in_the_usual_order() {
        let records: Vec<Value> = ["delete", "patch", "create", "patch"]
            .into_iter()
            .map(|verb| run("a", "one", json!([write(verb, "", "ConfigMap", Some("a"), "c")]), json!([])))
            .collect();
        assert_eq!(
            rules_of(&records),
            [rule("", "configmaps", &["get", "create", "patch", "delete"], Scope::Own)]
        );
    }

    #[test]
    fn a_subresource_is_a_resource_of_its_own_named_after_the_plural() {
        let records = [run(
            "a",
            "one",
            json!([
                write("patch", "apps", "Deployment/scale", Some("a"), "web"),
                write("update", "apps", "deployments/status", Some("a"), "web")
            ]),
            json!([]),
        )];
        assert_eq!(
            rules_of(&records),
            [
                rule("apps", "deployments/scale", &["get", "patch"], Scope::Own),
                rule("apps", "deployments/status", &["get", "update"], Scope::Own),
            ]
        );
    }

    #[test]
    fn what_a_run_may_always_do_on_its_own_cr_is_left_out_and_the_rest_is_not() {
        let records = [run(
            "a",
            "one",
            json!([
                write("patch", "cache.example.com", "Memcached/status", Some("a"), "one"),
                write("update", "cache.example.com", "Memcached", Some("a"), "one"),
                write("patch", "cache.example.com", "memcacheds/status", Some("a"), "one"),
                write("patch", "cache.example.com", "Memcached/status", Some("a"), "other"),
            ]),
            json!([{"verb": "get", "group": "cache.example.com", "version": "v1alpha1",
                    "resource": "memcacheds", "namespace": "a", "name": "one"}]),
        )];
        assert_eq!(
            rules_of(&records),
            [rule("cache.example.com", "memcacheds/status", &["get", "patch"], Scope::Own)],
            "another CR's status is no run's own"
        );
        let deleted = [run(
            "a",
            "one",
            json!([write("delete", "cache.example.com", "Memcached", Some("a"), "one")]),
            json!([]),
        )];
        assert_eq!(
            rules_of(&deleted),
            [rule("cache.example.com", "memcacheds", &["get", "delete"], Scope::Own)],
            "a run may not always delete its CR"
        );
    }

    #[test]
    fn other_namespaces_are_named_and_cluster_wide_requests_are_cluster_scoped() {
        let reads = json!([
            {"verb": "get", "version": "v1", "resource": "configmaps", "namespace": "shared", "name": "settings"},
            {"verb": "get", "version": "v1", "resource": "configmaps", "namespace": "common", "name": "settings"},
            {"verb": "list", "version": "v1", "resource": "configmaps", "namespace": "a"},
            {"verb": "list", "version": "v1", "resource": "secrets"},
            {"verb": "get", "version": "v1", "resource": "secrets", "namespace": "a", "name": "key"},
            {"verb": "list", "version": "v1", "resource": "secrets", "namespace": "a"},
        ]);
        let writes = json!([
            write("create", "", "Namespace", None, "one-workspace"),
            write("create", "", "ConfigMap", Some("shared"), "from-one"),
        ]);
        assert_eq!(
            rules_of(&[run("a", "one", writes, reads)]),
            [
                rule("", "configmaps", &["list", "watch"], Scope::Own),
                rule("", "configmaps", &["get"], Scope::Namespaces(vec!["common".into()])),
                rule("", "configmaps", &["get", "create"], Scope::Namespaces(vec!["shared".into()])),
                rule("", "namespaces", &["get", "create"], Scope::Cluster),
                rule("", "secrets", &["get"], Scope::Own),
                rule("", "secrets", &["list", "watch"], Scope::Cluster),
            ],
            "a list in the own namespace is left to the cluster rule that holds it already"
        );
        let same_verbs = [
            run("a", "one", json!([write("create", "", "ConfigMap", Some("x"), "c")]), json!([])),
            run("a", "one", json!([write("create", "", "ConfigMap", Some("y"), "c")]), json!([])),
        ];
        assert_eq!(
            rules_of(&same_verbs),
            [rule("", "configmaps", &["get", "create"], Scope::Namespaces(vec!["x".into(), "y".into()]))]
        );
    }

    #[test]
    fn a_cluster_scoped_crs_requests_name_their_namespace() {
        let mut record =
            run("a", "one", json!([write("create", "", "ConfigMap", Some("a"), "c")]), json!([]));
        record["spec"]["owner"].as_object_mut().unwrap().remove("namespace");
        assert_eq!(
            rules_of(&[record]),
            [rule("", "configmaps", &["get", "create"], Scope::Namespaces(vec!["a".into()]))]
        );
    }

    #[test]
    fn what_the_api_server_does_not_serve_or_no_request_can_be_is_left_out() {
        let writes = json!([
            write("create", "example.com", "Frobnicator", Some("a"), "f"),
            write("*", "", "ConfigMap", Some("a"), "c"),
            write("escalate", "", "ConfigMap", Some("a"), "c"),
            write("create", "", "ConfigMap", Some("../etc"), "c"),
            write("create", "", "ConfigMap/*", Some("a"), "c"),
            {"verb": "create"},
        ]);
        let reads = json!([
            {"verb": "get", "version": "v1", "resource": "*", "namespace": "a", "name": "x"},
            {"verb": "watch", "version": "v1", "resource": "secrets", "namespace": "a"},
        ]);
        let proposed = proposal(&memcached(), &[run("a", "one", writes, reads)], &served());
        assert_eq!(proposed.rules, []);
        assert_eq!(proposed.unserved, ["/*", "example.com/Frobnicator"]);
        assert_eq!(proposed.not_understood, 6);
        let rendered = render(&[proposed]);
        assert!(rendered.contains("permissions: []\n"), "{rendered}");
        assert!(
            rendered
                .contains("# left out, not served by the API server: \"/*\", \"example.com/Frobnicator\"\n"),
            "{rendered}"
        );
        assert!(rendered.contains("# left out: 6 entries in records that no request can be\n"), "{rendered}");
    }

    #[test]
    fn records_of_other_kinds_and_plans_are_not_read() {
        let mut other = run("a", "one", json!([write("create", "", "ConfigMap", Some("a"), "c")]), json!([]));
        other["spec"]["owner"]["apiVersion"] = json!("other.example.com/v1");
        let mut plan = run("a", "one", json!([write("create", "", "Secret", Some("a"), "s")]), json!([]));
        plan["spec"]["kind"] = json!("Plan");
        let proposed = proposal(&memcached(), &[other, plan], &served());
        assert_eq!((proposed.records, proposed.rules.len()), (0, 0));
        assert!(render(&[proposed]).contains("# no run records"));
    }

    #[test]
    fn the_rendered_snippet_pasted_under_its_watch_reads_back_as_the_proposed_rules() {
        let reads = json!([
            {"verb": "get", "version": "v1", "resource": "configmaps", "namespace": "shared", "name": "s"},
            {"verb": "list", "version": "v1", "resource": "secrets"},
        ]);
        let writes = json!([write("patch", "apps", "Deployment", Some("a"), "d")]);
        let proposed = proposal(&memcached(), &[run("a", "one", writes, reads)], &served());
        let rendered = render(std::slice::from_ref(&proposed));
        let snippet = rendered.split_once("# cache.example.com/v1alpha1 Memcached\n").unwrap().1;
        let pasted: String = snippet.lines().map(|line| format!("  {line}\n")).collect();
        let text = format!(
            "- version: v1alpha1\n  group: cache.example.com\n  kind: Memcached\n  role: memcached\n{pasted}"
        );
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 2 };
        let loaded =
            crate::watches::parse(&text, Path::new("watches.yaml"), &defaults, &Environment::new(repo))
                .unwrap_or_else(|error| panic!("{error}\n{text}"));
        assert_eq!(loaded.watches[0].extensions.permissions.as_ref(), Some(&proposed.rules), "{text}");
        assert_eq!(proposed.rules.len(), 3);
    }

    #[test]
    fn strings_from_records_are_quoted_unless_they_read_back_as_themselves() {
        assert_eq!(quoted("configmaps"), "configmaps");
        assert_eq!(quoted("apps.example.com"), "apps.example.com");
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted("yes"), "\"yes\"");
        assert_eq!(quoted("123"), "\"123\"");
        assert_eq!(quoted("a]\n- b: c"), "\"a]\\n- b: c\"");
        assert_eq!(list(&["".into(), "apps".into()]), "[\"\", apps]");
    }
}
