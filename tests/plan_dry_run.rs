//! Write-free means write-free (DESIGN.md, Trust boundaries, invariant 2), as a dry-run
//! differential against the real API server: the corpus `fixtures/corpora/plan_writes.json` (every
//! verb, every patch type, deletes with and without options bodies, deletecollection, status and
//! scale, eviction, `;` pairs, bad escapes, encoded names, odd `dryRun` keys, workload proxies) is
//! sent as raw HTTP through the operator's own proxy under a plan's credential. Every object that
//! existed before keeps its `resourceVersion`, none is created or deleted, each request the corpus
//! expects to be sent is answered by the API server with its code, and each one it expects refused
//! gets a 403 `Status` saying why.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ansible_operator::proxy::Proxy;
use ansible_operator::proxy::credentials::Grant;
use ansible_operator::proxy::owner::Owner;
use ansible_operator::proxy::throttle::Throttle;
use ansible_operator::watches::Gvk;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::setup::Test;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const GROUP: &str = "dryrun.test.example.com";
const KIND: &str = "Thing";
const WAIT: Duration = Duration::from_secs(60);
/// How long one request of the corpus may take: a request the proxy sends on to a workload (a
/// service's proxy, an exec) may hang instead of failing.
const ANSWER: Duration = Duration::from_secs(20);

/// One request of the corpus.
#[derive(Debug, serde::Deserialize)]
struct Entry {
    name: String,
    method: String,
    path: String,
    query: Option<String>,
    content_type: Option<String>,
    #[serde(default)]
    body: String,
    expect: Expect,
    code: Option<u16>,
}

#[derive(Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Expect {
    /// Rebuilt and sent on; answered by the API server with `code`.
    Sent,
    /// Refused by the proxy with a 403 saying why.
    Refused,
}

/// Sends one request as written, byte for byte, and reads the answer (HTTP/1.0: no chunks).
async fn send(
    port: u16,
    token: &str,
    method: &str,
    target: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect to the proxy");
    let content_type = content_type.map(|c| format!("Content-Type: {c}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {target} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{content_type}\
         Accept: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read the proxy's answer");
    let answer = String::from_utf8_lossy(&answer);
    let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body).unwrap_or_default();
    (code, serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_string())))
}

fn versions<K: Resource<DynamicType = ()>>(objects: Vec<K>, into: &mut BTreeMap<String, String>) {
    for object in objects {
        let meta = object.meta();
        let key = format!("{}/{}", K::kind(&()), meta.name.clone().unwrap_or_default());
        into.insert(key, meta.resource_version.clone().unwrap_or_default());
    }
}

/// Every object in the namespace the corpus could touch, and the namespace itself, with its
/// `resourceVersion`.
async fn snapshot(
    client: &kube::Client,
    ns: &str,
    crs: &Api<kube::api::DynamicObject>,
) -> BTreeMap<String, String> {
    let all = ListParams::default();
    let mut seen = BTreeMap::new();
    versions(Api::<ConfigMap>::namespaced(client.clone(), ns).list(&all).await.unwrap().items, &mut seen);
    versions(Api::<Deployment>::namespaced(client.clone(), ns).list(&all).await.unwrap().items, &mut seen);
    versions(Api::<ReplicaSet>::namespaced(client.clone(), ns).list(&all).await.unwrap().items, &mut seen);
    versions(Api::<Pod>::namespaced(client.clone(), ns).list(&all).await.unwrap().items, &mut seen);
    versions(Api::<Service>::namespaced(client.clone(), ns).list(&all).await.unwrap().items, &mut seen);
    versions(
        Api::<ServiceAccount>::namespaced(client.clone(), ns).list(&all).await.unwrap().items,
        &mut seen,
    );
    for cr in crs.list(&all).await.unwrap().items {
        seen.insert(
            format!("{KIND}/{}", cr.metadata.name.unwrap_or_default()),
            cr.metadata.resource_version.unwrap_or_default(),
        );
    }
    let namespace = Api::<Namespace>::all(client.clone()).get(ns).await.unwrap();
    let phase = namespace.status.and_then(|s| s.phase).unwrap_or_default();
    seen.insert(
        format!("Namespace/{ns}"),
        format!("{} {phase}", namespace.metadata.resource_version.unwrap_or_default()),
    );
    seen
}

async fn create<K>(client: &kube::Client, ns: &str, object: Value) -> K
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).expect("a valid object");
    Api::<K>::namespaced(client.clone(), ns).create(&PostParams::default(), &object).await.expect("create")
}

