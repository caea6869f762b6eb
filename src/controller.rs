//! One controller per watch entry: discovery of the kind, a filtered watch per watched namespace
//! (upstream's triggers, §6.1), and kube-runtime's queue driving [`reconcile`].

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::Selector;
use kube::discovery::{self, Scope};
use kube::error::DiscoveryError;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::cached::{Cached, Kind, Standing};
use crate::decoded::{self, Decoded, Undecodable};
use crate::health::SyncToken;
use crate::history::confirmations::Confirmations;
use crate::kubeapi;
use crate::metrics::{self, Metrics};
use crate::proxy::Proxy;
use crate::proxy::dependents::Dependents;
use crate::reconcile::schedule::StartupResync;
use crate::reconcile::{self, Context, Settings};
use crate::watch_errors::WatchErrors;
use crate::watches::{Gvk, Watch, WatchFields};

/// Why a controller could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server does not serve the kind.
    #[error("watch {gvk}: the API server does not serve this kind (is its CRD installed?)")]
    NotServed {
        /// The watched kind.
        gvk: Gvk,
    },
    /// Asking the API server about the kind failed (it may still serve it).
    #[error("watch {gvk}: discover the kind")]
    Discovery {
        /// The watched kind.
        gvk: Gvk,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The label selector cannot be used.
    #[error("watch {gvk}: invalid selector")]
    Selector {
        /// The watched kind.
        gvk: Gvk,
        /// Cause.
        #[source]
        source: kube::core::ParseExpressionError,
    },
}

/// A watch entry resolved against the API server, ready to run.
pub struct WatchController {
    ctx: Arc<Context>,
    /// The watch entry's own selector.
    selector: Selector,
    dependents: Option<Arc<Dependents>>,
}

impl WatchController {
    /// Discovers the kind and prepares its controller.
    pub async fn new(
        client: Client,
        watch: Watch,
        settings: Arc<Settings>,
        proxy: Arc<Proxy>,
        dependents: Option<Arc<Dependents>>,
        metrics: Arc<Metrics>,
    ) -> Result<Self, Error> {
        let gvk = watch.gvk.clone();
        let (resource, capabilities) = discovery::pinned_kind(&client, &gvk.to_kube())
            .await
            .map_err(|source| discovery_error(&gvk, source))?;
        let selector = Selector::try_from(watch.selector.clone())
            .map_err(|source| Error::Selector { gvk: gvk.clone(), source })?;
        let slots = reconcile::Slots::new(watch.max_concurrent_reconciles);
        let confirmations = match !watch.manage_status && settings.startup_resync == StartupResync::Due {
            true => Some(Confirmations::load(client.clone(), settings.history.home(), &gvk).await),
            false => None,
        };
        let ctx = Context {
            client,
            watch,
            kind: Arc::new(resource.clone()),
            resource,
            namespaced: capabilities.scope == Scope::Namespaced,
            settings,
            backoff: Default::default(),
            slots,
            seen: Default::default(),
            confirmations,
            paused: Default::default(),
            proxy,
            gvk_label: metrics::gvk_label(&gvk.group, &gvk.version, &gvk.kind),
            controller_label: metrics::controller_label(&gvk.kind, &gvk.version),
            metrics,
        };
        let concurrency = i64::try_from(ctx.watch.max_concurrent_reconciles).unwrap_or(i64::MAX);
        ctx.metrics.set_max_concurrent(&ctx.controller_label, concurrency);
        ctx.metrics.set_paused_crs(&ctx.gvk_label, 0);
        Ok(Self { ctx: Arc::new(ctx), selector, dependents })
    }

    /// The kind, as the API serves it.
    pub fn kind(&self) -> crate::api::Kind {
        crate::api::Kind {
            resource: self.ctx.resource.clone(),
            namespaced: self.ctx.namespaced,
            composer: Arc::new(reconcile::inputs::Composer {
                watch: self.ctx.watch.clone(),
                inputs: self.ctx.settings.inputs(),
            }),
            planner: crate::reconcile::Planner::new(self.ctx.clone()),
        }
    }

    /// The kind as the sharder assigns it: its resource, scopes and the watch's own selector.
    pub fn sharded_kind(&self, namespaces: &[String]) -> crate::sharding::sharder::Kind {
        crate::sharding::sharder::Kind {
            resource: self.ctx.resource.clone(),
            namespaced: self.ctx.namespaced,
            scopes: self.scopes(namespaces),
            selector: self.selector.clone(),
            field_selector: self.ctx.watch.extensions.field_selector.clone(),
        }
    }

