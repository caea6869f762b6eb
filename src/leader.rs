//! Leader election: which replica runs the controllers, decided on a `coordination.k8s.io/v1` Lease.
//!
//! Follows client-go's `leaderelection`, which the upstream operator uses through controller-runtime:
//! a candidate takes the Lease when it is free or expired, the leader renews it every retry period and
//! gives up leadership when no renewal succeeded within the renew deadline, and a leader that shuts
//! down releases the Lease so that a standby takes over at once. Every write carries the
//! `resourceVersion` it read, so two candidates racing for the Lease cannot both win.

use std::future::Future;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::Api;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::recorder::{EventType, Note, Recorder, Reporter};

/// Upstream's `--leader-elect-lease-duration`: how long a Lease is valid after its last renewal.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Upstream's `--leader-elect-renew-deadline`: how long a leader keeps trying to renew.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's retry period: the pause between two attempts to acquire or renew.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Where a pod finds its own namespace.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// A failed step of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The durations cannot give a safe election.
    #[error(
        "lease duration ({lease_duration:?}) must exceed the renew deadline ({renew_deadline:?}), \
         which must exceed the retry period ({retry_period:?})"
    )]
    Durations { lease_duration: Duration, renew_deadline: Duration, retry_period: Duration },
    /// Reading the Lease failed.
    #[error("reading lease {lease}")]
    Read {
        lease: String,
        #[source]
        source: kube::Error,
    },
    /// Creating the Lease failed (409: another candidate created it first).
    #[error("creating lease {lease}")]
    Create {
        lease: String,
        #[source]
        source: kube::Error,
    },
    /// Writing the Lease failed (409: it changed since it was read).
    #[error("updating lease {lease}")]
    Update {
        lease: String,
        #[source]
        source: kube::Error,
    },
    /// The API server did not answer in time.
    #[error("no answer from the API server within {0:?}")]
    Timeout(Duration),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// 409: someone else wrote the Lease first; the next round sees who.
    fn is_conflict(&self) -> bool {
        matches!(
            self,
            Error::Create { source: kube::Error::Api(status), .. }
                | Error::Update { source: kube::Error::Api(status), .. }
                if status.code == 409
        )
    }
}

/// Which Lease to campaign for, as whom, and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease (`--leader-election-id`).
    pub name: String,
    /// Holder identity written into the Lease; unique per process.
    pub identity: String,
    /// How long the Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// Pause between two attempts to acquire or renew.
    pub retry_period: Duration,
    /// Labels the Lease carries (a shard Lease names its ring); none for the leader Lease.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl Config {
    /// A config with identity `<hostname>_<random>` and the default retry period.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        lease_duration: Duration,
        renew_deadline: Duration,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: format!("{}_{}", hostname(), random_suffix()),
            lease_duration,
            renew_deadline,
            retry_period: DEFAULT_RETRY_PERIOD,
            labels: Default::default(),
        }
    }

    /// Checks client-go's constraints: lease duration > renew deadline > retry period > 0.
    pub fn validate(&self) -> Result<()> {
        let ordered = self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero();
        if ordered {
            return Ok(());
        }
        Err(Error::Durations {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        })
    }

    /// `namespace/name`, for messages.
    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The lease duration in the Lease's whole seconds, rounded up so the Lease never claims less.
    fn lease_duration_seconds(&self) -> i32 {
        let seconds = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(seconds.max(1)).unwrap_or(i32::MAX)
    }
}

/// Starts campaigning in a background task; the receiver is true while this process holds the lease.
///
/// When `shutdown` is cancelled, the lease is released (if held) and the task ends; the receiver then
/// reads false.
pub fn spawn(
    client: kube::Client,
    config: Config,
    shutdown: CancellationToken,
) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let (leader, receiver) = watch::channel(false);
    let span =
        tracing::info_span!("leader_election", lease = %config.lease_ref(), identity = %config.identity);
    let task = async move {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        campaign(
            &config,
            || try_acquire_or_renew(&api, &config),
            || release(&api, &config),
            &leader,
            &shutdown,
        )
        .await;
    };
    (receiver, tokio::spawn(task.instrument(span)))
}

