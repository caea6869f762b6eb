//! The sample operator at the repository root (`watches.yaml`, `roles/`, `playbooks/`, `deploy/`),
//! run as `make run` runs it, against the real cluster and the real local etcd.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use support::operator::{OperatorConfig, scratch_dir};
use support::setup::Test;

const WAIT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn memcached_role_deploys_waits_for_ready_pods_reports_status_and_cleans_up_on_delete() {
    let Test { client, ns, api } =
        Test::setup("sample-memcached").sample("cache.example.com", "Memcached").build().await;
    support::node::require_ready_node(&client).await;
    let _operator = OperatorConfig::project(support::repo().to_path_buf(), &ns.name).start();

    support::create_cr(
        &api,
        "cache.example.com",
        "Memcached",
        "cache",
        json!({"size": 2, "memoryLimitMb": 128, "image": support::node::MEMCACHED_IMAGE}),
    )
    .await;
    let done = support::wait_for_condition(&api, "cache", "Successful", "True", WAIT).await;
    assert_eq!(done.data["status"]["deployment"], "cache-memcached", "k8s_status wrote custom status");
    assert_eq!(done.data["status"]["replicas"], 2);
    assert_eq!(done.data["status"]["readyReplicas"], 2, "the role waited for the Pods on the node");
    assert!(done.metadata.finalizers.iter().flatten().any(|f| f == "cache.example.com/finalizer"));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let deployment = deployments.get("cache-memcached").await.expect("deployment created");
    assert_eq!(deployment.spec.unwrap().replicas, Some(2));
    assert_eq!(deployment.status.unwrap().ready_replicas, Some(2));
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns.name);
    let settings = configmaps.get("cache-memcached").await.expect("settings created");
    assert_eq!(settings.data.unwrap()["memory_limit_mb"], "128", "camelCase spec key reached the role");

    api.delete("cache", &DeleteParams::default()).await.expect("delete CR");
    support::wait_for("the Memcached CR to be finalized and gone", WAIT, || async {
        let cr = api.get_opt("cache").await.map_err(|e| e.to_string())?;
        let deployment = deployments.get_opt("cache-memcached").await.map_err(|e| e.to_string())?;
        Ok(match (cr, deployment) {
            (None, None) => Ok(()),
            (cr, deployment) => {
                Err(format!("CR present: {}, deployment present: {}", cr.is_some(), deployment.is_some()))
            }
        })
    })
    .await;
}

#[tokio::test]
async fn etcd_backup_snapshots_the_real_etcd_and_records_path_and_size() {
    let Test { client: _, ns, api } =
        Test::setup("sample-etcdbackup").sample("etcd.example.com", "EtcdBackup").build().await;
    // The snapshot directory is the operator's choice, not the CR's (watches.yaml).
    let backup_dir = scratch_dir(&format!("{}-backups", ns.name));
    let _operator = OperatorConfig::project(support::repo().to_path_buf(), &ns.name)
        .env("ETCD_BACKUP_DIR", backup_dir.display().to_string())
        .start();
    let endpoint =
        format!("http://127.0.0.1:{}", std::env::var("ETCD_PORT").unwrap_or_else(|_| "12379".into()));

    support::create_cr(&api, "etcd.example.com", "EtcdBackup", "nightly", json!({"endpoint": endpoint}))
        .await;
    let done = support::wait_for_condition(&api, "nightly", "Successful", "True", WAIT).await;

    let snapshot = &done.data["status"]["snapshot"];
    let path = snapshot["path"].as_str().expect("status.snapshot.path");
    assert!(path.starts_with(&backup_dir.display().to_string()), "{path}");
    let size = std::fs::metadata(path).expect("snapshot file exists").len();
    assert!(size > 0);
    assert_eq!(snapshot["size"].as_u64(), Some(size), "status records the file's size");
    assert_eq!(snapshot["endpoint"], endpoint.as_str());

    api.delete("nightly", &DeleteParams::default()).await.expect("delete CR");
    support::wait_for("the snapshot to be removed by the finalizer", WAIT, || async {
        let cr = api.get_opt("nightly").await.map_err(|e| e.to_string())?;
        Ok(if cr.is_none() && !std::path::Path::new(path).exists() {
            Ok(())
        } else {
            Err(format!(
                "CR present: {}, file present: {}",
                cr.is_some(),
                std::path::Path::new(path).exists()
            ))
        })
    })
    .await;
}
