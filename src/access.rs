//! Who is asking and what they may do, decided by the API server as for any other client: a bearer
//! token goes through a `TokenReview`, the request through a `SubjectAccessReview` against the
//! resource it touches. Answers are cached briefly (10 s, as kube-rbac-proxy does), so a page of
//! the console does not cost a review per request.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::kubeapi::{self, with_timeout};

/// How long an answer of the API server is reused.
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Cached answers kept before the expired ones are dropped.
const CACHE_SIZE: usize = 1024;

/// Why a request is not let through.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No bearer token, or one the API server does not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// The user may not do this.
    #[error("{user} may not {verb} {what}")]
    Forbidden {
        /// The user.
        user: String,
        /// The verb.
        verb: String,
        /// The resource or path, as `resource.group in namespace NS` or a path.
        what: String,
    },
    /// The review itself failed (API server unreachable, or the operator may not create reviews).
    #[error("{review} failed")]
    Review {
        /// `TokenReview` or `SubjectAccessReview`.
        review: &'static str,
        /// Cause.
        #[source]
        source: kubeapi::Error,
    },
}

/// An authenticated user, as the `TokenReview` described them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    /// The user name, e.g. `system:serviceaccount:ns:reader`.
    pub name: String,
    /// Their uid.
    pub uid: Option<String>,
    /// Their groups.
    pub groups: Vec<String>,
    /// Further attributes (e.g. the service account's pod).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request does, in the API server's terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// A verb on a resource (`namespace` `None`: cluster-wide).
    Resource {
        /// `get`, `list`, `patch`, ...
        verb: &'static str,
        /// API group (`""` for core).
        group: String,
        /// Plural resource name.
        resource: String,
        /// Subresource (`log` of a run log), checked as the API server checks `pods/log`.
        subresource: Option<String>,
        /// Namespace, when the request is about one.
        namespace: Option<String>,
        /// Object name, when the request is about one.
        name: Option<String>,
    },
    /// A verb on a URL path (e.g. `get` on `/metrics`).
    Path {
        /// The verb.
        verb: &'static str,
        /// The path.
        path: String,
    },
}

impl Action {
    fn verb(&self) -> &'static str {
        match self {
            Action::Resource { verb, .. } | Action::Path { verb, .. } => verb,
        }
    }

    /// The thing acted on, for messages: `memcacheds.cache.example.com in namespace a`.
    fn describe(&self) -> String {
        match self {
            Action::Resource { group, resource, subresource, namespace, .. } => {
                let mut resource =
                    if group.is_empty() { resource.clone() } else { format!("{resource}.{group}") };
                if let Some(subresource) = subresource {
                    resource = format!("{resource}/{subresource}");
                }
                match namespace {
                    Some(namespace) => format!("{resource} in namespace {namespace}"),
                    None => format!("{resource} in all namespaces"),
                }
            }
            Action::Path { path, .. } => path.clone(),
        }
    }
}

type Cache<K, V> = Mutex<HashMap<K, (Instant, V)>>;

/// Authenticates and authorises through the API server.
pub struct Access {
    client: Client,
    tokens: Cache<[u8; 32], Result<User, String>>,
    decisions: Cache<(User, Action), bool>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access").finish_non_exhaustive()
    }
}

impl Access {
    /// Reviews go through `client` (the operator's own credentials).
    pub fn new(client: Client) -> Access {
        Access { client, tokens: Mutex::default(), decisions: Mutex::default() }
    }