/// Records the `LeaderElection` Event on the Lease as client-go's `LeaseLock` does when this
/// process became leader: `<identity> became leader`, reported by a recorder named after the
/// identity (as controller-runtime names it). A failure is logged by the recorder.
pub async fn record_leadership(client: kube::Client, config: Config, instance: Option<String>) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &config.namespace);
    // The Lease as written: its uid and resourceVersion go into the involved object.
    let lease = match crate::kubeapi::with_timeout(api.get_opt(&config.name)).await {
        Ok(lease) => lease,
        Err(error) => {
            tracing::debug!(%error, "could not read the Lease for its Event");
            None
        }
    };
    let reporter = Reporter { component: config.identity.clone(), instance };
    let recorder = Recorder::new(client, reporter);
    recorder.record(&lease_reference(&config, lease.as_ref()), &became_leader(&config)).await;
}

/// The Lease as an Event's involved object.
fn lease_reference(config: &Config, lease: Option<&Lease>) -> ObjectReference {
    let meta = lease.map(|lease| &lease.metadata);
    ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(config.name.clone()),
        namespace: Some(config.namespace.clone()),
        uid: meta.and_then(|meta| meta.uid.clone()),
        resource_version: meta.and_then(|meta| meta.resource_version.clone()),
        field_path: None,
    }
}

/// What the Event says, in client-go's words.
fn became_leader(config: &Config) -> Note {
    Note {
        type_: EventType::Normal,
        reason: "LeaderElection".into(),
        message: format!("{} became leader", config.identity),
    }
}

/// The namespace to use when `--leader-election-namespace` is not given: the pod's namespace
/// from /var/run/secrets/kubernetes.io/serviceaccount/namespace, if present.
pub fn in_cluster_namespace() -> Option<String> {
    namespace_from(std::path::Path::new(SERVICE_ACCOUNT_NAMESPACE))
}

fn namespace_from(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let namespace = text.trim();
    (!namespace.is_empty()).then(|| namespace.to_string())
}

/// The pod name in a cluster (Kubernetes sets `HOSTNAME`), else the kernel's host name.
pub(crate) fn hostname() -> String {
    let from_env = std::env::var("HOSTNAME").ok();
    let from_kernel = || std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    from_env
        .or_else(from_kernel)
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_string())
}

/// 16 hex digits that differ between processes and between calls.
pub(crate) fn random_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded from the OS once per thread and stepped on every `new`.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

/// What a campaign round does with the Lease it read.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
enum Decision {
    /// The Lease is absent, free or expired: write this spec, starting a new leadership term.
    Acquire(LeaseSpec),
    /// We hold the Lease: write this spec to extend it.
    Renew(LeaseSpec),
    /// Another candidate holds a valid Lease.
    Wait { holder: String },
}

/// Decides a round from the Lease's spec (`None`: no Lease, or one without spec) at wall time `now`.
fn decide(lease: Option<&LeaseSpec>, now: Timestamp, config: &Config) -> Decision {
    let stamp = Some(MicroTime(now));
    let duration = Some(config.lease_duration_seconds());
    let current = lease.cloned().unwrap_or_default();
    match holder(lease) {
        Some(holder) if holder == config.identity => {
            Decision::Renew(LeaseSpec { renew_time: stamp, lease_duration_seconds: duration, ..current })
        }
        Some(holder) if !lease.is_some_and(|spec| expired(spec, now)) => {
            Decision::Wait { holder: holder.to_string() }
        }
        _ => Decision::Acquire(LeaseSpec {
            holder_identity: Some(config.identity.clone()),
            lease_duration_seconds: duration,
            acquire_time: stamp.clone(),
            renew_time: stamp,
            lease_transitions: Some(
                lease.map_or(0, |spec| spec.lease_transitions.unwrap_or(0).saturating_add(1)),
            ),
            ..current
        }),
    }
}

/// The spec that gives up our Lease so a standby takes it at once, or `None` if we don't hold it.
///
/// Like client-go: no holder, a one-second duration, and the transition count kept.
fn released(lease: Option<&LeaseSpec>, now: Timestamp, config: &Config) -> Option<LeaseSpec> {
    let current = lease.filter(|_| holder(lease) == Some(config.identity.as_str()))?;
    Some(LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    })
}

/// The Lease's holder; an empty identity means nobody.
fn holder(lease: Option<&LeaseSpec>) -> Option<&str> {
    lease.and_then(|spec| spec.holder_identity.as_deref()).filter(|holder| !holder.is_empty())
}

