//! The sharder: while this replica holds the leader Lease, it watches the ring's shard Leases and
//! the metadata of every watched CR, and labels CRs so that each live shard holds its share
//! ([`assign::plan`]). Each round reads its caches, decides, and writes the few labels that change.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::Selector;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::decoded::{self, Decoded};

use super::assign::{self, Change, Current};
use super::lease::{live_shards, ring_selector};
use super::ring::Ring;
use super::{DRAIN_VALUE, Membership, lease_name};

/// Pause between two rounds: a shard whose Lease expired is seen within this.
const ROUND: Duration = Duration::from_secs(1);
/// Label writes in flight at once.
const WRITES_AT_ONCE: usize = 16;

/// A watched kind the sharder assigns: its API resource, the namespaces it is watched in (`None`:
/// all) and the watch's own label and field selectors.
#[derive(Debug, Clone)]
pub struct Kind {
    /// The kind's API resource.
    pub resource: ApiResource,
    /// Namespaced or not.
    pub namespaced: bool,
    /// One entry per watched namespace, `None` for all.
    pub scopes: Vec<Option<String>>,
    /// The watch entry's selector (CRs it does not select are not reconciled, so not assigned).
    pub selector: Selector,
    /// The watch entry's `fieldSelector`.
    pub field_selector: Option<String>,
}

/// The sharder of one ring.
pub struct Sharder {
    client: Client,
    membership: Membership,
    /// Namespace of the shard Leases.
    namespace: String,
    kinds: Vec<Kind>,
}

/// The caches one sharder term reads.
struct Caches {
    leases: Store<Lease>,
    objects: Vec<(usize, Store<DynamicObject>)>,
}

impl Sharder {
    /// A sharder for `membership`'s ring, with shard Leases in `namespace`.
    pub fn new(client: Client, membership: Membership, namespace: String, kinds: Vec<Kind>) -> Self {
        Self { client, membership, namespace, kinds }
    }

    /// Acts as sharder whenever `leading` reads true, until `shutdown`.
    pub async fn run(self, mut leading: watch::Receiver<bool>, shutdown: CancellationToken) {
        let span = tracing::info_span!("sharder", ring = %self.membership.ring);
        async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    led = leading.wait_for(|leading| *leading) => if led.is_err() { return },
                }
                tracing::info!("acting as sharder");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    _ = leading.wait_for(|leading| !*leading) => tracing::info!("no longer the sharder"),
                    () = self.term() => {}
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One term as sharder: start the caches, wait for their first lists, then run rounds.
    async fn term(&self) {
        let mut watches = JoinSet::new();
        let caches = self.caches(&mut watches);
        caches.leases.wait_until_ready().await.ok();
        for (_, store) in &caches.objects {
            store.wait_until_ready().await.ok();
        }
        tracing::info!("sharder caches synced");
        // Moves under way: CR key → the shard it is meant for once its owner lets it go.
        let mut pending = HashMap::new();
        let mut ring = Ring::default();
        loop {
            self.round(&caches, &mut ring, &mut pending).await;
            tokio::time::sleep(ROUND).await;
        }
    }