    /// The user behind an `Authorization` header's value.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<User, Error> {
        let token = authorization
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| Error::Unauthenticated("a bearer token is required".into()))?;
        let key: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
            .as_ref()
            .try_into()
            .unwrap_or_default();
        let reviewed = match cached(&self.tokens, &key) {
            Some(reviewed) => reviewed,
            None => {
                let reviewed = self.review_token(token).await?;
                store(&self.tokens, key, reviewed.clone());
                reviewed
            }
        };
        reviewed.map_err(Error::Unauthenticated)
    }

    /// Lets `user` do `action`, or says why not.
    pub async fn authorize(&self, user: &User, action: Action) -> Result<(), Error> {
        let key = (user.clone(), action);
        let allowed = match cached(&self.decisions, &key) {
            Some(allowed) => allowed,
            None => {
                let allowed = self.review_access(&key.0, &key.1).await?;
                store(&self.decisions, key.clone(), allowed);
                allowed
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(Error::Forbidden {
                user: user.name.clone(),
                verb: key.1.verb().to_string(),
                what: key.1.describe(),
            })
        }
    }

    async fn review_token(&self, token: &str) -> Result<Result<User, String>, Error> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: Some(token.to_string()), ..Default::default() },
            ..Default::default()
        };
        let reviewed = with_timeout(
            Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review),
        )
        .await
        .map_err(|source| Error::Review { review: "TokenReview", source })?;
        let status = reviewed.status.unwrap_or_default();
        Ok(match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(User {
                name: user.username.unwrap_or_default(),
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
                extra: user.extra.unwrap_or_default(),
            }),
            _ => {
                Err(status.error.filter(|e| !e.is_empty()).unwrap_or_else(|| "the token is not valid".into()))
            }
        })
    }

    async fn review_access(&self, user: &User, action: &Action) -> Result<bool, Error> {
        let (resource_attributes, non_resource_attributes) = match action {
            Action::Resource { verb, group, resource, subresource, namespace, name } => (
                Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(group.clone()),
                    resource: Some(resource.clone()),
                    subresource: subresource.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    ..Default::default()
                }),
                None,
            ),
            Action::Path { verb, path } => {
                (None, Some(NonResourceAttributes { verb: Some(verb.to_string()), path: Some(path.clone()) }))
            }
        };
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()),
                resource_attributes,
                non_resource_attributes,
            },
            ..Default::default()
        };
        let reviewed = with_timeout(
            Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &review),
        )
        .await
        .map_err(|source| Error::Review { review: "SubjectAccessReview", source })?;
        Ok(reviewed.status.is_some_and(|status| status.allowed))
    }
}

fn cached<K: std::hash::Hash + Eq, V: Clone>(cache: &Cache<K, V>, key: &K) -> Option<V> {
    let cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    cache.get(key).filter(|(at, _)| at.elapsed() < CACHE_TTL).map(|(_, value)| value.clone())
}

fn store<K: std::hash::Hash + Eq, V>(cache: &Cache<K, V>, key: K, value: V) {
    let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() >= CACHE_SIZE {
        cache.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        if cache.len() >= CACHE_SIZE {
            cache.clear();
        }
    }
    cache.insert(key, (Instant::now(), value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_described_as_the_api_server_would() {
        let action = |namespace: Option<&str>, group: &str| Action::Resource {
            verb: "get",
            group: group.into(),
            resource: "memcacheds".into(),
            subresource: None,
            namespace: namespace.map(str::to_string),
            name: None,
        };
        assert_eq!(
            action(Some("a"), "cache.example.com").describe(),
            "memcacheds.cache.example.com in namespace a"
        );
        assert_eq!(action(None, "").describe(), "memcacheds in all namespaces");
        let mut log = action(Some("a"), "cache.example.com");
        if let Action::Resource { subresource, .. } = &mut log {
            *subresource = Some("log".into());
        }
        assert_eq!(log.describe(), "memcacheds.cache.example.com/log in namespace a");
        assert_eq!(Action::Path { verb: "get", path: "/metrics".into() }.describe(), "/metrics");
    }

    #[test]
    fn cached_answers_expire_and_the_cache_stays_bounded() {
        let cache: Cache<u32, bool> = Mutex::default();
        store(&cache, 1, true);
        assert_eq!(cached(&cache, &1), Some(true));
        cache.lock().unwrap().get_mut(&1).unwrap().0 -= CACHE_TTL;
        assert_eq!(cached(&cache, &1), None, "an expired answer is asked again");
        for key in 0..(CACHE_SIZE as u32 + 10) {
            store(&cache, key, true);
        }
        assert!(cache.lock().unwrap().len() <= CACHE_SIZE);
    }
}
