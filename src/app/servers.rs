//! What every replica serves, leader or not: `/metrics`, user metrics, probes, the API proxy for
//! playbooks, the HTTPS API and console; and the artifact pruner.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::wiring::Wiring;
use crate::access::Access;
use crate::admission::{CheckRuns, Converter, Validator, configuration};
use crate::cli::RunArgs;
use crate::controller::WatchController;
use crate::health;
use crate::metrics;
use crate::proxy::Proxy;
use crate::proxy::dependents::Dependents;
use crate::proxy::throttle::{Rate, Throttle};
use crate::reconcile::inputs::Composer;
use crate::runner;
use crate::watches::Watch;
use crate::{api, http_server, tls};

/// The zap logger of these lines: `app`, as before they moved into this file.
const TARGET: &str = "ansible_operator::app";

/// How often the global artifact cap is enforced.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// Binds and serves `/metrics`, the user-metrics endpoint and the probes; each can be disabled with `0`.
pub(super) async fn serve_endpoints(args: &RunArgs, wired: &Wiring) -> anyhow::Result<()> {
    let bind = |address: &str, what: &'static str| {
        let address = address.to_string();
        async move { http_server::bind(&address).await.with_context(|| format!("serve {what} on {address}")) }
    };
    let (metrics, shutdown) = (&wired.metrics, &wired.shutdown);
    if let Some(listener) = bind(&args.metrics_bind_address, "metrics").await? {
        let secure = match args.metrics_secure {
            true => Some(metrics::Secure {
                tls: tls::server(args.metrics_cert_dir.as_deref(), &certificate_names(), None)
                    .context("the metrics endpoint's TLS certificate")?,
                access: args.metrics_require_rbac.then(|| Arc::new(Access::new(wired.client.clone()))),
            }),
            false => None,
        };
        tokio::spawn(metrics::serve_metrics(listener, metrics.clone(), secure, shutdown.clone()));
    }
    if let Some(listener) = bind(&args.user_metrics_bind_address, "user metrics").await? {
        tokio::spawn(metrics::serve_user_metrics(listener, metrics.clone(), shutdown.clone()));
    }
    if let Some(listener) = bind(&args.health_probe_bind_address, "health probes").await? {
        tokio::spawn(health::serve_health(listener, wired.readiness.clone(), shutdown.clone()));
    }
    Ok(())
}

/// Binds and serves the API proxy playbooks use on 127.0.0.1:`--proxy-port`.
pub(super) async fn serve_proxy(
    args: &RunArgs,
    wired: &Wiring,
    dependents: Option<Arc<Dependents>>,
) -> anyhow::Result<Arc<Proxy>> {
    let throttle = Throttle::new(
        Rate { per_second: args.proxy_qps_per_run, burst: args.proxy_burst_per_run },
        Rate { per_second: args.proxy_qps, burst: args.proxy_burst },
        args.proxy_max_wait,
        Some(wired.metrics.clone()),
    );
    let (proxy, listener) =
        Proxy::bind(wired.proxy_client.clone(), args.proxy_port, dependents, throttle).await?;
    tokio::spawn(proxy.clone().serve(listener, wired.shutdown.clone()));
    Ok(proxy)
}

