//! Per-run credentials: each run's kubeconfig carries a random bearer token that the proxy maps to
//! the CR the run acts for. A token is valid only while its run lasts.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};

use super::owner::Owner;
use crate::watches::Gvk;

/// What a run may do through the proxy, and for whom.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The CR the run acts for.
    pub owner: Owner,
    /// Watch kinds this run creates, so changes to them trigger the owner.
    pub watch_dependents: bool,
    /// Also watch cluster-scoped children (linked by annotations).
    pub watch_cluster_scoped: bool,
    /// Child kinds never watched.
    pub blacklist: Vec<Gvk>,
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
    credentials: Arc<Credentials>,
}

impl Credentials {
    /// Issues a new token for a run.
    pub fn issue(self: &Arc<Self>, grant: Grant) -> std::io::Result<Issued> {
        let token = random_token()?;
        self.lock().insert(token.clone(), Arc::new(grant));
        Ok(Issued { token, credentials: self.clone() })
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
                name: "n".into(),
                uid: "u".into(),
                namespace: None,
            },
            watch_dependents: true,
            watch_cluster_scoped: false,
            blacklist: Vec::new(),
        }
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