    /// The watches this controller runs: one per namespace in `namespaces` (one for all namespaces
    /// when empty, or when the kind is cluster-scoped).
    pub fn scopes(&self, namespaces: &[String]) -> Vec<Option<String>> {
        if namespaces.is_empty() || !self.ctx.namespaced {
            vec![None]
        } else {
            namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// Runs one watch per scope until `shutdown` is cancelled, reconciling at most
    /// `max_concurrent_reconciles` CRs at once per watch. Each scope's token is marked synced once
    /// its initial list is in.
    pub async fn run(self, scopes: Vec<(Option<String>, SyncToken)>, shutdown: CancellationToken) {
        let runs =
            scopes.into_iter().map(|(namespace, synced)| self.run_scope(namespace, synced, shutdown.clone()));
        futures::future::join_all(runs).await;
    }

    async fn run_scope(&self, namespace: Option<String>, synced: SyncToken, shutdown: CancellationToken) {
        let namespace = namespace.as_deref();
        let ctx = &self.ctx;
        let client = ctx.client.clone();
        // Each CR decoded on its own: one the operator cannot decode is skipped, not its kind.
        let api: Api<Decoded> = match namespace {
            Some(namespace) => Api::namespaced_with(client, namespace, &ctx.resource),
            None => Api::all_with(client, &ctx.resource),
        };
        let mut selector = self.selector.clone();
        let sharding = ctx.settings.sharding.clone();
        if let Some(membership) = &sharding {
            // Only this shard's CRs: the cache holds this replica's share and no more.
            selector.extend([membership.selector()]);
        }
        let config = kubeapi::primary_watch(&selector, ctx.watch.extensions.field_selector.as_deref());
        let kind: Kind = ctx.kind.clone();
        let writer = Writer::new(kind.clone());
        let reader = writer.as_reader();
        let annotations_trigger = ctx.watch.watch_annotations_changes;
        let watch_fields = ctx.watch.extensions.watch_fields.clone();
        let confirmations = ctx.confirmations.clone();
        let manage_status = ctx.watch.manage_status;
        let cached = sharding.as_ref().map(|membership| {
            crate::metrics::CachedCrs::new(ctx.metrics.clone(), &ctx.gvk_label, &membership.shard)
        });
        let store = reader.clone();
        let triggers = Triggers {
            store: reader.clone(),
            kind: kind.clone(),
            annotations: annotations_trigger,
            drain_label: sharding.as_ref().map(|membership| membership.drain_label()),
        };
        let mut errors = WatchErrors::new(ctx.watch.gvk.to_string(), "CRs of this kind are not reconciled");
        let mut reported = decoded::Reported::default();
        let trigger = watcher(api, config)
            .default_backoff()
            .inspect(move |event| match event {
                Ok(watcher::Event::InitDone) => errors.listed(),
                Err(error) => errors.failed(error),
                Ok(_) => {}
            })
            .filter_map({
                let ctx = ctx.clone();
                move |item| {
                    let report = |undecodable: &Undecodable| report_undecodable(&ctx, undecodable);
                    std::future::ready(decoded::decode_item(item, &mut reported, report))
                }
            })
            .map_ok(move |event| {
                let slim = |object| {
                    let fields = watch_fields.as_ref();
                    slim(object, annotations_trigger, fields, manage_status, confirmations.as_deref())
                };
                triggers.mark(cache(event, slim))
            })
            .reflect(writer)
            .inspect_ok({
                let ctx = ctx.clone();
                // Watched here rather than through the store: kube's store wakes only one waiter.
                let mut synced = Some(synced);
                let mut cached = cached;
                move |event| {
                    match event {
                        watcher::Event::Delete(object) if !decoded::is_stand_in(object) => {
                            remove_runner_dir(&ctx, object);
                            reconcile::forget(&ctx, object);
                        }
                        watcher::Event::InitDone => {
                            if let Some(token) = synced.take() {
                                token.synced();
                            }
                        }
                        _ => {}
                    }
                    if let Some(cached) = &mut cached {
                        cached.set(store.len());
                    }
                }
            })
            .applied_objects()
            .try_filter(|object| std::future::ready(object.triggers));
        let concurrency = ctx.watch.max_concurrent_reconciles;
        tracing::info!(gvk = %ctx.watch.gvk, namespace = namespace.unwrap_or("*"), concurrency, "watching");
        let shutdown = shutdown.cancelled_owned();
        let mut controller = Controller::for_stream_with(trigger, reader, kind.clone());
        // The CRs in line for a slot, when one frees (see `reconcile::Slots`).
        controller = controller.reconcile_on(ctx.slots.register(namespace));
        if let Some(dependents) = &self.dependents {
            controller = controller.reconcile_on(dependents.register_owner(&kind, namespace));
        }
        // Room for the running reconciles and for those passing through to get in line: a CR that
        // finds the watch's slots taken is parked in `Context::slots` (which serves by priority, as
        // kube-runtime's own limit would not) and its reconcile returns at once.
        let room = ctx.watch.max_concurrent_reconciles.max(1).saturating_mul(2).saturating_add(8);
        controller
            .with_config(ControllerConfig::default().concurrency(u16::try_from(room).unwrap_or(u16::MAX)))
            .graceful_shutdown_on(shutdown)
            .run(reconcile::reconcile, reconcile::error_policy, ctx.clone())
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(error = %crate::logging::error_chain(&error), "controller event");
                }
            })
            .await;
    }
}

