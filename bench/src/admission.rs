//! Scenario 7, admission: a `Bench` kind whose watch names a three-task `validate` playbook
//! (`playbooks/validate.yml`), served by the operator as a validating webhook it registers itself.
//! Measured: the time of a server-side dry-run create (`dryRun=All`: the API server calls the
//! webhook, stores nothing) as a client sees it, sequentially, after warm-up requests; and that an
//! invalid CR is refused with the playbook's message.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::cluster;
use crate::operator::{Flavor, Launch, Operator};
use crate::scenarios::Ctx;
use crate::stats::Summary;

/// Requests before the measured ones (the first forks the worker's validation path).
const WARMUP: usize = 3;
/// How long the webhook may take to be registered and answer.
const READY: Duration = Duration::from_secs(120);

/// Runs the scenario for `flavor` (ours only: upstream has no admission playbooks).
pub async fn admission(ctx: &Ctx, flavor: &Flavor, requests: usize) -> Value {
    let label = format!("admission-{}", flavor.label);
    let namespace = match cluster::create_namespace(&ctx.client, "bench-admission").await {
        Ok(namespace) => namespace,
        Err(error) => return json!({"binary": flavor.label, "error": format!("{error:#}")}),
    };
    let configuration = format!("{namespace}-validate");
    let result = measure(ctx, flavor, &namespace, &configuration, &label, requests).await;
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(ctx.client.clone());
    let _ = webhooks.delete(&configuration, &DeleteParams::default()).await;
    cluster::delete_namespace(&ctx.client, &namespace, Duration::from_secs(60)).await;
    match result {
        Ok(mut value) => {
            value["binary"] = json!(flavor.label);
            value
        }
        Err(error) => json!({"binary": flavor.label, "error": format!("{error:#}")}),
    }
}

async fn measure(
    ctx: &Ctx,
    flavor: &Flavor,
    namespace: &str,
    configuration: &str,
    label: &str,
    requests: usize,
) -> anyhow::Result<Value> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let dir = ctx.scratch(label);
    let validate = ctx.playbook("validate");
    let launch = Launch {
        namespace,
        playbook: &ctx.playbook("debug"),
        concurrency: 1,
        reconcile_period: None,
        dir: &dir,
        path_prefix: None,
        args: vec![
            format!("--api-bind-address=127.0.0.1:{port}"),
            "--webhook-host=127.0.0.1".to_string(),
            format!("--webhook-configuration-name={configuration}"),
        ],
        env: Vec::new(),
        watch_extra: Some(format!("  validate: {}\n  validateFailurePolicy: Ignore\n", validate.display())),
    };
    let mut operator = Operator::start(flavor, &launch, &ctx.kubeconfig, &ctx.repo)?;
    let api = cluster::crs(&ctx.client, namespace);
    let dry_run = PostParams { dry_run: true, ..PostParams::default() };
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(ctx.client.clone());
    let outcome = async {
        // Registered, and answering: an invalid CR is refused (Ignore would let it through otherwise).
        let deadline = Instant::now() + READY;
        let mut invalid = cluster::cr("invalid", 0);
        invalid.data["spec"]["payload"] = json!("");
        let refusal = loop {
            operator.check_alive()?;
            if webhooks.get_opt(configuration).await?.is_some() {
                match api.create(&dry_run, &invalid).await {
                    Err(kube::Error::Api(status))
                        if status.message.contains("spec.payload must not be empty") =>
                    {
                        break status.message;
                    }
                    _ => {}
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the webhook did not refuse an invalid CR within {READY:?}: see {}",
                    operator.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let mut millis = Vec::with_capacity(requests);
        for i in 0..WARMUP + requests {
            let start = Instant::now();
            api.create(&dry_run, &cluster::cr(&format!("valid-{i}"), i))
                .await
                .with_context(|| format!("dry-run create {i}"))?;
            if i >= WARMUP {
                millis.push(start.elapsed().as_secs_f64() * 1000.0);
            }
        }
        let summary = Summary::of(&millis);
        Ok(json!({
            "requests": requests,
            "milliseconds": summary.json(),
            "p99_ms": percentile(&millis, 0.99),
            "refusal": refusal,
        }))
    }
    .await;
    ctx.keep_log(&operator, label);
    operator.stop(Duration::from_secs(10));
    outcome
}

/// The nearest-rank percentile `q` of `samples`.
fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n => sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn p99_is_the_nearest_rank() {
        let samples: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.99), 198.0);
        assert_eq!(percentile(&[3.0, 1.0, 2.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.99), 0.0);
    }
}
