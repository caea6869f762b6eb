//! The pure renderer: watches and settings in, RBAC objects grouped into kustomize files out.
//!
//! Where a rule holds: `Watched` is where the operator watches CRs (the `--namespace` list as Roles,
//! else every namespace as a ClusterRole labelled [`SCOPE_LABEL`], which `deploy/namespaced` turns
//! into a Role of the operator's namespace); `Cluster` is a ClusterRole; `Namespace` a Role there.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::crds::{KindInfo, Kinds};
use crate::history::availability::NEEDED as HISTORY_NEEDED;
use crate::history::record::{GROUP as HISTORY_GROUP, PLURAL as HISTORY_PLURAL};
use crate::watches::Watch;
use crate::watches::permissions::{Rule, Scope, kind_account};

/// The label on a ClusterRole (and its binding) that holds only in the watched namespaces: every
/// namespace here, one namespace once `deploy/namespaced` turns it into a Role.
pub const SCOPE_LABEL: &str = "ansible-operator.dev/rbac-scope";
/// [`SCOPE_LABEL`]'s value.
pub const SCOPE_WATCHED: &str = "watched-namespaces";

/// Verbs with which a run can create an object through the proxy (a POST, or a PUT or server-side
/// apply that creates it): the kinds it may create this way are its dependents.
const CREATING: [&str; 4] = ["create", "update", "patch", "*"];
/// Verbs with which a run reads objects (what `watchReadResources` watches).
const READING: [&str; 4] = ["get", "list", "watch", "*"];

/// What the rendering depends on besides the watches.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file the watches came from, for messages.
    pub watches_file: String,
    /// The operator's namespace (its ServiceAccount, the Lease, the kind accounts).
    pub operator_namespace: String,
    /// The operator's ServiceAccount.
    pub service_account: String,
    /// The namespaces the operator watches (`WATCH_NAMESPACE`); empty: all.
    pub namespaces: Vec<String>,
    /// `--kind-identities`: each kind's runs act as their own ServiceAccount.
    pub kind_identities: bool,
    /// `--webhook-configuration-name`.
    pub webhook_configuration_name: String,
    /// `--run-history-limit`; a watch's `runHistoryLimit` wins.
    pub run_history_limit: usize,
    /// `--inject-owner-ref`: dependent watches are on.
    pub inject_owner_ref: bool,
}

/// One object with the comment written above it.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Why the object is there (comment lines, without `#`).
    pub comment: Vec<String>,
    /// The object.
    pub object: Value,
    /// For a Role or ClusterRole: why each rule is there, in order.
    pub reasons: Vec<String>,
}

/// One output file.
#[derive(Debug, Clone, PartialEq)]
pub struct File {
    /// Its name (`role.yaml`).
    pub name: String,
    /// Its documents.
    pub documents: Vec<Document>,
}

/// What [`render`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// The files, `kustomization.yaml` last.
    pub files: Vec<File>,
    /// What the user should know (a watch without `permissions`, a guessed plural).
    pub warnings: Vec<String>,
}

/// Where a rule holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// Where the operator watches CRs.
    Watched,
    /// Cluster-wide (and cluster-scoped resources).
    Cluster,
    /// One namespace.
    Namespace(String),
}

/// A rule with its reason.
#[derive(Debug, Clone, PartialEq)]
struct Reasoned {
    rule: PolicyRule,
    why: String,
}

/// The rules one subject gets, by place; rendered as Roles and ClusterRoles named after `base`.
struct Grants {
    base: String,
    subject: Subject,
    rules: BTreeMap<Place, Vec<Reasoned>>,
}

impl Grants {
    fn new(base: String, subject: Subject) -> Self {
        Self { base, subject, rules: BTreeMap::new() }
    }

    fn add(&mut self, place: Place, rule: PolicyRule, why: impl Into<String>) {
        let rules = self.rules.entry(place).or_default();
        if !rules.iter().any(|r| r.rule == rule) {
            rules.push(Reasoned { rule, why: why.into() });
        }
    }
}

fn policy(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(strings(groups)),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..Default::default()
    }
}

/// A binding's reference to the Role or ClusterRole `name`.
fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: kind.into(), name: name.into() }
}

fn service_account_subject(name: &str, namespace: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.into(),
        namespace: Some(namespace.into()),
        api_group: None,
    }
}

fn labels(watched: bool) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([("app.kubernetes.io/name".to_string(), "ansible-operator".to_string())]);
    if watched {
        labels.insert(SCOPE_LABEL.into(), SCOPE_WATCHED.into());
    }
    labels
}

fn meta(name: &str, namespace: Option<&str>, watched: bool) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels(watched)),
        ..Default::default()
    }
}

