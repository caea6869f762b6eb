//! Health probes on `--health-probe-bind-address` (upstream §8.2): `/healthz` is always ok once
//! the server runs; `/readyz` waits until every registered watch has synced.
//!
//! Upstream's `/readyz` is a plain ping; ours also waits for the watches' initial lists, so a
//! rolling update does not route traffic (or hand over leadership) to a pod that has not yet seen
//! its objects. With `--sharding` it also waits for the replica's shard Lease, and names the shard.

use std::sync::{Arc, Mutex, PoisonError};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http_server::{Body, TEXT_CONTENT_TYPE, not_found, respond, serve};

pub use crate::http_server::{Error, bind, parse_address};

/// Whether the operator is ready: started, with every registered watch synced.
#[derive(Debug, Default)]
pub struct Readiness {
    state: Mutex<State>,
}

#[derive(Debug, Default, Clone)]
struct State {
    started: bool,
    registered: usize,
    synced: usize,
    shard: Option<Shard>,
}

/// With `--sharding`: this replica's shard and whether it holds the shard's Lease.
#[derive(Debug, Clone)]
struct Shard {
    /// `shard <shard> of ring <ring>`.
    name: String,
    /// `<namespace>/<name>` of the shard Lease.
    lease: String,
    joined: bool,
}

/// What `/readyz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum ReadinessStatus {
    /// Started, and every registered watch has synced.
    Ready {
        /// With `--sharding`: `shard <shard> of ring <ring>`.
        shard: Option<String>,
    },
    /// With `--sharding`: the replica does not hold its shard Lease (yet).
    Joining {
        /// `<namespace>/<name>` of the shard Lease.
        lease: String,
    },
    /// Watches are still being registered ([`Readiness::mark_started`] not called yet).
    Starting,
    /// Some watches have not synced yet.
    Syncing {
        /// Watches not synced yet.
        pending: usize,
        /// Watches registered.
        total: usize,
    },
}

impl ReadinessStatus {
    /// The `/readyz` answer: status code and body.
    fn response(self) -> (StatusCode, String) {
        match self {
            ReadinessStatus::Ready { shard: None } => (StatusCode::OK, "ok".to_string()),
            ReadinessStatus::Ready { shard: Some(shard) } => (StatusCode::OK, format!("ok: {shard}")),
            ReadinessStatus::Joining { lease } => {
                (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: waiting for the shard Lease {lease}"))
            }
            ReadinessStatus::Starting => {
                (StatusCode::SERVICE_UNAVAILABLE, "not ready: watches are still being set up".to_string())
            }
            ReadinessStatus::Syncing { pending, total } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {pending} of {total} watches have not synced"),
            ),
        }
    }
}

/// One watch that must sync before the operator is ready. A token dropped without
/// [`SyncToken::synced`] keeps the operator unready: that watch never delivered its objects.
#[derive(Debug)]
#[must_use = "the watch counts as unsynced until `synced` is called"]
pub struct SyncToken {
    readiness: Arc<Readiness>,
}

impl SyncToken {
    /// Marks the watch as synced (its initial list is complete).
    pub fn synced(self) {
        self.readiness.lock().synced += 1;
    }
}

impl Readiness {
    /// A readiness tracker with nothing registered and not started.
    pub fn new() -> Arc<Readiness> {
        Arc::new(Readiness::default())
    }

    /// Registers one watch that must sync before the operator is ready.
    pub fn register(self: &Arc<Self>) -> SyncToken {
        self.lock().registered += 1;
        SyncToken { readiness: self.clone() }
    }

    /// Records that every watch has been registered; readiness now depends on their tokens only.
    pub fn mark_started(&self) {
        self.lock().started = true;
    }

    /// With `--sharding`: the replica is not ready until [`Readiness::joined`], and then names its
    /// shard (`shard <shard> of ring <ring>`) and its Lease (`<namespace>/<name>`).
    pub fn joining(&self, shard: String, lease: String) {
        self.lock().shard = Some(Shard { name: shard, lease, joined: false });
    }

    /// The replica holds its shard Lease.
    pub fn joined(&self) {
        if let Some(shard) = &mut self.lock().shard {
            shard.joined = true;
        }
    }

    /// The current readiness.
    pub fn status(&self) -> ReadinessStatus {
        let state = self.lock().clone();
        if let Some(Shard { lease, joined: false, .. }) = state.shard {
            return ReadinessStatus::Joining { lease };
        }
        match (state.started, state.registered - state.synced) {
            (false, _) => ReadinessStatus::Starting,
            (true, 0) => ReadinessStatus::Ready { shard: state.shard.map(|shard| shard.name) },
            (true, pending) => ReadinessStatus::Syncing { pending, total: state.registered },
        }
    }

