//! A storm of failing CRs: 200 CRs whose playbook fails are retried within the retry rate limit
//! (controller-runtime's default, which upstream has: per-CR exponential backoff and a bucket of
//! 10 retries a second with bursts of 100, shared by the watch), and a spec change that fixes them
//! converges every one. Warm executor only: in cold mode the same storm takes minutes on 2 cores.

use crate::support;

use std::time::{Duration, Instant};

use futures::future::join_all;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use support::operator::OperatorConfig;
use support::setup::Test;

const GROUP: &str = "storm.test.example.com";
const KIND: &str = "Validated";
const CRS: usize = 200;
const WINDOW: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(600);

/// Failed reconciles of the watch so far, from the operator's `/metrics`.
fn errors(port: u16) -> Option<f64> {
    support::reconciles_counted(port, "validated-v1alpha1-controller", Some("error"))
}

#[tokio::test]
async fn two_hundred_failing_crs_retry_within_the_rate_limit_and_all_converge_once_fixed() {
    let Test { client: _, ns, api } = Test::setup("storm").kind(GROUP, KIND).build().await;
    let port = support::free_port();
    let _operator = OperatorConfig::new(&support::playbook_watch(GROUP, KIND, "validate.yml"), &ns.name)
        .arg(format!("--metrics-bind-address=127.0.0.1:{port}"))
        .arg("--max-concurrent-reconciles=4")
        .start();
    let names: Vec<String> = (0..CRS).map(|i| format!("cr-{i:03}")).collect();
    for chunk in names.chunks(20) {
        join_all(chunk.iter().map(|name| support::create_cr(&api, GROUP, KIND, name, json!({"size": -1}))))
            .await;
    }

    let all_failed = support::wait_for("every CR to have failed once", WAIT, || async {
        let count = errors(port).unwrap_or(0.0);
        Ok(if count >= CRS as f64 { Ok(count) } else { Err(format!("{count} failed reconciles")) })
    })
    .await;
    let started = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let retried = errors(port).expect("metrics answer") - all_failed;
    let rate = retried / started.elapsed().as_secs_f64();
    println!("storm: {retried} retries of {CRS} failing CRs in {WINDOW:?}: {rate:.1} a second");
    // The bucket's bound over the window: its rate plus at most one burst.
    let bound = 10.0 + 100.0 / WINDOW.as_secs_f64();
    assert!(rate <= bound, "{rate:.1} retries a second, above the rate limit's {bound}");
    assert!(retried > 0.0, "failing CRs are retried");

    let fixed = json!({"spec": {"size": 1}});
    for chunk in names.chunks(20) {
        let params = PatchParams::default();
        let patch = Patch::Merge(&fixed);
        join_all(chunk.iter().map(|name| api.patch(name, &params, &patch))).await;
    }
    support::wait_for("every CR to converge", WAIT, || async {
        let list = api.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
        let converged = list.items.iter().filter(|cr| support::successful_at(cr, 2)).count();
        Ok(if converged == CRS { Ok(()) } else { Err(format!("{converged} of {CRS} converged")) })
    })
    .await;
}