/// A kind or group the API server does not know is [`Error::NotServed`], whose message says it all;
/// anything else (unreachable server, forbidden) keeps its cause.
fn discovery_error(gvk: &Gvk, source: kube::Error) -> Error {
    let gvk = gvk.clone();
    match source {
        kube::Error::Discovery(DiscoveryError::MissingKind(_) | DiscoveryError::MissingResource(_)) => {
            Error::NotServed { gvk }
        }
        kube::Error::Api(status) if status.code == 404 => Error::NotServed { gvk },
        source => Error::Discovery { gvk, source },
    }
}

/// Says that a CR cannot be decoded (once per version of it): a warning naming it, the
/// `ansible_operator_undecodable_crs_total` counter, a Warning Event on it.
fn report_undecodable(ctx: &Arc<Context>, undecodable: &Undecodable) {
    let meta = &undecodable.metadata;
    tracing::warn!(
        gvk = %ctx.watch.gvk,
        namespace = meta.namespace.as_deref().unwrap_or_default(),
        name = meta.name.as_deref().unwrap_or_default(),
        error = %undecodable.error,
        "cannot decode this CR: it is skipped, the other CRs of its kind go on"
    );
    ctx.metrics.undecodable_cr(&ctx.gvk_label);
    if let Some(events) = ctx.settings.events.clone() {
        let (reference, error) = (undecodable.reference(), undecodable.error.clone());
        tokio::spawn(
            async move { events.record(&reference, &crate::history::events::undecodable(&error)).await },
        );
    }
}

/// A deleted CR's runner directory goes with it (upstream leaves them behind, AOP #47).
fn remove_runner_dir(ctx: &Context, object: &Cached) {
    let dir = reconcile::runner_dir(&ctx.settings.runner_dir, &ctx.watch, object);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => tracing::debug!(dir = %dir.display(), "removed the runner directory of a deleted CR"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(dir = %dir.display(), %error, "could not remove a deleted CR's runner directory")
        }
    }
}