fn to_value<T: serde::Serialize>(object: &T) -> Value {
    // k8s-openapi's types always serialise (strings, lists and maps only).
    serde_json::to_value(object).unwrap_or(Value::Null)
}

/// A watch as RBAC sees it: its kind's plural and scope.
struct Kind<'a> {
    watch: &'a Watch,
    info: KindInfo,
    /// `<Kind>.<group>`, for messages.
    name: String,
}

impl Kind<'_> {
    /// Where "the CR's own namespace" is for this kind.
    fn own(&self) -> Place {
        if self.info.namespaced { Place::Watched } else { Place::Cluster }
    }

    fn resource(&self, subresource: &str) -> String {
        match subresource {
            "" => self.info.plural.clone(),
            sub => format!("{}/{sub}", self.info.plural),
        }
    }
}

/// Renders the RBAC for `watches`.
pub fn render(watches: &[Watch], kinds: &Kinds, settings: &Settings) -> Rendered {
    let mut warnings = Vec::new();
    let kinds: Vec<Kind> = watches
        .iter()
        .map(|watch| {
            let (info, guessed) = kinds.info(&watch.gvk);
            let name = format!("{}.{}", watch.gvk.kind, watch.gvk.group);
            if guessed && !is_builtin(&watch.gvk.group) {
                warnings.push(format!(
                    "{name}: no CRD for it (--crds): its plural is guessed as {:?} and it is taken to be namespaced",
                    info.plural
                ));
            }
            Kind { watch, info, name }
        })
        .collect();
    for kind in &kinds {
        if kind.watch.extensions.permissions.is_none() {
            let what = if settings.kind_identities {
                "its account gets only its own CR, so its runs can do nothing else"
            } else {
                "no rules are rendered for its runs, which act with whatever the operator holds"
            };
            warnings
                .push(format!("{}: {} declares no permissions: {what}", settings.watches_file, kind.name));
        }
    }

    let operator = service_account_subject(&settings.service_account, &settings.operator_namespace);
    let mut manager = Grants::new(format!("{}-manager", settings.service_account), operator.clone());
    operator_rules(&mut manager, &kinds, settings, &mut warnings);

    let mut files = vec![service_accounts(&kinds, settings)];
    let (roles, bindings) = documents(&manager, settings);
    files.push(File { name: "role.yaml".into(), documents: roles });
    files.push(File { name: "role_binding.yaml".into(), documents: bindings });
    // Kinds whose status is not the operator's keep their objects' last successful runs in
    // ConfigMaps of the operator's namespace (`--startup-resync=due`).
    let confirmations = kinds.iter().any(|kind| !kind.watch.manage_status);
    let (role, binding) = leader_election(settings, &operator, confirmations);
    files.push(File { name: "leader_election_role.yaml".into(), documents: vec![role] });
    files.push(File { name: "leader_election_role_binding.yaml".into(), documents: vec![binding] });
    // With kind identities every kind's runs act as its account (the proxy impersonates it for
    // each kind), with nothing beyond its own CR when it declares nothing.
    let accounts: Vec<String> = kinds.iter().map(|kind| kind_account(&kind.watch.gvk)).collect();
    if settings.kind_identities && !accounts.is_empty() {
        files.push(impersonation(settings, &operator, &accounts));
    }
    if kinds.iter().any(|kind| kind.watch.extensions.validate.is_some()) {
        files.push(webhook_configuration(settings));
    }
    for kind in &kinds {
        let rules = match &kind.watch.extensions.permissions {
            Some(rules) => rules.as_slice(),
            None if settings.kind_identities => &[],
            None => continue,
        };
        let account = kind_account(&kind.watch.gvk);
        let subject = if settings.kind_identities {
            service_account_subject(&account, &settings.operator_namespace)
        } else {
            operator.clone()
        };
        let mut grants = Grants::new(format!("{}-{account}", settings.service_account), subject);
        declared_rules(&mut grants, kind, rules, settings);
        let (mut documents, bindings) = documents(&grants, settings);
        documents.extend(bindings);
        files.push(File { name: format!("{account}.yaml"), documents });
    }
    files.push(kustomization(&files));
    Rendered { files, warnings }
}

/// Kinds served by Kubernetes itself, which have no CRD to read.
fn is_builtin(group: &str) -> bool {
    group.is_empty() || group.ends_with(".k8s.io") || !group.contains('.')
}