#[tokio::test]
async fn a_plans_writes_through_the_proxy_change_nothing_and_what_cannot_be_rebuilt_is_refused() {
    let Test { client, ns, api: crs } = Test::setup("plan-dry-run").kind(GROUP, KIND).build().await;
    let ns = &ns.name;

    // What the corpus aims at.
    for (name, labels) in
        [("victim", json!({})), ("keep-a", json!({"corpus": "yes"})), ("keep-b", json!({"corpus": "yes"}))]
    {
        let object = json!({"metadata": {"name": name, "labels": labels}, "data": {"kept": "yes"}});
        create::<ConfigMap>(&client, ns, object).await;
    }
    let labels = json!({"app": "web"});
    let template = json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "example.invalid/web"}]}});
    let deployment = json!({"metadata": {"name": "web"}, "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template}});
    create::<Deployment>(&client, ns, deployment).await;
    let service = json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}], "selector": labels}});
    create::<Service>(&client, ns, service).await;
    // A pod needs the namespace's default ServiceAccount; gated, it is never scheduled or changed.
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), ns);
    support::wait_for("the default ServiceAccount", WAIT, || async {
        Ok(accounts
            .get_opt("default")
            .await
            .map_err(|e| e.to_string())?
            .map(|_| ())
            .ok_or_else(|| "absent".to_string()))
    })
    .await;
    let pod = json!({"metadata": {"name": "p"}, "spec": {
        "schedulingGates": [{"name": "ansible-operator.dev/corpus"}],
        "containers": [{"name": "c", "image": "example.invalid/p"}],
    }});
    create::<Pod>(&client, ns, pod).await;
    let thing = support::create_cr(&crs, GROUP, KIND, "thing", json!({"size": 1})).await;
    let thing_rv = thing.metadata.resource_version.expect("a created CR has a resourceVersion");

    // Controllers finish with the new objects (the Deployment's ReplicaSet and status) first.
    let before = support::wait_for("the namespace to settle", WAIT, || async {
        let first = snapshot(&client, ns, &crs).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let second = snapshot(&client, ns, &crs).await;
        Ok(if first == second { Ok(second) } else { Err(format!("{first:?} then {second:?}")) })
    })
    .await;

    // The operator's proxy, on the same API server, with a plan's credential.
    let (proxy, listener) =
        Proxy::bind(support::client().await, 0, None, Throttle::unlimited()).await.expect("bind the proxy");
    let port = proxy.port();
    let shutdown = CancellationToken::new();
    tokio::spawn(Arc::clone(&proxy).serve(listener, shutdown.clone()));
    let owner = Owner {
        gvk: Gvk::new(GROUP, "v1alpha1", KIND),
        plural: "things".into(),
        name: "thing".into(),
        uid: "plan-dry-run".into(),
        namespace: Some(ns.clone()),
        shard_label: None,
    };
    let issued =
        proxy.credentials().issue(Grant::plan(owner, Arc::default())).expect("issue a plan's credential");

    let text =
        std::fs::read_to_string(support::repo().join("tests/fixtures/corpora/plan_writes.json")).unwrap();
    let corpus: Value = serde_json::from_str(&text).expect("the corpus is JSON");
    let mut entries: Vec<Entry> = serde_json::from_value(corpus["requests"].clone()).expect("corpus entries");
    let many = vec!["a=b"; ansible_operator::proxy::dry_run::MAX_PAIRS].join("&");
    entries.push(Entry {
        name: "more pairs than a write needs".into(),
        method: "DELETE".into(),
        path: "/api/v1/namespaces/{ns}/configmaps/victim".into(),
        query: Some(format!("{many}&dryRun=All")),
        content_type: None,
        body: String::new(),
        expect: Expect::Refused,
        code: None,
    });

    let mut failures = Vec::new();
    for entry in &entries {
        let path = entry.path.replace("{ns}", ns);
        let target = match &entry.query {
            Some(query) => format!("{path}?{query}"),
            None => path,
        };
        let body = entry.body.replace("{ns}", ns).replace("{thing_rv}", &thing_rv);
        let sent =
            send(port, &issued.token, &entry.method, &target, entry.content_type.as_deref(), body.as_bytes());
        let Ok((code, answer)) = tokio::time::timeout(ANSWER, sent).await else {
            failures.push(format!("{} ({} {target}): no answer within {ANSWER:?}", entry.name, entry.method));
            continue;
        };
        let message = answer["message"].as_str().unwrap_or_default();
        let refused = code == 403 && message.starts_with("a plan's run may not send this");
        let ok = match entry.expect {
            Expect::Refused => refused && answer["kind"] == "Status" && message.contains(": "),
            Expect::Sent => !refused && entry.code.is_none_or(|expected| expected == code),
        };
        println!("{:<50} {} {target} -> {code} {message}", entry.name, entry.method);
        if !ok {
            failures.push(format!(
                "{} ({} {target}): expected {:?} {:?}, got {code} {answer}",
                entry.name, entry.method, entry.expect, entry.code
            ));
        }
    }

    let after = snapshot(&client, ns, &crs).await;
    assert_eq!(after, before, "the corpus changed, created or deleted objects");
    assert!(failures.is_empty(), "requests not answered as the corpus expects:\n{}", failures.join("\n"));
    shutdown.cancel();
}