    fn caches(&self, watches: &mut JoinSet<()>) -> Caches {
        let (leases, writer) = reflector::store();
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let config = watcher::Config::default().labels(&ring_selector(&self.membership.ring));
        let stream = watcher(api, config).default_backoff().reflect(writer);
        watches.spawn(stream.for_each(|_| async {}));
        let mut objects = Vec::new();
        for (index, kind) in self.kinds.iter().enumerate() {
            for scope in &kind.scopes {
                // Each CR decoded on its own (one too deep to decode is skipped, not its kind), and
                // kept as metadata only: the sharder needs names and labels, not specs.
                let api: Api<Decoded> = match scope {
                    Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &kind.resource),
                    None => Api::all_with(self.client.clone(), &kind.resource),
                };
                let writer = Writer::new(kind.resource.clone());
                objects.push((index, writer.as_reader()));
                let config = crate::kubeapi::primary_watch(&kind.selector, kind.field_selector.as_deref());
                let mut reported = decoded::Reported::default();
                let stream = watcher(api, config)
                    .default_backoff()
                    .filter_map(move |item| {
                        let report = |undecodable: &decoded::Undecodable| {
                            let meta = &undecodable.metadata;
                            tracing::warn!(
                                namespace = meta.namespace.as_deref().unwrap_or_default(),
                                name = meta.name.as_deref().unwrap_or_default(),
                                error = %undecodable.error,
                                "cannot decode this CR: it is given to no shard, the others are"
                            );
                        };
                        std::future::ready(decoded::decode_item(item, &mut reported, report))
                    })
                    .modify(|object| {
                        object.managed_fields_mut().clear();
                        object.data = serde_json::Value::Null;
                    })
                    .reflect(writer);
                watches.spawn(stream.for_each(|_| async {}));
            }
        }
        Caches { leases, objects }
    }

    /// Reads the caches, plans, and writes the labels that change.
    async fn round(&self, caches: &Caches, ring: &mut Ring, pending: &mut HashMap<String, String>) {
        let live = live_shards(caches.leases.state().iter().map(Arc::as_ref), Timestamp::now());
        if ring.shards() != live.as_slice() {
            tracing::info!(shards = ?live, "live shards changed");
            *ring = Ring::new(live);
        }
        let shard_label = self.membership.shard_label();
        let drain_label = self.membership.drain_label();
        let objects: Vec<(usize, Arc<DynamicObject>)> = caches
            .objects
            .iter()
            .flat_map(|(kind, store)| store.state().into_iter().map(move |object| (*kind, object)))
            .collect();
        let keys: Vec<String> = objects
            .iter()
            .map(|(kind, object)| {
                let resource = &self.kinds[*kind].resource;
                super::ring_key(object.as_ref(), &resource.group, &resource.kind)
            })
            .collect();
        let current: Vec<Current<'_>> = objects
            .iter()
            .zip(&keys)
            .map(|((_, object), key)| Current {
                key,
                shard: object.labels().get(&shard_label).map(String::as_str),
                draining: object.labels().contains_key(&drain_label),
            })
            .collect();
        let changes = assign::plan(&current, ring, pending);
        if changes.is_empty() {
            return;
        }
        let writes = changes.into_iter().map(|change| {
            let (index, labels) = match &change {
                Change::Assign { index, shard } => (*index, json!({ (&shard_label): shard, (&drain_label): null })),
                Change::Drain { index, .. } => (*index, json!({ (&drain_label): DRAIN_VALUE })),
            };
            let (kind, object) = &objects[index];
            let previous = current[index].shard.filter(|shard| !ring.shards().iter().any(|s| s == shard));
            let key = keys[index].clone();
            async move {
                // A shard gone from the cache is confirmed gone with a fresh read before its CRs move
                // without a handover: a lagging cache must not hand a running CR to a second replica.
                if let Some(previous) = previous
                    && !self.confirmed_gone(previous).await
                {
                    return (key, change, false);
                }
                let patch = json!({"metadata": {"resourceVersion": object.resource_version(), "labels": labels}});
                let api = self.api_for(*kind, object);
                let written = match super::label(&api, &object.name_any(), &patch).await {
                    Ok(()) => true,
                    Err(error) if error.is_conflict() || error.is_not_found() => false,
                    Err(error) => {
                        tracing::warn!(cr = %key, error = %crate::logging::error_chain(&error), "could not label CR");
                        false
                    }
                };
                (key, change, written)
            }
        });
        let results: Vec<_> = futures::stream::iter(writes).buffer_unordered(WRITES_AT_ONCE).collect().await;
        let (mut assigned, mut drained) = (0usize, 0usize);
        for (key, change, written) in results {
            if !written {
                continue;
            }
            match change {
                Change::Assign { .. } => {
                    pending.remove(&key);
                    assigned += 1;
                }
                Change::Drain { to, .. } => {
                    pending.insert(key, to);
                    drained += 1;
                }
            }
        }
        tracing::info!(assigned, drained, shards = ring.shards().len(), "sharding round");
    }

    /// Whether `shard`'s Lease, read now from the API server, is absent, released or expired.
    async fn confirmed_gone(&self, shard: &str) -> bool {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let name = lease_name(&self.membership.ring, shard);
        match crate::kubeapi::with_timeout(api.get_opt(&name)).await {
            Ok(None) => true,
            Ok(Some(lease)) => live_shards([&lease], Timestamp::now()).iter().all(|live| live != shard),
            Err(error) => {
                tracing::warn!(lease = name, error = %crate::logging::error_chain(&error), "could not read shard lease");
                false
            }
        }
    }

    fn api_for(&self, kind: usize, object: &DynamicObject) -> Api<DynamicObject> {
        let kind = &self.kinds[kind];
        match object.namespace().filter(|_| kind.namespaced) {
            Some(namespace) => Api::namespaced_with(self.client.clone(), &namespace, &kind.resource),
            None => Api::all_with(self.client.clone(), &kind.resource),
        }
    }
}