/// What the operator does with its own identity, derived from the code that does it.
fn operator_rules(manager: &mut Grants, kinds: &[Kind], settings: &Settings, warnings: &mut Vec<String>) {
    for kind in kinds {
        let group = kind.watch.gvk.group.as_str();
        let name = &kind.name;
        manager.add(
            kind.own(),
            policy(&[group], &[&kind.resource("")], &["get", "list", "watch", "update", "patch"]),
            format!("{name}: the controller lists and watches the CRs and reads one before a run; the finalizer, the reconcile request and shard labels are updates and patches"),
        );
        manager.add(
            kind.own(),
            policy(&[group], &[&kind.resource("status")], &["get", "update", "patch"]),
            format!("{name}: the Running/Successful/Failure conditions, and k8s_status"),
        );
        manager.add(
            kind.own(),
            policy(&[group], &[&kind.resource("finalizers")], &["update"]),
            format!("{name}: owner references with blockOwnerDeletion on children need it where OwnerReferencesPermissionEnforcement is on"),
        );
        manager.add(
            if kind.info.namespaced { Place::Watched } else { Place::Namespace("default".into()) },
            policy(&[""], &["events"], &["create", "patch"]),
            "Events about the CRs (the recorder and k8s_event), patched when they repeat",
        );
        if kind.watch.extensions.ssh_key_secret.is_some() {
            manager.add(
                kind.own(),
                policy(&[""], &["secrets"], &["get"]),
                format!("{name}: sshKeySecret, the one Secret a CR names, read before each run (never listed or watched)"),
            );
        }
        let limit = kind.watch.extensions.run_history_limit.unwrap_or(settings.run_history_limit);
        if limit > 0 {
            let place = if kind.info.namespaced {
                Place::Watched
            } else {
                Place::Namespace(settings.operator_namespace.clone())
            };
            let verbs: Vec<&str> =
                HISTORY_NEEDED.iter().filter(|(sub, _)| sub.is_empty()).map(|(_, verb)| *verb).collect();
            manager.add(
                place.clone(),
                policy(&[HISTORY_GROUP], &[HISTORY_PLURAL], &verbs),
                "the run history: an AnsibleRun per run, written with server-side apply, listed by owner, the oldest deleted",
            );
            let status = format!("{HISTORY_PLURAL}/status");
            let verbs: Vec<&str> =
                HISTORY_NEEDED.iter().filter(|(sub, _)| *sub == "status").map(|(_, verb)| *verb).collect();
            manager.add(
                place,
                policy(&[HISTORY_GROUP], &[&status], &verbs),
                "a resync that changed nothing confirms the latest record",
            );
        }
        if settings.inject_owner_ref && kind.watch.watch_dependent_resources {
            dependents(manager, kind, warnings);
        }
        if kind.watch.extensions.watch_read_resources {
            read_watches(manager, kind);
        }
    }
    manager.add(
        Place::Cluster,
        policy(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
        "the API and console check each caller's bearer token",
    );
    manager.add(
        Place::Cluster,
        policy(&["authorization.k8s.io"], &["subjectaccessreviews"], &["create"]),
        "the API and console check what each caller may do",
    );
    if kinds.iter().any(|kind| kind.watch.extensions.validate.is_some()) {
        let mut rule = policy(
            &["admissionregistration.k8s.io"],
            &["validatingwebhookconfigurations"],
            &["get", "patch"],
        );
        rule.resource_names = Some(vec![settings.webhook_configuration_name.clone()]);
        manager.add(
            Place::Cluster,
            rule,
            "validate: the operator's own ValidatingWebhookConfiguration (webhook_configuration.yaml), patched at start with server-side apply; never another",
        );
    }
    let converted: Vec<String> = kinds
        .iter()
        .filter(|kind| kind.watch.extensions.convert.is_some())
        .map(|kind| format!("{}.{}", kind.info.plural, kind.watch.gvk.group))
        .collect();
    if !converted.is_empty() {
        let mut rule = policy(&["apiextensions.k8s.io"], &["customresourcedefinitions"], &["get", "patch"]);
        rule.resource_names = Some(converted);
        manager.add(
            Place::Cluster,
            rule,
            "convert: the CRDs of the kinds with a convert playbook, whose spec.conversion is patched at start to call the operator; no other CRD",
        );
    }
}

/// The kinds a watch's runs may create are watched by the operator for their owners: list and
/// watch where it watches (a `scope: cluster` rule's kind may be cluster-scoped: cluster-wide);
/// get to tell, before a replace or an apply, whether the write creates the object; patch to
/// unlink an object somebody else created meanwhile, and to move a child to its owner's shard.
fn dependents(manager: &mut Grants, kind: &Kind, warnings: &mut Vec<String>) {
    let Some(rules) = &kind.watch.extensions.permissions else { return };
    for rule in rules {
        if !rule.verbs.iter().any(|verb| CREATING.contains(&verb.as_str())) {
            continue;
        }
        let place = match rule.scope {
            Scope::Cluster => Place::Cluster,
            Scope::Own | Scope::Namespaces(_) => Place::Watched,
        };
        for group in &rule.api_groups {
            for resource in rule.resources.iter().filter(|r| !r.contains('/')) {
                if group == "*" || resource == "*" {
                    warnings.push(format!(
                        "{}: its permissions let it create {resource:?} in group {group:?}: the operator's dependent watches of those cannot be rendered, grant them yourself",
                        kind.name
                    ));
                    continue;
                }
                manager.add(
                    place.clone(),
                    policy(&[group], &[resource], &["get", "list", "watch", "patch"]),
                    format!("{}: dependent watches of the {resource} its runs create; the read before a replace or apply; unlinking an object someone else created", kind.name),
                );
            }
        }
    }
}

/// `watchReadResources`: the operator watches what a run read, where the run may read it.
fn read_watches(manager: &mut Grants, kind: &Kind) {
    let Some(rules) = &kind.watch.extensions.permissions else { return };
    for rule in rules.iter().filter(|rule| rule.verbs.iter().any(|v| READING.contains(&v.as_str()))) {
        for place in places(kind, &rule.scope) {
            let mut read = PolicyRule {
                api_groups: Some(rule.api_groups.clone()),
                resources: Some(rule.resources.clone()),
                verbs: vec!["list".into(), "watch".into()],
                ..Default::default()
            };
            if !rule.resource_names.is_empty() {
                read.resource_names = Some(rule.resource_names.clone());
            }
            manager.add(
                place,
                read,
                format!("{}: watchReadResources, a watch of what its runs read", kind.name),
            );
        }
    }
}

/// Where a declared rule holds.
fn places(kind: &Kind, scope: &Scope) -> Vec<Place> {
    match scope {
        Scope::Own => vec![kind.own()],
        Scope::Namespaces(namespaces) => namespaces.iter().cloned().map(Place::Namespace).collect(),
        Scope::Cluster => vec![Place::Cluster],
    }
}

/// A kind's declared rules, and with its own identity what a run may always do to its own CR.
fn declared_rules(grants: &mut Grants, kind: &Kind, rules: &[Rule], settings: &Settings) {
    if settings.kind_identities {
        let group = kind.watch.gvk.group.as_str();
        grants.add(
            kind.own(),
            policy(&[group], &[&kind.resource(""), &kind.resource("status")], &["get", "update", "patch"]),
            "a run reads and updates its own CR and its status (k8s_status)",
        );
    }
    for (index, rule) in rules.iter().enumerate() {
        let mut policy = PolicyRule {
            api_groups: Some(rule.api_groups.clone()),
            resources: Some(rule.resources.clone()),
            verbs: rule.verbs.clone(),
            ..Default::default()
        };
        if !rule.resource_names.is_empty() {
            policy.resource_names = Some(rule.resource_names.clone());
        }
        for place in places(kind, &rule.scope) {
            grants.add(place, policy.clone(), format!("permissions[{index}] of {}", kind.name));
        }
    }
}

/// The Roles and ClusterRoles of `grants` with their bindings.
fn documents(grants: &Grants, settings: &Settings) -> (Vec<Document>, Vec<Document>) {
    // Watched rules join the namespace's own rules when the namespaces are known.
    let mut resolved: BTreeMap<Place, Vec<Reasoned>> = BTreeMap::new();
    for (place, rules) in &grants.rules {
        let targets = match place {
            Place::Watched if !settings.namespaces.is_empty() => {
                settings.namespaces.iter().cloned().map(Place::Namespace).collect()
            }
            other => vec![other.clone()],
        };
        for target in targets {
            let into = resolved.entry(target).or_default();
            for rule in rules {
                if !into.iter().any(|r| r.rule == rule.rule) {
                    into.push(rule.clone());
                }
            }
        }
    }
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
    let subject = &grants.subject;
    let who =
        format!("{} {}/{}", subject.kind, subject.namespace.as_deref().unwrap_or_default(), subject.name);
    for (place, rules) in resolved {
        let reasons: Vec<String> = rules.iter().map(|r| r.why.clone()).collect();
        let policy_rules: Vec<PolicyRule> = rules.into_iter().map(|r| r.rule).collect();
        let (role, binding) = match &place {
            Place::Watched | Place::Cluster => {
                let watched = place == Place::Watched;
                let name = if watched { grants.base.clone() } else { format!("{}-cluster", grants.base) };
                let role = ClusterRole {
                    metadata: meta(&name, None, watched),
                    rules: Some(policy_rules),
                    aggregation_rule: None,
                };
                let binding = ClusterRoleBinding {
                    metadata: meta(&name, None, watched),
                    role_ref: role_ref("ClusterRole", &name),
                    subjects: Some(vec![subject.clone()]),
                };
                let (where_, comment) = if watched {
                    (
                        "in every namespace (the operator watches all)",
                        format!(
                            "{SCOPE_LABEL}: deploy/namespaced makes it a Role of the operator's namespace"
                        ),
                    )
                } else {
                    ("cluster-wide", "cluster-scoped or cluster-wide rights".to_string())
                };
                (
                    Document {
                        comment: vec![format!("What {who} may do {where_}; {comment}.")],
                        object: to_value(&role),
                        reasons,
                    },
                    Document {
                        comment: vec![format!("Grants {name} to {who}.")],
                        object: to_value(&binding),
                        reasons: Vec::new(),
                    },
                )
            }
            Place::Namespace(namespace) => {
                let name = grants.base.clone();
                let role = Role { metadata: meta(&name, Some(namespace), false), rules: Some(policy_rules) };
                let binding = RoleBinding {
                    metadata: meta(&name, Some(namespace), false),
                    role_ref: role_ref("Role", &name),
                    subjects: Some(vec![subject.clone()]),
                };
                (
                    Document {
                        comment: vec![format!("What {who} may do in namespace {namespace}.")],
                        object: to_value(&role),
                        reasons,
                    },
                    Document {
                        comment: vec![format!("Grants {name} to {who} in namespace {namespace}.")],
                        object: to_value(&binding),
                        reasons: Vec::new(),
                    },
                )
            }
        };
        roles.push(role);
        bindings.push(binding);
    }
    (roles, bindings)
}

/// The operator's ServiceAccount and, with kind identities, one per kind with permissions.
fn service_accounts(kinds: &[Kind], settings: &Settings) -> File {
    let namespace = Some(settings.operator_namespace.as_str());
    let mut documents = vec![Document {
        comment: vec!["The identity the operator acts as.".into()],
        object: to_value(&ServiceAccount {
            metadata: meta(&settings.service_account, namespace, false),
            ..Default::default()
        }),
        reasons: Vec::new(),
    }];
    if settings.kind_identities {
        for kind in kinds {
            let account = ServiceAccount {
                metadata: meta(&kind_account(&kind.watch.gvk), namespace, false),
                // Impersonated by the operator only, never mounted into a Pod.
                automount_service_account_token: Some(false),
                ..Default::default()
            };
            documents.push(Document {
                comment: vec![format!(
                    "{}: its runs act as this account (--kind-identities), with its permissions only.",
                    kind.name
                )],
                object: to_value(&account),
                reasons: Vec::new(),
            });
        }
    }
    File { name: "service_account.yaml".into(), documents }
}

/// The leader-election Role (the Lease and its Event) in the operator's namespace, and its binding;
/// with `confirmations`, the ConfigMaps of kinds without the operator's status too.
fn leader_election(settings: &Settings, operator: &Subject, confirmations: bool) -> (Document, Document) {
    let name = format!("{}-leader-election", settings.service_account);
    let namespace = Some(settings.operator_namespace.as_str());
    let mut rules = vec![
        policy(
            &["coordination.k8s.io"],
            &["leases"],
            &["get", "list", "watch", "create", "update", "patch", "delete"],
        ),
        policy(&[""], &["events"], &["create", "patch"]),
    ];
    let mut reasons = vec![
        "read the Lease, create it on first start, renew it, remove a stale one; the shard Leases"
            .to_string(),
        "the LeaderElection Event on the Lease".to_string(),
    ];
    if confirmations {
        rules.push(policy(&[""], &["configmaps"], &["get", "create", "patch"]));
        reasons.push(
            "the last successful run of each object of a kind with manageStatus: false (--startup-resync=due)".to_string(),
        );
    }
    let role = Role { metadata: meta(&name, namespace, false), rules: Some(rules) };
    let binding = RoleBinding {
        metadata: meta(&name, namespace, false),
        role_ref: role_ref("Role", &name),
        subjects: Some(vec![operator.clone()]),
    };
    (
        Document {
            comment: vec!["Leader election and sharding (--leader-elect, --sharding): the Leases live in the operator's namespace.".into()],
            object: to_value(&role),
            reasons,
        },
        Document { comment: vec![format!("Grants {name} to the operator.")], object: to_value(&binding), reasons: Vec::new() },
    )
}

/// With kind identities: the operator may impersonate the kind accounts, and no other account.
fn impersonation(settings: &Settings, operator: &Subject, accounts: &[String]) -> File {
    let name = format!("{}-kind-identities", settings.service_account);
    let namespace = Some(settings.operator_namespace.as_str());
    let mut rule = policy(&[""], &["serviceaccounts"], &["impersonate"]);
    rule.resource_names = Some(accounts.to_vec());
    let role = Role { metadata: meta(&name, namespace, false), rules: Some(vec![rule]) };
    let binding = RoleBinding {
        metadata: meta(&name, namespace, false),
        role_ref: role_ref("Role", &name),
        subjects: Some(vec![operator.clone()]),
    };
    File {
        name: "kind_identities_role.yaml".into(),
        documents: vec![
            Document {
                comment: vec![
                    "--kind-identities: the operator sends each run's requests as its kind's account.".into(),
                ],
                object: to_value(&role),
                reasons: vec!["the kind accounts, by name only".into()],
            },
            Document {
                comment: vec![format!("Grants {name} to the operator.")],
                object: to_value(&binding),
                reasons: Vec::new(),
            },
        ],
    }
}

/// The operator's ValidatingWebhookConfiguration, created here without webhooks: the operator may
/// only patch it (by name), and fills in its webhooks at start.
fn webhook_configuration(settings: &Settings) -> File {
    let mut metadata = meta(&settings.webhook_configuration_name, None, false);
    if let Some(labels) = metadata.labels.as_mut() {
        labels.insert("app.kubernetes.io/managed-by".into(), "ansible-operator".into());
    }
    let configuration = ValidatingWebhookConfiguration { metadata, webhooks: None };
    File {
        name: "webhook_configuration.yaml".into(),
        documents: vec![Document {
            comment: vec![
                "The watches' validate webhooks: created here, empty; the operator patches its webhooks in at start".into(),
                "(server-side apply), and may patch this one object only.".into(),
            ],
            object: to_value(&configuration),
            reasons: Vec::new(),
        }],
    }
}

/// `kustomization.yaml` listing the other files.
fn kustomization(files: &[File]) -> File {
    let resources: Vec<Value> = files.iter().map(|file| Value::from(file.name.clone())).collect();
    let object = serde_json::json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    });
    File {
        name: "kustomization.yaml".into(),
        documents: vec![Document { comment: Vec::new(), object, reasons: Vec::new() }],
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::watches::{Defaults, Environment, Gvk};

    fn watches(text: &str) -> Vec<Watch> {
        let env = Environment::new(env!("CARGO_MANIFEST_DIR"));
        let defaults = Defaults { max_concurrent_reconciles: 1, ansible_verbosity: 0 };
        crate::watches::parse(text, Path::new("watches.yaml"), &defaults, &env)
            .expect("watches parse")
            .watches
    }

    fn settings(namespaces: &[&str], kind_identities: bool) -> Settings {
        Settings {
            watches_file: "watches.yaml".into(),
            operator_namespace: "op".into(),
            service_account: "ansible-operator".into(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            kind_identities,
            webhook_configuration_name: "ansible-operator-validate".into(),
            run_history_limit: 10,
            inject_owner_ref: true,
        }
    }

    const APP: &str = "- {version: v1, group: apps.example.com, kind: App, playbook: playbooks/etcdbackup.yml,
   permissions: [
     {apiGroups: [apps], resources: [deployments], verbs: [get, create]},
     {apiGroups: [\"\"], resources: [configmaps], verbs: [get], namespaces: [shared], resourceNames: [settings]},
     {apiGroups: [\"\"], resources: [namespaces], verbs: [get], scope: cluster}]}
";
    const BARE: &str =
        "- {version: v1, group: apps.example.com, kind: Bare, playbook: playbooks/etcdbackup.yml}\n";

    /// Every Role and ClusterRole: (kind, name, namespace) with its rules.
    fn roles(rendered: &Rendered) -> Vec<(String, String, String, Value)> {
        rendered
            .files
            .iter()
            .flat_map(|file| &file.documents)
            .filter(|doc| doc.object["kind"] == "Role" || doc.object["kind"] == "ClusterRole")
            .map(|doc| {
                let o = &doc.object;
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&o["kind"]),
                    text(&o["metadata"]["name"]),
                    text(&o["metadata"]["namespace"]),
                    o["rules"].clone(),
                )
            })
            .collect()
    }

    fn find<'a>(roles: &'a [(String, String, String, Value)], kind: &str, name: &str, ns: &str) -> &'a Value {
        &roles
            .iter()
            .find(|(k, n, s, _)| k == kind && n == name && s == ns)
            .unwrap_or_else(|| panic!("no {kind} {name} in {ns:?}: {roles:#?}"))
            .3
    }

    fn has(rules: &Value, rule: Value) -> bool {
        rules.as_array().unwrap().contains(&rule)
    }

    #[test]
    fn own_namespace_rules_are_a_role_in_each_watched_namespace_else_a_cluster_role() {
        let watches = watches(APP);
        let deployments =
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create"]});

        let rendered = render(&watches, &Kinds::default(), &settings(&[], false));
        let all = roles(&rendered);
        let kind = "ansible-operator-run-app.apps.example.com";
        assert!(has(find(&all, "ClusterRole", kind, ""), deployments.clone()));
        let manager = find(&all, "ClusterRole", "ansible-operator-manager", "");
        assert!(has(
            manager,
            json!({"apiGroups": ["apps.example.com"], "resources": ["apps"], "verbs": ["get", "list", "watch", "update", "patch"]})
        ));

        let rendered = render(&watches, &Kinds::default(), &settings(&["a", "b"], false));
        let all = roles(&rendered);
        for namespace in ["a", "b"] {
            assert!(has(find(&all, "Role", kind, namespace), deployments.clone()), "{namespace}");
            find(&all, "Role", "ansible-operator-manager", namespace);
        }
        assert!(
            !all.iter().any(|(k, n, _, _)| k == "ClusterRole" && n == kind),
            "no ClusterRole for own-namespace rules: {all:#?}"
        );
        // namespaces: [shared] is a Role there, scope: cluster a ClusterRole, whatever is watched.
        let shared = json!({"apiGroups": [""], "resourceNames": ["settings"], "resources": ["configmaps"], "verbs": ["get"]});
        assert_eq!(find(&all, "Role", kind, "shared"), &json!([shared]));
        let cluster = find(&all, "ClusterRole", &format!("{kind}-cluster"), "");
        assert_eq!(cluster, &json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]}]));
        // The API's reviews are cluster-wide either way.
        assert!(has(
            find(&all, "ClusterRole", "ansible-operator-manager-cluster", ""),
            json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]})
        ));
    }

    #[test]
    fn the_operator_watches_what_a_kind_creates_where_it_watches_and_its_plural_comes_from_the_crd() {
        let mut kinds = Kinds::default();
        kinds.insert("apps.example.com", "App", KindInfo { plural: "applications".into(), namespaced: true });
        let all = roles(&render(&watches(APP), &kinds, &settings(&["a"], false)));
        let manager = find(&all, "Role", "ansible-operator-manager", "a");
        assert!(has(
            manager,
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch", "patch"]})
        ));
        assert!(has(
            manager,
            json!({"apiGroups": ["apps.example.com"], "resources": ["applications/status"], "verbs": ["get", "update", "patch"]})
        ));
        // Read-only rules make no dependents.
        assert!(!manager.to_string().contains("configmaps"), "{manager}");

        let off = watches(&APP.replace(
            "playbooks/etcdbackup.yml,",
            "playbooks/etcdbackup.yml, watchDependentResources: false,",
        ));
        let all = roles(&render(&off, &kinds, &settings(&["a"], false)));
        assert!(!find(&all, "Role", "ansible-operator-manager", "a").to_string().contains("deployments"));
    }

    #[test]
    fn kind_identities_bind_each_kinds_rules_to_its_own_account_which_only_the_operator_may_impersonate() {
        let rendered = render(&watches(&format!("{APP}{BARE}")), &Kinds::default(), &settings(&[], true));
        let account = kind_account(&Gvk::new("apps.example.com", "v1", "App"));
        let bindings: Vec<&Value> = rendered
            .files
            .iter()
            .filter(|file| file.name == format!("{account}.yaml"))
            .flat_map(|file| &file.documents)
            .map(|doc| &doc.object)
            .filter(|o| o["kind"].as_str().unwrap().ends_with("Binding"))
            .collect();
        assert_eq!(bindings.len(), 3, "own, shared, cluster");
        for binding in bindings {
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": account, "namespace": "op"}])
            );
        }
        let all = roles(&rendered);
        let bare = kind_account(&Gvk::new("apps.example.com", "v1", "Bare"));
        let impersonate = find(&all, "Role", "ansible-operator-kind-identities", "op");
        assert_eq!(
            impersonate,
            &json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": [account, bare], "verbs": ["impersonate"]}])
        );
        // The account may work on its own CR, as the proxy lets a run.
        let own = find(&all, "ClusterRole", &format!("ansible-operator-{account}"), "");
        assert!(has(
            own,
            json!({"apiGroups": ["apps.example.com"], "resources": ["apps", "apps/status"], "verbs": ["get", "update", "patch"]})
        ));
        let accounts = rendered.files.iter().find(|f| f.name == "service_account.yaml").unwrap();
        let names: Vec<&Value> = accounts.documents.iter().map(|d| &d.object["metadata"]["name"]).collect();
        assert_eq!(
            names,
            [&json!("ansible-operator"), &json!(account), &json!(bare)],
            "a kind without permissions has an account too: the proxy acts as it"
        );
        let bare_own = find(&all, "ClusterRole", &format!("ansible-operator-{bare}"), "");
        assert_eq!(
            bare_own,
            &json!([{"apiGroups": ["apps.example.com"], "resources": ["bares", "bares/status"], "verbs": ["get", "update", "patch"]}]),
            "its own CR, nothing else"
        );
        assert!(rendered.warnings.iter().any(|w| {
            w.contains("Bare.apps.example.com declares no permissions: its account gets only its own CR")
        }));
    }

    #[test]
    fn a_watch_without_permissions_is_named_in_a_warning_and_gets_no_rules_of_its_own() {
        let rendered = render(&watches(&format!("{APP}{BARE}")), &Kinds::default(), &settings(&[], false));
        let warnings: Vec<&String> = rendered.warnings.iter().filter(|w| w.contains("permissions")).collect();
        assert_eq!(warnings.len(), 1, "{:?}", rendered.warnings);
        assert!(warnings[0].contains("Bare.apps.example.com declares no permissions"), "{}", warnings[0]);
        assert!(!rendered.files.iter().any(|file| file.name.contains("bare")));
        assert!(
            rendered.warnings.iter().any(|w| w.contains("its plural is guessed as \"bares\"")),
            "{:?}",
            rendered.warnings
        );
        let kustomization = &rendered.files.last().unwrap().documents[0].object;
        let listed: Vec<&str> =
            kustomization["resources"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let names: Vec<&str> =
            rendered.files.iter().map(|f| f.name.as_str()).filter(|n| *n != "kustomization.yaml").collect();
        assert_eq!(listed, names);
    }

    #[test]
    fn validate_creates_the_empty_webhook_configuration_and_grants_only_get_and_patch_on_it_by_name() {
        let rendered = render(
            &watches(&APP.replace("permissions:", "validate: playbooks/etcdbackup.yml, permissions:")),
            &Kinds::default(),
            &settings(&[], false),
        );
        let all = roles(&rendered);
        let cluster = find(&all, "ClusterRole", "ansible-operator-manager-cluster", "");
        assert!(has(
            cluster,
            json!({"apiGroups": ["admissionregistration.k8s.io"], "resourceNames": ["ansible-operator-validate"], "resources": ["validatingwebhookconfigurations"], "verbs": ["get", "patch"]})
        ));
        let file = rendered
            .files
            .iter()
            .find(|f| f.name == "webhook_configuration.yaml")
            .expect("the configuration");
        let configuration = &file.documents[0].object;
        assert_eq!(configuration["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(configuration["metadata"]["name"], "ansible-operator-validate");
        assert!(configuration.get("webhooks").is_none(), "{configuration}");
        let without = render(&watches(APP), &Kinds::default(), &settings(&[], false));
        assert!(!format!("{without:?}").contains("validatingwebhookconfigurations"));
    }

    #[test]
    fn convert_grants_get_and_patch_on_the_kinds_own_crd_by_name_only() {
        let rendered = render(
            &watches(&APP.replace("permissions:", "convert: playbooks/etcdbackup.yml, permissions:")),
            &Kinds::default(),
            &settings(&[], false),
        );
        let all = roles(&rendered);
        let cluster = find(&all, "ClusterRole", "ansible-operator-manager-cluster", "");
        assert!(
            has(
                cluster,
                json!({"apiGroups": ["apiextensions.k8s.io"], "resourceNames": ["apps.apps.example.com"], "resources": ["customresourcedefinitions"], "verbs": ["get", "patch"]})
            ),
            "{cluster:?}"
        );
        let without = render(&watches(APP), &Kinds::default(), &settings(&[], false));
        assert!(!format!("{without:?}").contains("customresourcedefinitions"));
    }

    #[test]
    fn no_run_history_grants_no_ansibleruns() {
        let mut settings = settings(&[], false);
        settings.run_history_limit = 0;
        let rendered = render(&watches(APP), &Kinds::default(), &settings);
        assert!(!format!("{rendered:?}").contains("ansibleruns"));
        let kept = render(
            &watches(&APP.replace("permissions:", "runHistoryLimit: 3, permissions:")),
            &Kinds::default(),
            &settings,
        );
        assert!(format!("{kept:?}").contains("ansibleruns/status"));
    }

    #[test]
    fn a_kind_without_our_status_lets_the_operator_keep_its_confirmations_in_its_namespace() {
        let leader_role = |text: &str| {
            let rendered = render(&watches(text), &Kinds::default(), &settings(&[], false));
            let file =
                rendered.files.iter().find(|f| f.name == "leader_election_role.yaml").expect("the role");
            file.documents[0].object.clone()
        };
        let configmaps =
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]});
        let role = leader_role(&APP.replace("permissions:", "manageStatus: false, permissions:"));
        assert_eq!(role["metadata"]["namespace"], "op");
        assert!(role["rules"].as_array().unwrap().contains(&configmaps), "{role}");
        let role = leader_role(APP);
        assert!(!role["rules"].as_array().unwrap().contains(&configmaps), "{role}");
    }
}