/// True once `renewTime + leaseDurationSeconds` lies before `now`. A Lease never renewed is expired.
pub(crate) fn expired(lease: &LeaseSpec, now: Timestamp) -> bool {
    let Some(MicroTime(renewed)) = lease.renew_time.as_ref().or(lease.acquire_time.as_ref()) else {
        return true;
    };
    let valid_for = SignedDuration::from_secs(lease.lease_duration_seconds.unwrap_or(0).into());
    now.duration_since(*renewed) > valid_for
}

/// What a successful round found.
#[derive(Debug, Clone, PartialEq)]
enum Round {
    /// We hold the Lease now.
    Held,
    /// Another candidate holds a valid Lease.
    HeldBy(String),
}

/// Why leadership ended.
#[derive(Debug, Clone, PartialEq)]
enum Loss {
    /// Another candidate holds the Lease.
    TakenOver { holder: String },
    /// No renewal succeeded within the renew deadline.
    RenewDeadline,
}

/// How a round changed this process's leadership.
#[must_use]
#[derive(Debug, Clone, PartialEq)]
enum Change {
    Unchanged,
    Became,
    Lost(Loss),
}

/// Leadership as this process sees it between rounds, on the monotonic clock.
#[derive(Debug, Clone, Default)]
struct Leadership {
    /// When the last renewal succeeded; `Some` exactly while leading.
    renewed_at: Option<Instant>,
}

impl Leadership {
    fn leading(&self) -> bool {
        self.renewed_at.is_some()
    }

    /// Takes in the result of the round that ended at `now`.
    fn observe(&mut self, round: &Result<Round>, now: Instant, renew_deadline: Duration) -> Change {
        match (round, self.renewed_at) {
            (Ok(Round::Held), was) => {
                self.renewed_at = Some(now);
                if was.is_some() { Change::Unchanged } else { Change::Became }
            }
            (Ok(Round::HeldBy(holder)), Some(_)) => {
                self.renewed_at = None;
                Change::Lost(Loss::TakenOver { holder: holder.clone() })
            }
            (Err(_), Some(renewed)) if now >= renewed + renew_deadline => {
                self.renewed_at = None;
                Change::Lost(Loss::RenewDeadline)
            }
            (Ok(Round::HeldBy(_)) | Err(_), _) => Change::Unchanged,
        }
    }

    /// How long a round starting at `now` may take: a leader's ends at its renew deadline.
    fn budget(&self, now: Instant, config: &Config) -> Duration {
        match self.renewed_at {
            Some(renewed) => (renewed + config.renew_deadline).saturating_duration_since(now),
            None => config.renew_deadline,
        }
    }

    /// When the next round starts after one ended at `now`: a retry period later, and for a leader no
    /// later than its renew deadline, so that leadership ends on time.
    fn next_round(&self, now: Instant, config: &Config) -> Instant {
        let next = now + config.retry_period;
        match self.renewed_at {
            Some(renewed) => next.min(renewed + config.renew_deadline),
            None => next,
        }
    }
}

