//! Per-run credentials: each run's kubeconfig carries a random bearer token that the proxy maps to
//! the CR the run acts for. A token is valid only while its run lasts.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex};

use super::owner::Owner;
use super::rights::Rights;
use super::throttle::RunBucket;
use crate::history::{Read, Touched};
use crate::mask::Secrets;
use crate::watches::Gvk;

/// What a run may do through the proxy, and for whom; and the objects it wrote through it.
#[derive(Debug)]
pub struct Grant {
    /// The CR the run acts for.
    pub owner: Owner,
    /// Watch kinds this run creates, so changes to them trigger the owner.
    pub watch_dependents: bool,
    /// Also watch cluster-scoped children (linked by annotations).
    pub watch_cluster_scoped: bool,
    /// Child kinds never watched.
    pub blacklist: Vec<Gvk>,
    /// Objects the run created, changed or deleted, in order (the first [`MAX_TOUCHED`]).
    pub touched: Mutex<Vec<Touched>>,
    /// The values of the Secrets the run read or wrote, masked in its output.
    pub secrets: Arc<Secrets>,
    /// Objects the run read and does not own, once each (the first [`MAX_READS`]).
    pub reads: Mutex<Vec<Read>>,
    /// A plan's run: every write is a server-side dry run, and nothing is linked or watched.
    pub plan_only: bool,
    /// What the run's kind may ask for, and as whom.
    pub rights: Arc<Rights>,
    /// The run's own rate limit bucket (`--proxy-qps-per-run`), made on its first request.
    pub bucket: RunBucket,
    /// The run's span, the parent of its requests' (empty when traces are off).
    pub trace: opentelemetry::Context,
}

/// Writes of one run recorded (for the run history); later ones are dropped.
pub const MAX_TOUCHED: usize = 200;

/// Distinct reads of one run recorded; later ones are dropped.
pub const MAX_READS: usize = 200;

impl Grant {
    /// The grant of a run that must not change anything (a plan, a validation): every write is a
    /// server-side dry run, and nothing is linked, watched or recorded; within its kind's `rights`.
    pub fn plan(owner: Owner, rights: Arc<Rights>) -> Grant {
        Grant {
            owner,
            watch_dependents: false,
            watch_cluster_scoped: false,
            blacklist: Vec::new(),
            touched: Mutex::default(),
            secrets: Arc::default(),
            reads: Mutex::default(),
            plan_only: true,
            rights,
            bucket: RunBucket::new(),
            trace: opentelemetry::Context::new(),
        }
    }

    /// Records a write, up to [`MAX_TOUCHED`].
    pub fn touched(&self, write: Touched) {
        let mut touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
        if touched.len() < MAX_TOUCHED {
            touched.push(write);
        }
    }

    /// The writes recorded so far.
    pub fn writes(&self) -> Vec<Touched> {
        self.touched.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a read, once, up to [`MAX_READS`]. A later GET that found the object adds its kind.
    pub fn read(&self, read: Read) {
        let mut reads = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        let same = |known: &Read| Read { kind: None, ..known.clone() } == Read { kind: None, ..read.clone() };
        let count = reads.len();
        match reads.iter_mut().find(|known| same(known)) {
            Some(known) if known.kind.is_none() => known.kind = read.kind,
            Some(_) => {}
            None if count < MAX_READS => reads.push(read),
            None => {}
        }
    }

    /// The run's read-set: what it read, less the objects it wrote itself (a run that reads what it
    /// writes would otherwise re-run on its own writes).
    pub fn read_set(&self) -> Vec<Read> {
        let writes = self.writes();
        let reads = self.reads.lock().unwrap_or_else(|p| p.into_inner()).clone();
        reads
            .into_iter()
            .filter(|read| {
                !writes.iter().any(|write| {
                    write.group == read.group
                        && write.namespace == read.namespace
                        && read.name.as_deref() == Some(write.name.as_str())
                        && read.kind.as_deref().is_none_or(|kind| kind == write.kind)
                })
            })
            .collect()
    }
}

/// The tokens of the runs in flight.
#[derive(Debug, Default)]
pub struct Credentials {
    grants: Mutex<HashMap<String, Arc<Grant>>>,
}

/// A token that is revoked when dropped (when the run ends, however it ends).
#[derive(Debug)]
pub struct Issued {
    /// The bearer token.
    pub token: String,
    /// What the token grants, and what the run wrote with it.
    pub grant: Arc<Grant>,
    credentials: Arc<Credentials>,
}

impl Credentials {
    /// Issues a new token for a run.
    pub fn issue(self: &Arc<Self>, grant: Grant) -> std::io::Result<Issued> {
        let token = random_token()?;
        let grant = Arc::new(grant);
        self.lock().insert(token.clone(), grant.clone());
        Ok(Issued { token, grant, credentials: self.clone() })
    }