/// Serves the API and console on `--api-bind-address` (every replica: reads and reconcile requests
/// go through the API server; a standby has no runs in flight to show).
pub(super) async fn serve_api(
    args: &RunArgs,
    wired: &Wiring,
    controllers: &[WatchController],
    admitting: &[Watch],
    proxy: &Arc<Proxy>,
) -> anyhow::Result<()> {
    let address = &args.api_bind_address;
    let kinds: Vec<api::Kind> = controllers.iter().map(WatchController::kind).collect();
    // The entries with `validate` or `convert`, reconciling or not: a kind's CRD is one for all its
    // versions, so its plural is the reconciling entry's.
    let admitted: Vec<(Arc<Composer>, String)> = admitting
        .iter()
        .filter_map(|watch| {
            let kind = kinds.iter().find(|kind| {
                let gvk = &kind.composer.watch.gvk;
                gvk.group == watch.gvk.group && gvk.kind == watch.gvk.kind
            })?;
            let composer = Composer { watch: watch.clone(), inputs: wired.settings.inputs() };
            Some((Arc::new(composer), kind.resource.plural.clone()))
        })
        .collect();
    let validated: Vec<configuration::Kind> = admitted
        .iter()
        .filter_map(|(composer, plural)| {
            let validate = composer.watch.extensions.validate.clone()?;
            Some(configuration::Kind { gvk: composer.watch.gvk.clone(), plural: plural.clone(), validate })
        })
        .collect();
    let converted: Vec<&(Arc<Composer>, String)> =
        admitted.iter().filter(|(composer, _)| composer.watch.extensions.convert.is_some()).collect();
    let Some(listener) =
        http_server::bind(address).await.with_context(|| format!("serve the API on {address}"))?
    else {
        if !admitted.is_empty() {
            tracing::warn!(target: TARGET, "watches name validate or convert playbooks but the API server is disabled (--api-bind-address=0): no webhook is served");
        }
        return Ok(());
    };
    let tls =
        tls::server(args.api_cert_dir.as_deref(), &certificate_names(), args.webhook_client_ca.as_deref())
            .context("the API's TLS certificate")?;
    let runs = CheckRuns::new(wired.settings.door.clone(), args.runner_dir.clone(), proxy.clone());
    let validator = (!validated.is_empty()).then(|| Arc::new(Validator::new(admitted.clone(), runs.clone())));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_default();
    let endpoint = webhook_endpoint(args, port);
    for (composer, plural) in &converted {
        let gvk = &composer.watch.gvk;
        let conversion = configuration::conversion(&gvk.group, &gvk.kind, &endpoint, &tls.ca_pem);
        patch_conversion(&wired.client, &format!("{plural}.{}", gvk.group), &conversion).await;
    }
    let converter = (!converted.is_empty()).then(|| Arc::new(Converter::new(admitted, runs)));
    if !validated.is_empty() {
        let config = configuration::configuration(
            &args.webhook_configuration_name,
            &validated,
            &endpoint,
            &tls.ca_pem,
            &wired.namespaces,
        );
        apply_webhooks(&wired.client, &config, &args.webhook_configuration_name).await;
    }
    let state = api::State {
        client: wired.client.clone(),
        access: Access::new(wired.client.clone()),
        history: wired.history.clone(),
        live: wired.settings.live.clone(),
        kinds,
        runner_dir: args.runner_dir.clone(),
        validator,
        converter,
        gate: api::Gate::new(args.webhook_client_ca.is_some(), args.webhook_client_rate),
    };
    tokio::spawn(api::serve(listener, tls, Arc::new(state), wired.shutdown.clone()));
    Ok(())
}

/// Where the API server calls the webhooks: `--webhook-host` at the API's port, else the Service.
fn webhook_endpoint(args: &RunArgs, port: u16) -> configuration::Endpoint {
    match &args.webhook_host {
        Some(host) => configuration::Endpoint::Url { host: host.clone(), port },
        None => configuration::Endpoint::Service {
            namespace: args
                .webhook_service_namespace
                .clone()
                .or_else(crate::leader::in_cluster_namespace)
                .unwrap_or_else(|| "default".into()),
            name: args.webhook_service_name.clone(),
            port: args.webhook_service_port,
        },
    }
}

/// Applies the webhook configuration; without the right to (or on any error) warns and goes on:
/// the API server then never calls the webhook, and CRs are admitted unvalidated.
async fn apply_webhooks(client: &kube::Client, config: &serde_json::Value, name: &str) {
    match configuration::apply(client, config).await {
        Ok(()) => tracing::info!(target: TARGET, name, "applied the ValidatingWebhookConfiguration"),
        Err(error) => tracing::warn!(
            target: TARGET,
            name,
            error = %crate::logging::error_chain(&error),
            "could not apply the ValidatingWebhookConfiguration (the operator needs get and patch on it, and create unless it exists: `ansible-operator rbac` renders both): validate playbooks are not called"
        ),
    }
}

/// Sets the conversion webhook of the CRD `name`; without the right to (or on any error) warns and
/// goes on: the API server then converts by changing `apiVersion` alone, as it did before.
async fn patch_conversion(client: &kube::Client, name: &str, conversion: &serde_json::Value) {
    match configuration::patch_conversion(client, name, conversion).await {
        Ok(()) => tracing::info!(target: TARGET, crd = name, "set the CRD's conversion webhook"),
        Err(error) => tracing::warn!(
            target: TARGET,
            crd = name,
            error = %crate::logging::error_chain(&error),
            "could not set the CRD's conversion webhook (the operator needs get and patch on it: `ansible-operator rbac` renders both): convert playbooks are not called"
        ),
    }
}

/// The names a self-signed certificate is made for: localhost and the pod's (or host's) name.
fn certificate_names() -> Vec<String> {
    let hostname = std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty());
    ["localhost".to_string(), "127.0.0.1".to_string()].into_iter().chain(hostname).collect()
}

/// Keeps at most `keep` run artifacts across all CRs.
pub(super) async fn prune_artifacts(root: PathBuf, keep: usize) {
    let mut interval = tokio::time::interval(PRUNE_INTERVAL);
    loop {
        interval.tick().await;
        let root = root.clone();
        match tokio::task::spawn_blocking(move || runner::artifacts::prune(&root, keep)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(removed)) => tracing::info!(target: TARGET, removed, keep, "pruned old run artifacts"),
            Ok(Err(error)) => tracing::warn!(target: TARGET, %error, "could not prune run artifacts"),
            Err(error) => tracing::warn!(target: TARGET, %error, "artifact pruning panicked"),
        }
    }
}