/// The watch's event with its CR as the cache keeps it (`slim`, see [`Cached`]).
fn cache(
    event: watcher::Event<DynamicObject>,
    slim: impl Fn(DynamicObject) -> Cached,
) -> watcher::Event<Cached> {
    match event {
        watcher::Event::Apply(object) => watcher::Event::Apply(slim(object)),
        watcher::Event::Delete(object) => watcher::Event::Delete(slim(object)),
        watcher::Event::InitApply(object) => watcher::Event::InitApply(slim(object)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The CR as the cache keeps it, without kubectl's copy of the last applied object (as large as
/// the spec) unless annotation changes trigger (`annotations`): a label-only `kubectl apply`
/// changes it. With `watchFields`, it keeps the digest of their values ([`Cached::watched`]), without
/// the conditions when they are the operator's (`ours_conditions`: `manageStatus`). A kind
/// with `confirmations` takes its standing from them (its objects have no conditions of ours).
fn slim(
    mut object: DynamicObject,
    annotations: bool,
    watch_fields: Option<&WatchFields>,
    ours_conditions: bool,
    confirmations: Option<&Confirmations>,
) -> Cached {
    let watched = watch_fields
        .map(|fields| fields.digest(serde_json::to_value(&object).unwrap_or_default(), ours_conditions));
    let confirmed = confirmations.and_then(|confirmations| confirmations.confirmed_at(&object.metadata));
    if !annotations {
        object.annotations_mut().remove(LAST_APPLIED);
    }
    let cached = Cached::from(object);
    Cached { watched, standing: confirmed.map_or(cached.standing, Standing::confirmed_at), ..cached }
}

/// kubectl's copy of the object it last applied: as large as the spec.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether each version of a CR the watch brings triggers a run: it does when what
/// [`trigger_hash`] covers differs from the cached version before it (or there is none, or that
/// was another object of the same name), as controller-runtime's predicates compare the old and
/// the new object. Marked on the version before the cache takes it, as [`Cached::triggers`].
struct Triggers {
    /// The cache, before it takes the version.
    store: Store<Cached>,
    kind: Kind,
    /// `watchAnnotationsChanges`.
    annotations: bool,
    /// With sharding: the sharder's drain label.
    drain_label: Option<String>,
}

impl Triggers {
    fn mark(&self, mut event: watcher::Event<Cached>) -> watcher::Event<Cached> {
        if let watcher::Event::Apply(object) | watcher::Event::InitApply(object) = &mut event {
            object.triggers = self.triggers(object);
        }
        event
    }

    fn triggers(&self, object: &Cached) -> bool {
        let Some(hash) = self.hash(object) else { return true };
        let Some(before) = self.store.get(&ObjectRef::from_obj_with(object, self.kind.clone())) else {
            return true;
        };
        before.metadata.uid != object.metadata.uid || self.hash(&before) != Some(hash)
    }

    fn hash(&self, object: &Cached) -> Option<u64> {
        trigger_hash(object, object.watched, self.annotations, self.drain_label.as_deref())
    }
}

/// Upstream's primary predicate as a hash: a run is triggered when the generation changes (or, when
/// `watchAnnotationsChanges`, the annotations change). Objects without a generation always pass.
/// With `watchFields`, the digest of their values (`watched`) stands for the generation: only a
/// change in them (or the start of a deletion) triggers, and objects without a generation are
/// filtered too.
/// Pausing or resuming a CR (its annotation) triggers whatever the watch says.
/// With sharding, the sharder's drain request (`drain_label`) triggers too: the reconcile hands the
/// CR over.
fn trigger_hash<K: Resource>(
    object: &K,
    watched: Option<u64>,
    annotations: bool,
    drain_label: Option<&str>,
) -> Option<u64> {
    let mut hasher = DefaultHasher::new();
    match watched {
        Some(digest) => digest.hash(&mut hasher),
        None => object.meta().generation?.hash(&mut hasher),
    }
    // The start of a deletion runs the finalizer, whatever `watchFields` selects.
    object.meta().deletion_timestamp.is_some().hash(&mut hasher);
    if let Some(drain_label) = drain_label {
        object.labels().contains_key(drain_label).hash(&mut hasher);
    }
    reconcile::annotations::paused(object.annotations()).hash(&mut hasher);
    if annotations {
        object.meta().annotations.hash(&mut hasher);
    } else {
        // A manual request (the API's "reconcile now") triggers a run whatever the watch says.
        object.annotations().get(reconcile::annotations::RECONCILE_REQUESTED).hash(&mut hasher);
    }
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(generation: i64, annotations: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {"name": "a", "generation": generation, "annotations": annotations}
        }))
        .unwrap()
    }

    #[test]
    fn the_cache_drops_the_last_applied_copy_unless_annotations_trigger() {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "x/v1", "kind": "X",
            "metadata": {"name": "a", "generation": 2, "labels": {"l": "1"},
                "annotations": {"a": "1", (LAST_APPLIED): "{\"spec\":{}}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"size": 3},
            "status": {"conditions": [{"type": "Successful", "status": "True"}], "big": "x"}
        }))
        .unwrap();
        assert!(slim(object.clone(), true, None, true, None).annotations().contains_key(LAST_APPLIED));
        let cached = slim(object, false, None, true, None);
        assert_eq!(cached.annotations(), &[("a".to_string(), "1".to_string())].into());
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.labels(), &[("l".to_string(), "1".to_string())].into());
    }

    /// A watch of `group`/v1 `kind` without annotation triggers: each version given to the closure
    /// is marked and cached, and the closure says whether it triggers.
    fn watch_of(group: &str, kind: &str) -> impl FnMut(Cached) -> bool {
        let kind: Kind =
            Arc::new(kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, "v1", kind)));
        let mut writer = Writer::new(kind.clone());
        let triggers = Triggers { store: writer.as_reader(), kind, annotations: false, drain_label: None };
        move |cached: Cached| {
            let event = triggers.mark(watcher::Event::Apply(cached));
            writer.apply_watcher_event(&event);
            let watcher::Event::Apply(cached) = event else { unreachable!() };
            cached.triggers
        }
    }

    #[test]
    fn a_version_triggers_when_what_triggers_changed_since_the_cached_one() {
        let mut seen = watch_of("x", "X");
        let version = |generation: i64, uid: &str, annotations: serde_json::Value| {
            let mut object = object(generation, annotations);
            object.metadata.uid = Some(uid.to_string());
            Cached::from(object)
        };
        assert!(seen(version(1, "u1", json!({}))), "the first version");
        assert!(!seen(version(1, "u1", json!({"a": "1"}))), "an annotation change alone");
        assert!(seen(version(2, "u1", json!({"a": "1"}))), "a new generation");
        assert!(seen(version(2, "u2", json!({"a": "1"}))), "another object of the same name");
        let mut without_generation = version(2, "u2", json!({}));
        without_generation.metadata.generation = None;
        assert!(seen(without_generation.clone()));
        assert!(seen(without_generation), "an object without a generation always triggers");
    }

    #[test]
    fn with_watch_fields_only_a_change_in_them_triggers() {
        let mut seen = watch_of("", "Node");
        let fields = WatchFields::from_queries(&["$.spec.taints", "$.metadata.labels"]);
        let version = |heartbeat: &str, taint: &str, generation: Option<i64>| {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n", "uid": "u", "resourceVersion": heartbeat, "generation": generation},
                "spec": {"taints": [{"key": taint}]}, "status": {"heartbeat": heartbeat}
            }))
            .unwrap();
            slim(object, false, Some(&fields), true, None)
        };
        assert!(seen(version("1", "a", None)), "the first version");
        assert!(!seen(version("2", "a", None)), "a status heartbeat, though the kind has no generation");
        assert!(seen(version("3", "b", None)), "a watched field");
        assert!(!seen(version("4", "b", Some(7))), "a new generation alone");
        let mut deleted = version("5", "b", Some(8));
        deleted.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-29T10:00:00Z".parse().unwrap(),
        ));
        assert!(seen(deleted), "the start of a deletion: the finalizer runs");
    }

    #[test]
    fn a_manual_request_triggers_without_annotation_watching() {
        let request =
            json!({(reconcile::annotations::RECONCILE_REQUESTED): "{\"at\":\"2026-11-23T10:00:00Z\"}"});
        assert_ne!(
            trigger_hash(&object(1, json!({})), None, false, None),
            trigger_hash(&object(1, request), None, false, None)
        );
    }

    #[test]
    fn pausing_and_resuming_trigger_without_annotation_watching_and_other_values_do_not() {
        let paused = |value: &str| object(1, json!({(reconcile::annotations::PAUSED): value}));
        let plain = trigger_hash(&object(1, json!({})), None, false, None);
        assert_ne!(plain, trigger_hash(&paused("true"), None, false, None));
        assert_eq!(plain, trigger_hash(&paused("false"), None, false, None), "not paused either way");
        assert_eq!(plain, trigger_hash(&paused("no"), None, false, None));
    }

    #[test]
    fn only_generation_changes_trigger_by_default() {
        let base = trigger_hash(&object(1, json!({"a": "1"})), None, false, None);
        assert_eq!(base, trigger_hash(&object(1, json!({"a": "2"})), None, false, None));
        assert_ne!(base, trigger_hash(&object(2, json!({"a": "1"})), None, false, None));
    }

    #[test]
    fn annotation_changes_trigger_when_opted_in() {
        let base = trigger_hash(&object(1, json!({"a": "1"})), None, true, None);
        assert_ne!(base, trigger_hash(&object(1, json!({"a": "2"})), None, true, None));
    }

    #[test]
    fn a_drain_request_triggers_when_sharded() {
        let drain = "ansible-operator.dev/drain-r";
        let mut draining = object(1, json!({}));
        draining.metadata.labels = Some([(drain.to_string(), "true".to_string())].into());
        let plain = object(1, json!({}));
        assert_ne!(
            trigger_hash(&plain, None, false, Some(drain)),
            trigger_hash(&draining, None, false, Some(drain))
        );
        assert_eq!(trigger_hash(&plain, None, false, None), trigger_hash(&draining, None, false, None));
    }
}