/// Runs rounds until `shutdown`, publishing leadership on `leader`, then releases the Lease.
async fn campaign<A, AF, R, RF>(
    config: &Config,
    mut attempt: A,
    release: R,
    leader: &watch::Sender<bool>,
    shutdown: &CancellationToken,
) where
    A: FnMut() -> AF,
    AF: Future<Output = Result<Round>>,
    R: FnOnce() -> RF,
    RF: Future<Output = Result<bool>>,
{
    let mut leadership = Leadership::default();
    let mut seen_holder: Option<String> = None;
    loop {
        let budget = leadership.budget(Instant::now(), config);
        let round = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            result = tokio::time::timeout(budget, attempt()) => result.unwrap_or(Err(Error::Timeout(budget))),
        };
        match &round {
            Err(error) if error.is_conflict() => {
                tracing::debug!(
                    error = error as &(dyn std::error::Error + 'static),
                    "lease changed meanwhile"
                );
            }
            Err(error) => {
                tracing::warn!(error = error as &(dyn std::error::Error + 'static), "lease round failed");
            }
            Ok(Round::HeldBy(holder)) if seen_holder.as_ref() != Some(holder) => {
                tracing::info!(holder = %holder, "lease held by another candidate");
                seen_holder = Some(holder.clone());
            }
            Ok(_) => {}
        }
        let now = Instant::now();
        match leadership.observe(&round, now, config.renew_deadline) {
            Change::Unchanged => {}
            Change::Became => {
                tracing::info!("became leader");
                seen_holder = None;
                leader.send_replace(true);
            }
            Change::Lost(Loss::TakenOver { holder }) => {
                tracing::warn!(reason = "taken over", holder = %holder, "lost leadership");
                seen_holder = Some(holder);
                leader.send_replace(false);
            }
            Change::Lost(Loss::RenewDeadline) => {
                tracing::warn!(reason = "renew deadline", deadline = ?config.renew_deadline, "lost leadership");
                leader.send_replace(false);
            }
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep_until(leadership.next_round(now, config)) => {}
        }
    }
    // Stop claiming leadership before the Lease can pass to someone else.
    leader.send_replace(false);
    // Also when not leading: a round cut short by shutdown may have won the Lease.
    let budget = if leadership.leading() { config.renew_deadline } else { config.retry_period };
    match tokio::time::timeout(budget, release()).await {
        Ok(Ok(true)) => tracing::info!("released lease"),
        Ok(Ok(false)) => {}
        Ok(Err(error)) => {
            tracing::warn!(error = &error as &(dyn std::error::Error + 'static), "could not release lease");
        }
        Err(_) => {
            let error = Error::Timeout(budget);
            tracing::warn!(error = &error as &(dyn std::error::Error + 'static), "could not release lease");
        }
    }
}

/// One round: read the Lease, decide, and write it with the `resourceVersion` that was read.
async fn try_acquire_or_renew(api: &Api<Lease>, config: &Config) -> Result<Round> {
    let lease_ref = || config.lease_ref();
    let current =
        api.get_opt(&config.name).await.map_err(|source| Error::Read { lease: lease_ref(), source })?;
    let spec = match decide(current.as_ref().and_then(|lease| lease.spec.as_ref()), Timestamp::now(), config)
    {
        Decision::Wait { holder } => return Ok(Round::HeldBy(holder)),
        Decision::Acquire(spec) | Decision::Renew(spec) => spec,
    };
    match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    labels: (!config.labels.is_empty()).then(|| config.labels.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec),
            };
            api.create(&crate::kubeapi::post_params(), &lease)
                .await
                .map_err(|source| Error::Create { lease: lease_ref(), source })?;
        }
        Some(mut lease) => {
            if !config.labels.is_empty() {
                lease.metadata.labels.get_or_insert_default().extend(config.labels.clone());
            }
            lease.spec = Some(spec);
            api.replace(&config.name, &crate::kubeapi::post_params(), &lease)
                .await
                .map_err(|source| Error::Update { lease: lease_ref(), source })?;
        }
    }
    Ok(Round::Held)
}

/// Gives up the Lease if we hold it; true when it was released.
async fn release(api: &Api<Lease>, config: &Config) -> Result<bool> {
    let lease_ref = || config.lease_ref();
    let current =
        api.get_opt(&config.name).await.map_err(|source| Error::Read { lease: lease_ref(), source })?;
    let Some(mut lease) = current else { return Ok(false) };
    let Some(spec) = released(lease.spec.as_ref(), Timestamp::now(), config) else { return Ok(false) };
    lease.spec = Some(spec);
    api.replace(&config.name, &crate::kubeapi::post_params(), &lease)
        .await
        .map_err(|source| Error::Update { lease: lease_ref(), source })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const NOW: &str = "2026-03-01T12:00:00Z";

    fn config() -> Config {
        Config {
            identity: "me".to_string(),
            ..Config::new("ns", "lock", DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE)
        }
    }

    fn at(offset_secs: i64) -> Timestamp {
        NOW.parse::<Timestamp>().unwrap() + SignedDuration::from_secs(offset_secs)
    }

    /// A Lease held by `holder`, renewed at `at(renewed)`, valid 15 s, after `transitions` transitions.
    fn lease(holder: &str, renewed: i64, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_string()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(at(-100))),
            renew_time: Some(MicroTime(at(renewed))),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn acquired(spec: &Decision) -> &LeaseSpec {
        match spec {
            Decision::Acquire(spec) => spec,
            other => panic!("expected Acquire, got {other:?}"),
        }
    }

    #[test]
    fn config_new_uses_upstream_retry_period_and_a_unique_host_based_identity() {
        let one = Config::new("ns", "lock", DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE);
        let two = Config::new("ns", "lock", DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE);
        assert_eq!(one.retry_period, Duration::from_secs(2));
        assert!(one.identity.starts_with(&format!("{}_", hostname())), "{}", one.identity);
        assert_ne!(one.identity, two.identity);
        assert_eq!(one.validate().ok(), Some(()));
    }

    #[test]
    fn validate_rejects_a_renew_deadline_not_shorter_than_the_lease() {
        let equal = Config::new("ns", "lock", Duration::from_secs(10), Duration::from_secs(10));
        let error = equal.validate().expect_err("invalid");
        assert!(error.to_string().starts_with("lease duration (10s) must exceed"), "{error}");
        let slow_retry = Config { retry_period: Duration::from_secs(10), ..config() };
        assert!(slow_retry.validate().is_err());
    }

    #[test]
    fn lease_duration_is_written_in_whole_seconds_rounded_up() {
        let seconds = |d| Config { lease_duration: d, ..config() }.lease_duration_seconds();
        assert_eq!(seconds(Duration::from_secs(15)), 15);
        assert_eq!(seconds(Duration::from_millis(2500)), 3);
        assert_eq!(seconds(Duration::from_millis(1)), 1);
    }

    #[test]
    fn missing_lease_is_acquired_with_no_transitions() {
        let decision = decide(None, at(0), &config());
        let spec = acquired(&decision);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn valid_lease_of_another_holder_means_wait() {
        let decision = decide(Some(&lease("other", -5, 3)), at(0), &config());
        assert_eq!(decision, Decision::Wait { holder: "other".to_string() });
    }

    #[test]
    fn lease_is_valid_up_to_and_including_renew_time_plus_duration() {
        let decision = decide(Some(&lease("other", -15, 3)), at(0), &config());
        assert_eq!(decision, Decision::Wait { holder: "other".to_string() });
        let decision = decide(Some(&lease("other", -16, 3)), at(0), &config());
        assert_eq!(acquired(&decision).holder_identity.as_deref(), Some("me"));
    }

    #[test]
    fn expired_lease_is_taken_over_as_a_new_term_and_counts_a_transition() {
        let decision = decide(Some(&lease("other", -60, 3)), at(0), &config());
        let spec = acquired(&decision);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn released_lease_is_acquired_at_once() {
        let released =
            released(Some(&lease("other", -1, 2)), at(-1), &Config { identity: "other".into(), ..config() });
        let decision = decide(released.as_ref(), at(0), &config());
        assert_eq!(acquired(&decision).lease_transitions, Some(3));
    }

    #[test]
    fn lease_without_holder_or_renew_time_is_free() {
        let no_holder = LeaseSpec { holder_identity: Some(String::new()), ..lease("x", 0, 1) };
        assert!(matches!(decide(Some(&no_holder), at(0), &config()), Decision::Acquire(_)));
        let never_renewed = LeaseSpec { renew_time: None, acquire_time: None, ..lease("other", 0, 1) };
        assert!(matches!(decide(Some(&never_renewed), at(0), &config()), Decision::Acquire(_)));
    }

    #[test]
    fn renew_time_ahead_of_our_clock_keeps_the_lease_valid() {
        let decision = decide(Some(&lease("other", 30, 1)), at(0), &config());
        assert_eq!(decision, Decision::Wait { holder: "other".to_string() });
    }

    #[test]
    fn own_lease_is_renewed_keeping_acquire_time_and_transitions() {
        let decision = decide(Some(&lease("me", -2, 5)), at(0), &config());
        let Decision::Renew(spec) = decision else { panic!("expected Renew, got {decision:?}") };
        assert_eq!(spec.renew_time, Some(MicroTime(at(0))));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(-100))));
        assert_eq!(spec.lease_transitions, Some(5));
        assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    }

    #[test]
    fn own_expired_lease_is_renewed_not_counted_as_a_transition() {
        let decision = decide(Some(&lease("me", -60, 5)), at(0), &config());
        assert!(
            matches!(decision, Decision::Renew(LeaseSpec { lease_transitions: Some(5), .. })),
            "{decision:?}"
        );
    }

    #[test]
    fn release_clears_the_holder_and_shortens_the_lease_to_one_second() {
        let spec = released(Some(&lease("me", -1, 5)), at(0), &config()).expect("ours");
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_duration_seconds, Some(1));
        assert_eq!(spec.renew_time, Some(MicroTime(at(0))));
        assert_eq!(spec.lease_transitions, Some(5));
    }

    #[test]
    fn release_leaves_a_lease_held_by_another_alone() {
        assert_eq!(released(Some(&lease("other", -1, 5)), at(0), &config()), None);
        assert_eq!(released(None, at(0), &config()), None);
    }

    #[test]
    fn in_cluster_namespace_is_read_trimmed_from_the_service_account_file() {
        let dir = std::env::temp_dir().join(format!("leader-ns-{}", random_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("namespace");
        assert_eq!(namespace_from(&file), None);
        std::fs::write(&file, "operators\n").unwrap();
        assert_eq!(namespace_from(&file).as_deref(), Some("operators"));
        std::fs::write(&file, " \n").unwrap();
        assert_eq!(namespace_from(&file), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn failed() -> Result<Round> {
        Err(Error::Timeout(Duration::from_secs(1)))
    }

    #[test]
    fn first_held_round_makes_a_leader_later_ones_change_nothing() {
        let start = Instant::now();
        let mut leadership = Leadership::default();
        assert_eq!(leadership.observe(&Ok(Round::Held), start, DEFAULT_RENEW_DEADLINE), Change::Became);
        let later = start + Duration::from_secs(2);
        assert_eq!(leadership.observe(&Ok(Round::Held), later, DEFAULT_RENEW_DEADLINE), Change::Unchanged);
        assert_eq!(leadership.renewed_at, Some(later));
    }

    #[test]
    fn failed_renewals_keep_leadership_until_the_renew_deadline() {
        let start = Instant::now();
        let mut leadership = Leadership { renewed_at: Some(start) };
        let deadline = DEFAULT_RENEW_DEADLINE;
        let change = leadership.observe(&failed(), start + Duration::from_millis(9999), deadline);
        assert_eq!(change, Change::Unchanged);
        let change = leadership.observe(&failed(), start + deadline, deadline);
        assert_eq!(change, Change::Lost(Loss::RenewDeadline));
        assert!(!leadership.leading());
    }

    #[test]
    fn leader_that_finds_another_holder_loses_at_once() {
        let start = Instant::now();
        let mut leadership = Leadership { renewed_at: Some(start) };
        let change = leadership.observe(&Ok(Round::HeldBy("other".into())), start, DEFAULT_RENEW_DEADLINE);
        assert_eq!(change, Change::Lost(Loss::TakenOver { holder: "other".into() }));
        let change = leadership.observe(&Ok(Round::HeldBy("other".into())), start, DEFAULT_RENEW_DEADLINE);
        assert_eq!(change, Change::Unchanged);
    }

    #[test]
    fn failures_while_not_leading_change_nothing() {
        let mut leadership = Leadership::default();
        let change =
            leadership.observe(&failed(), Instant::now() + Duration::from_secs(60), DEFAULT_RENEW_DEADLINE);
        assert_eq!(change, Change::Unchanged);
    }

    #[test]
    fn a_leaders_rounds_never_run_past_its_renew_deadline() {
        let config = config();
        let start = Instant::now();
        let leadership = Leadership { renewed_at: Some(start) };
        assert_eq!(leadership.budget(start + Duration::from_secs(4), &config), Duration::from_secs(6));
        assert_eq!(leadership.budget(start + Duration::from_secs(11), &config), Duration::ZERO);
        assert_eq!(leadership.next_round(start, &config), start + Duration::from_secs(2));
        let late = start + Duration::from_millis(9000);
        assert_eq!(leadership.next_round(late, &config), start + Duration::from_secs(10));
        let candidate = Leadership::default();
        assert_eq!(candidate.budget(start, &config), config.renew_deadline);
        assert_eq!(candidate.next_round(late, &config), late + Duration::from_secs(2));
    }

    /// Runs `campaign` with scripted rounds (a round past the script hangs); counts release calls.
    fn scripted(
        script: Vec<Result<Round>>,
    ) -> (watch::Receiver<bool>, CancellationToken, Arc<AtomicUsize>, Arc<AtomicUsize>, JoinHandle<()>) {
        let (leader, receiver) = watch::channel(false);
        let shutdown = CancellationToken::new();
        let rounds = Arc::new(AtomicUsize::new(0));
        let releases = Arc::new(AtomicUsize::new(0));
        let task = {
            let (shutdown, rounds, releases) = (shutdown.clone(), rounds.clone(), releases.clone());
            let script = Arc::new(std::sync::Mutex::new(script.into_iter()));
            tokio::spawn(async move {
                let attempt = || {
                    rounds.fetch_add(1, Ordering::SeqCst);
                    let next = script.lock().unwrap().next();
                    async move {
                        match next {
                            Some(round) => round,
                            None => std::future::pending().await,
                        }
                    }
                };
                let release = || async {
                    releases.fetch_add(1, Ordering::SeqCst);
                    Ok(true)
                };
                campaign(&config(), attempt, release, &leader, &shutdown).await;
            })
        };
        (receiver, shutdown, rounds, releases, task)
    }

    /// Waits for the next change of `receiver` and returns its value and the virtual time it took.
    async fn next_change(receiver: &mut watch::Receiver<bool>) -> (bool, Duration) {
        let start = Instant::now();
        receiver.changed().await.expect("campaign running");
        (*receiver.borrow_and_update(), start.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn candidate_retries_every_retry_period() {
        let script = (0..10).map(|_| Ok(Round::HeldBy("other".into()))).collect();
        let (receiver, _shutdown, rounds, _releases, _task) = scripted(script);
        tokio::time::sleep(Duration::from_millis(10_001)).await;
        // Rounds at 0, 2, 4, 6, 8 and 10 s.
        assert_eq!(rounds.load(Ordering::SeqCst), 6);
        assert!(!*receiver.borrow());
    }

    #[tokio::test(start_paused = true)]
    async fn leader_whose_renewals_fail_steps_down_exactly_at_the_renew_deadline() {
        let script = std::iter::once(Ok(Round::Held)).chain((0..20).map(|_| failed())).collect();
        let (mut receiver, _shutdown, _rounds, _releases, _task) = scripted(script);
        assert_eq!(next_change(&mut receiver).await, (true, Duration::ZERO));
        assert_eq!(next_change(&mut receiver).await, (false, DEFAULT_RENEW_DEADLINE));
    }

    #[tokio::test(start_paused = true)]
    async fn leader_whose_renewal_hangs_steps_down_at_the_renew_deadline() {
        let (mut receiver, _shutdown, _rounds, _releases, _task) =
            scripted(vec![Ok(Round::Held), Ok(Round::Held)]);
        assert_eq!(next_change(&mut receiver).await, (true, Duration::ZERO));
        // Renewed at 2 s; the round at 4 s never answers.
        assert_eq!(next_change(&mut receiver).await, (false, Duration::from_secs(12)));
    }

    #[tokio::test(start_paused = true)]
    async fn leader_that_is_taken_over_steps_down_at_the_next_round() {
        let script = vec![Ok(Round::Held), Ok(Round::HeldBy("other".into()))];
        let (mut receiver, _shutdown, _rounds, _releases, _task) = scripted(script);
        assert_eq!(next_change(&mut receiver).await, (true, Duration::ZERO));
        assert_eq!(next_change(&mut receiver).await, (false, DEFAULT_RETRY_PERIOD));
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_reads_false_releases_the_lease_and_ends_the_task() {
        let script = (0..10).map(|_| Ok(Round::Held)).collect();
        let (mut receiver, shutdown, _rounds, releases, task) = scripted(script);
        assert_eq!(next_change(&mut receiver).await, (true, Duration::ZERO));
        tokio::time::sleep(Duration::from_secs(3)).await;
        shutdown.cancel();
        task.await.expect("campaign ends");
        assert!(!*receiver.borrow());
        assert_eq!(releases.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_leadership_event_names_the_identity_on_the_lease_as_client_go() {
        let config = config();
        let note = became_leader(&config);
        assert_eq!((note.type_, note.reason.as_str()), (EventType::Normal, "LeaderElection"));
        assert_eq!(note.message, "me became leader");
        let lease = Lease {
            metadata: ObjectMeta {
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        let reference = lease_reference(&config, Some(&lease));
        assert_eq!(reference.api_version.as_deref(), Some("coordination.k8s.io/v1"));
        assert_eq!(reference.kind.as_deref(), Some("Lease"));
        assert_eq!(reference.name.as_deref(), Some(config.name.as_str()));
        assert_eq!(reference.namespace.as_deref(), Some(config.namespace.as_str()));
        assert_eq!(
            (reference.uid.as_deref(), reference.resource_version.as_deref()),
            (Some("u-1"), Some("42"))
        );
    }
}