    /// True when [`Readiness::status`] is [`ReadinessStatus::Ready`].
    pub fn is_ready(&self) -> bool {
        matches!(self.status(), ReadinessStatus::Ready { .. })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves `/healthz`, `/healthz/ping`, `/readyz` and `/readyz/ping` until `shutdown` is cancelled.
pub async fn serve_health(listener: TcpListener, readiness: Arc<Readiness>, shutdown: CancellationToken) {
    serve("health", listener, None, shutdown, move |request| {
        let readiness = readiness.clone();
        async move { answer(&readiness, &request) }
    })
    .await;
}

/// controller-runtime answers probes with a bare `ok`, no newline.
fn answer(readiness: &Readiness, request: &Request<Incoming>) -> Response<Body> {
    match request.uri().path() {
        // `healthz` and `ping` are upstream's two liveness checks, `readyz` its readiness check.
        "/healthz" | "/healthz/ping" | "/healthz/healthz" | "/readyz/ping" => {
            respond(StatusCode::OK, TEXT_CONTENT_TYPE, "ok")
        }
        "/readyz" | "/readyz/readyz" => {
            let (status, body) = readiness.status().response();
            respond(status, TEXT_CONTENT_TYPE, body)
        }
        _ => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http_server::test_client::{listener, request};

    #[test]
    fn readiness_waits_for_mark_started_even_without_watches() {
        let readiness = Readiness::new();
        assert_eq!(readiness.status(), ReadinessStatus::Starting);
        readiness.mark_started();
        assert_eq!(readiness.status(), ReadinessStatus::Ready { shard: None });
    }

    #[test]
    fn a_shard_is_ready_once_it_holds_its_lease_and_says_which_it_is() {
        let readiness = Readiness::new();
        readiness.joining("shard a of ring r".to_string(), "ops/r-shard-a".to_string());
        readiness.mark_started();
        let (status, body) = readiness.status().response();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: waiting for the shard Lease ops/r-shard-a");
        readiness.joined();
        let token = readiness.register();
        assert_eq!(readiness.status(), ReadinessStatus::Syncing { pending: 1, total: 1 });
        token.synced();
        assert_eq!(readiness.status().response(), (StatusCode::OK, "ok: shard a of ring r".to_string()));
    }

    #[test]
    fn readiness_waits_for_every_registered_watch_to_sync() {
        let readiness = Readiness::new();
        let first = readiness.register();
        let second = readiness.register();
        assert_eq!(readiness.status(), ReadinessStatus::Starting);
        readiness.mark_started();
        assert_eq!(readiness.status(), ReadinessStatus::Syncing { pending: 2, total: 2 });
        second.synced();
        assert_eq!(readiness.status(), ReadinessStatus::Syncing { pending: 1, total: 2 });
        first.synced();
        assert!(readiness.is_ready());
    }

    #[test]
    fn watch_synced_before_start_still_needs_mark_started() {
        let readiness = Readiness::new();
        readiness.register().synced();
        assert_eq!(readiness.status(), ReadinessStatus::Starting);
        readiness.mark_started();
        assert!(readiness.is_ready());
    }

    #[test]
    fn dropped_token_keeps_the_operator_unready() {
        let readiness = Readiness::new();
        drop(readiness.register());
        readiness.mark_started();
        assert_eq!(readiness.status(), ReadinessStatus::Syncing { pending: 1, total: 1 });
    }

    #[test]
    fn unready_answer_names_how_many_watches_have_not_synced() {
        let (status, body) = ReadinessStatus::Syncing { pending: 2, total: 3 }.response();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: 2 of 3 watches have not synced");
    }

    #[tokio::test]
    async fn health_endpoints_answer_liveness_always_and_readiness_once_synced() {
        let readiness = Readiness::new();
        let token = readiness.register();
        let (listener, address) = listener().await;
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_health(listener, readiness.clone(), shutdown.clone()));

        for path in ["/healthz", "/healthz/ping", "/readyz/ping"] {
            let reply = request(address, "GET", path, "").await;
            assert_eq!((reply.status, reply.body.as_str()), (200, "ok"), "{path}");
        }
        let reply = request(address, "GET", "/readyz", "").await;
        assert_eq!((reply.status, reply.body.as_str()), (503, "not ready: watches are still being set up"));
        readiness.mark_started();
        let reply = request(address, "GET", "/readyz", "").await;
        assert_eq!((reply.status, reply.body.as_str()), (503, "not ready: 1 of 1 watches have not synced"));
        token.synced();
        let reply = request(address, "GET", "/readyz", "").await;
        assert_eq!((reply.status, reply.body.as_str()), (200, "ok"));
        assert_eq!(request(address, "GET", "/metrics", "").await.status, 404);

        shutdown.cancel();
        server.await.unwrap();
    }
}
