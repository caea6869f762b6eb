//! Leader election against the real API server: candidates campaigning for one Lease through
//! `ansible_operator::leader`, with short durations (lease 3 s, renew deadline 2 s, retry 200 ms).

use crate::support;

use std::time::Duration;

use ansible_operator::leader::{self, Config};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE: &str = "ansible-operator-lock";
const LEASE_DURATION: Duration = Duration::from_secs(3);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
const RETRY_PERIOD: Duration = Duration::from_millis(200);
/// Generous bound for a first election on a possibly busy test machine.
const ELECTION: Duration = Duration::from_secs(10);

/// One campaigning process.
struct Candidate {
    identity: String,
    leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Candidate {
    fn spawn(client: &Client, namespace: &str, identity: &str) -> Self {
        let config = Config {
            identity: identity.to_string(),
            retry_period: RETRY_PERIOD,
            ..Config::new(namespace, LEASE, LEASE_DURATION, RENEW_DEADLINE)
        };
        config.validate().expect("valid test durations");
        let shutdown = CancellationToken::new();
        let (leader, task) = leader::spawn(client.clone(), config, shutdown.clone());
        Self { identity: identity.to_string(), leader, shutdown, task }
    }

    fn leading(&self) -> bool {
        *self.leader.borrow()
    }

    /// Waits until leadership reads `leading`; returns how long that took.
    async fn wait_leading(&mut self, leading: bool, timeout: Duration) -> Duration {
        let start = Instant::now();
        let reached = tokio::time::timeout(timeout, self.leader.wait_for(|now| *now == leading)).await;
        match reached {
            Ok(Ok(_)) => start.elapsed(),
            Ok(Err(_)) => panic!("{}: campaign task ended", self.identity),
            Err(_) => panic!("{}: not leading={leading} within {timeout:?}", self.identity),
        }
    }

    /// Cancels the campaign and waits for its task (and so the release) to finish.
    async fn stop(self) -> watch::Receiver<bool> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .unwrap_or_else(|_| panic!("{}: campaign did not end after shutdown", self.identity))
            .expect("campaign task did not panic");
        self.leader
    }
}

async fn lease(client: &Client, namespace: &str) -> Lease {
    Api::<Lease>::namespaced(client.clone(), namespace).get(LEASE).await.expect("lease exists")
}

fn spec_field<T>(
    lease: &Lease,
    field: impl Fn(&k8s_openapi::api::coordination::v1::LeaseSpec) -> Option<T>,
) -> Option<T> {
    lease.spec.as_ref().and_then(field)
}

#[tokio::test]
async fn two_candidates_on_one_lease_elect_exactly_one_leader() {
    let client = support::client().await;
    let namespace = support::TestNamespace::new(&client, "leader-two").await;
    let a = Candidate::spawn(&client, &namespace.name, "candidate-a");
    let b = Candidate::spawn(&client, &namespace.name, "candidate-b");

    let leader = support::wait_for("one candidate to lead", ELECTION, || async {
        Ok(match (a.leading(), b.leading()) {
            (true, false) => Ok(a.identity.clone()),
            (false, true) => Ok(b.identity.clone()),
            seen => Err(format!("(a, b) leading: {seen:?}")),
        })
    })
    .await;

    // For several renewals, the same single candidate leads.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let leaders: Vec<&str> =
            [&a, &b].into_iter().filter(|c| c.leading()).map(|c| c.identity.as_str()).collect();
        assert_eq!(leaders, [leader.as_str()], "exactly one stable leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lease = lease(&client, &namespace.name).await;
    assert_eq!(spec_field(&lease, |s| s.holder_identity.clone()), Some(leader));
    assert_eq!(spec_field(&lease, |s| s.lease_duration_seconds), Some(3));
    assert_eq!(spec_field(&lease, |s| s.lease_transitions), Some(0), "created by its first leader");

    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn cancelling_the_leaders_shutdown_hands_the_lease_to_the_standby_within_a_retry_period() {
    let client = support::client().await;
    let namespace = support::TestNamespace::new(&client, "leader-handover").await;
    let mut a = Candidate::spawn(&client, &namespace.name, "candidate-a");
    a.wait_leading(true, ELECTION).await;
    let mut b = Candidate::spawn(&client, &namespace.name, "candidate-b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b.leading(), "the standby waits while the leader renews");

    let released_at = Instant::now();
    let a_leader = a.stop().await;
    assert!(!*a_leader.borrow(), "a stopped candidate reads false");
    let took = b.wait_leading(true, LEASE_DURATION).await;
    let since_cancel = released_at.elapsed();
    assert!(
        since_cancel < Duration::from_millis(1500),
        "the standby took over {since_cancel:?} after the cancel ({took:?} after the release); \
         without a release it would wait for the {LEASE_DURATION:?} lease to expire"
    );

    let lease = lease(&client, &namespace.name).await;
    assert_eq!(spec_field(&lease, |s| s.holder_identity.clone()).as_deref(), Some("candidate-b"));
    assert_eq!(spec_field(&lease, |s| s.lease_transitions), Some(1));
    b.stop().await;
}

#[tokio::test]
async fn shutting_down_the_only_leader_releases_the_lease() {
    let client = support::client().await;
    let namespace = support::TestNamespace::new(&client, "leader-release").await;
    let mut a = Candidate::spawn(&client, &namespace.name, "candidate-a");
    a.wait_leading(true, ELECTION).await;
    a.stop().await;

    let lease = lease(&client, &namespace.name).await;
    assert_eq!(spec_field(&lease, |s| s.holder_identity.clone()).filter(|h| !h.is_empty()), None);
    assert_eq!(spec_field(&lease, |s| s.lease_duration_seconds), Some(1));
    assert_eq!(spec_field(&lease, |s| s.lease_transitions), Some(0));
}

#[tokio::test]
async fn candidate_whose_lease_was_taken_over_reports_false_within_the_renew_deadline() {
    let client = support::client().await;
    let namespace = support::TestNamespace::new(&client, "leader-takeover").await;
    let mut a = Candidate::spawn(&client, &namespace.name, "candidate-a");
    a.wait_leading(true, ELECTION).await;

    // An intruder overwrites the holder (no resourceVersion, so it always wins) and keeps renewing.
    let intruder = {
        let api = Api::<Lease>::namespaced(client.clone(), &namespace.name);
        tokio::spawn(async move {
            loop {
                let patch = json!({"spec": {
                    "holderIdentity": "intruder",
                    "leaseDurationSeconds": 3,
                    "renewTime": MicroTime(jiff::Timestamp::now()),
                }});
                api.patch(LEASE, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .expect("intruder patch");
                tokio::time::sleep(RETRY_PERIOD).await;
            }
        })
    };
    let took = a.wait_leading(false, RENEW_DEADLINE).await;
    println!("candidate-a stepped down {took:?} after the takeover");

    // While the intruder's Lease stays valid, the candidate stays a standby.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!a.leading(), "a candidate does not take a valid lease from its holder");
    let lease = lease(&client, &namespace.name).await;
    assert_eq!(spec_field(&lease, |s| s.holder_identity.clone()).as_deref(), Some("intruder"));

    intruder.abort();
    a.stop().await;
}
