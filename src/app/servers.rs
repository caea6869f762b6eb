//! What every replica serves, leader or not: `/metrics`, user metrics, probes, the API proxy for
//! playbooks, the HTTPS API and console; and the artifact pruner.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::wiring::Wiring;
use crate::access::Access;
use crate::cli::RunArgs;
use crate::controller::WatchController;
use crate::health;
use crate::metrics;
use crate::proxy::Proxy;
use crate::proxy::dependents::Dependents;
use crate::runner;
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
                tls: tls::server(args.metrics_cert_dir.as_deref(), &certificate_names())
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
    let (proxy, listener) = Proxy::bind(wired.proxy_client.clone(), args.proxy_port, dependents).await?;
    tokio::spawn(proxy.clone().serve(listener, wired.shutdown.clone()));
    Ok(proxy)
}

/// Serves the API and console on `--api-bind-address` (every replica: reads and reconcile requests
/// go through the API server; a standby has no runs in flight to show).
pub(super) async fn serve_api(
    args: &RunArgs,
    wired: &Wiring,
    controllers: &[WatchController],
) -> anyhow::Result<()> {
    let address = &args.api_bind_address;
    let Some(listener) =
        http_server::bind(address).await.with_context(|| format!("serve the API on {address}"))?
    else {
        return Ok(());
    };
    let tls = tls::server(args.api_cert_dir.as_deref(), &certificate_names())
        .context("the API's TLS certificate")?;
    let state = api::State {
        client: wired.client.clone(),
        access: Access::new(wired.client.clone()),
        history: wired.history.clone(),
        live: wired.settings.live.clone(),
        kinds: controllers.iter().map(WatchController::kind).collect(),
        runner_dir: args.runner_dir.clone(),
    };
    tokio::spawn(api::serve(listener, tls, Arc::new(state), wired.shutdown.clone()));
    Ok(())
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