    /// The grant behind a token, if the token belongs to a run in flight.
    pub fn lookup(&self, token: &str) -> Option<Arc<Grant>> {
        self.lock().get(token).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Grant>>> {
        self.grants.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Issued {
    fn drop(&mut self) {
        self.credentials.lock().remove(&self.token);
    }
}

/// 32 random bytes from the kernel, hex-encoded.
fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant() -> Grant {
        Grant {
            owner: Owner {
                gvk: Gvk::new("g", "v1", "K"),
                plural: "ks".into(),
                name: "n".into(),
                uid: "u".into(),
                namespace: None,
                shard_label: None,
            },
            watch_dependents: true,
            watch_cluster_scoped: false,
            blacklist: Vec::new(),
            touched: Mutex::default(),
            secrets: Arc::default(),
            reads: Mutex::default(),
            plan_only: false,
            rights: Arc::default(),
            bucket: RunBucket::new(),
            trace: opentelemetry::Context::new(),
        }
    }

    fn get(name: &str, kind: Option<&str>) -> Read {
        crate::history::record::tests::read("configmaps", kind, name)
    }

    #[test]
    fn reads_are_recorded_once_and_the_objects_the_run_wrote_are_left_out() {
        let grant = grant();
        grant.read(get("settings", None));
        grant.read(get("settings", Some("ConfigMap")));
        grant.read(get("settings", None));
        grant.read(get("generated", Some("ConfigMap")));
        grant.touched(Touched {
            verb: "patch",
            kind: "ConfigMap".into(),
            group: String::new(),
            namespace: Some("ns".into()),
            name: "generated".into(),
        });
        assert_eq!(grant.read_set(), vec![get("settings", Some("ConfigMap"))]);
        for i in 0..MAX_READS + 5 {
            grant.read(get(&i.to_string(), None));
        }
        assert_eq!(grant.reads.lock().unwrap().len(), MAX_READS);
    }

    #[test]
    fn writes_are_recorded_up_to_the_limit() {
        let grant = grant();
        let write = |name: &str| Touched {
            verb: "create",
            kind: "ConfigMap".into(),
            group: String::new(),
            namespace: Some("ns".into()),
            name: name.into(),
        };
        for i in 0..MAX_TOUCHED + 5 {
            grant.touched(write(&i.to_string()));
        }
        let writes = grant.writes();
        assert_eq!(writes.len(), MAX_TOUCHED);
        assert_eq!(writes[0], write("0"));
    }

    #[test]
    fn token_is_valid_until_the_run_ends() {
        let credentials = Arc::new(Credentials::default());
        let issued = credentials.issue(grant()).unwrap();
        assert_eq!(issued.token.len(), 64);
        assert_eq!(credentials.lookup(&issued.token).unwrap().owner.name, "n");
        let token = issued.token.clone();
        drop(issued);
        assert!(credentials.lookup(&token).is_none());
        assert!(credentials.lookup("made-up").is_none());
    }

    #[test]
    fn tokens_differ_between_runs() {
        let credentials = Arc::new(Credentials::default());
        let a = credentials.issue(grant()).unwrap();
        let b = credentials.issue(grant()).unwrap();
        assert_ne!(a.token, b.token);
    }
}
