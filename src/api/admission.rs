//! `POST /validate/{group}/{version}/{kind}`: the validating webhook the API server calls with an
//! `AdmissionReview` (no bearer token: the API server's call is not a user's; the answer only says
//! allowed or why not). Every answer is an `AdmissionReview`; an error of ours denies. And
//! `POST /convert/{group}/{kind}`, the conversion webhook, answered with a `ConversionReview` that
//! converts the objects it was sent or fails (it holds only what the caller sent). Whoever
//! reaches the port may call it, so the [`Gate`] turns callers away before a body is read: without
//! the client certificate `--webhook-client-ca` asks for, or beyond a client's rate.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State as Extract};
use axum::{Extension, Json};
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter, clock::DefaultClock};
use serde::Deserialize;
use serde_json::Value;

use super::State;
use crate::admission::{Verdict, conversion, review};
use crate::http_server::Peer;
use crate::watches::Gvk;

/// Client addresses whose buckets are kept before idle ones are dropped.
const TRACKED_CLIENTS: usize = 10_000;

/// Who may ask the webhook, and how often.
pub struct Gate {
    /// `--webhook-client-ca`: only a caller with a verified client certificate is answered.
    require_certificate: bool,
    /// `--webhook-client-rate`, per client address, for callers without one.
    limiter: Option<RateLimiter<IpAddr, HashMapStateStore<IpAddr>, DefaultClock>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("require_certificate", &self.require_certificate).finish_non_exhaustive()
    }
}

impl Gate {
    /// A gate that requires a client certificate or not, and lets a client without one send
    /// `per_second` reviews a second (bursts of twice as many; 0: no limit).
    pub fn new(require_certificate: bool, per_second: u32) -> Gate {
        let limiter = NonZeroU32::new(per_second).map(|rate| {
            let burst = rate.saturating_mul(NonZeroU32::MIN.saturating_add(1));
            RateLimiter::hashmap(Quota::per_second(rate).allow_burst(burst))
        });
        Gate { require_certificate, limiter }
    }

    /// Why `peer` is turned away, if it is.
    pub fn refusal(&self, peer: &Peer) -> Option<&'static str> {
        if peer.verified_certificate {
            return None;
        }
        if self.require_certificate {
            return Some(
                "the webhook answers only the API server: a client certificate signed by --webhook-client-ca is required",
            );
        }
        let limiter = self.limiter.as_ref()?;
        if limiter.len() > TRACKED_CLIENTS {
            limiter.retain_recent();
        }
        limiter
            .check_key(&peer.address.ip())
            .err()
            .map(|_| "too many reviews from this client (--webhook-client-rate): try again")
    }
}

/// The kind a webhook validates.
#[derive(Debug, Deserialize)]
pub struct KindPath {
    group: String,
    version: String,
    kind: String,
}

/// Runs the kind's validate playbook on the request and answers, unless the [`Gate`] turns the
/// caller away. The body is taken as bytes (at most [`review::BODY_LIMIT`], see the route) and read
/// by the validator, which answers a body it cannot read with an `AdmissionReview` too.
pub async fn validate(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<KindPath>,
    Extension(peer): Extension<Peer>,
    body: Bytes,
) -> Json<Value> {
    let gvk = Gvk { group: path.group, version: path.version, kind: path.kind };
    if let Some(refusal) = state.gate.refusal(&peer) {
        tracing::info!(kind = %gvk, client = %peer.address, refusal, "review refused");
        return Json(review::answer(&review::uid_of(&body), &Verdict::Denied(refusal.to_string())));
    }
    Json(match &state.validator {
        Some(validator) => validator.review(&gvk, &body).await,
        None => review::answer(
            &review::uid_of(&body),
            &Verdict::Denied(format!("the operator has no validate playbook for {gvk}")),
        ),
    })
}

/// The group and kind a conversion webhook converts.
#[derive(Debug, Deserialize)]
pub struct GroupKindPath {
    group: String,
    kind: String,
}

/// Runs the kind's convert playbook on the review and answers, unless the [`Gate`] turns the
/// caller away.
pub async fn convert(
    Extract(state): Extract<Arc<State>>,
    Path(path): Path<GroupKindPath>,
    Extension(peer): Extension<Peer>,
    body: Bytes,
) -> Json<Value> {
    let (group, kind) = (path.group, path.kind);
    if let Some(refusal) = state.gate.refusal(&peer) {
        tracing::info!(group, kind, client = %peer.address, refusal, "conversion review refused");
        return Json(conversion::answer(&conversion::uid_of(&body), Err(refusal.to_string())));
    }
    Json(match &state.converter {
        Some(converter) => converter.review(&group, &kind, &body).await,
        None => conversion::answer(
            &conversion::uid_of(&body),
            Err(format!("the operator has no convert playbook for {kind}.{group}")),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(last: u8, verified_certificate: bool) -> Peer {
        Peer { address: ([10, 0, 0, last], 4000).into(), verified_certificate }
    }

    #[test]
    fn with_a_client_ca_only_a_verified_certificate_is_answered() {
        let gate = Gate::new(true, 0);
        assert!(gate.refusal(&peer(1, false)).is_some_and(|r| r.contains("--webhook-client-ca")));
        assert_eq!(gate.refusal(&peer(1, true)), None);
    }

    #[test]
    fn a_client_beyond_its_burst_is_refused_while_others_and_verified_callers_go_on() {
        let gate = Gate::new(false, 2);
        for _ in 0..4 {
            assert_eq!(gate.refusal(&peer(1, false)), None, "a burst of twice the rate");
        }
        assert!(gate.refusal(&peer(1, false)).is_some_and(|r| r.contains("--webhook-client-rate")));
        assert_eq!(gate.refusal(&peer(2, false)), None, "another client has its own bucket");
        assert_eq!(gate.refusal(&peer(1, true)), None, "the API server is not limited");
        let unlimited = Gate::new(false, 0);
        assert!((0..100).all(|_| unlimited.refusal(&peer(1, false)).is_none()));
    }
}
