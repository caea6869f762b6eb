//! Log output: `tracing` subscriber set up from controller-runtime's zap flags.

mod flags;
mod zap_json;

pub use flags::{LogArgs, LogEncoder};
pub use zap_json::ZapJsonLayer;

use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global subscriber. Zap-style JSON lines at info level by default; `--zap-devel`
/// switches to console output at debug level, as controller-runtime does. `RUST_LOG` overrides the
/// level (and kube's own watcher warnings, which are otherwise left to `watch_errors`).
pub fn init(args: &LogArgs) {
    init_with(args, std::io::stderr);
}

/// [`init`], writing to `writer` instead of stderr (`ansible-operator test` logs to a file).
pub fn init_with<W>(args: &LogArgs, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let level = match args.zap_log_level.as_deref() {
        Some(level) => zap_level(level),
        None if args.zap_devel => "debug",
        None => "info",
    };
    // kube's watcher warns at every retry of a forbidden watch; `watch_errors` reports each streak once.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{level},kube_runtime::watcher=error")));
    let encoder =
        args.zap_encoder.unwrap_or(if args.zap_devel { LogEncoder::Console } else { LogEncoder::Json });
    // Traces (opt-in) carry only this crate's spans and events, whatever the log level lets through.
    let (traces, traces_error) = match crate::telemetry::wanted().then(crate::telemetry::layer) {
        Some(Ok(layer)) => {
            (Some(layer.with_filter(Targets::new().with_target("ansible_operator", Level::TRACE))), None)
        }
        Some(Err(error)) => (None, Some(error)),
        None => (None, None),
    };
    let registry = tracing_subscriber::registry().with(traces).with(filter);
    // Fails only when a subscriber is already installed (tests, embedding); that one keeps working.
    let _ = match encoder {
        LogEncoder::Json => registry.with(ZapJsonLayer::new(writer)).try_init(),
        LogEncoder::Console => registry.with(tracing_subscriber::fmt::layer().with_writer(writer)).try_init(),
    };
    if let Some(error) = traces_error {
        tracing::warn!(%error, "traces are off");
    } else if crate::telemetry::enabled() {
        tracing::info!("sending traces over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT)");
    }
}

/// Maps a zap level (`debug`, `info`, `error`, or a verbosity integer) to a tracing level.
fn zap_level(level: &str) -> &'static str {
    match level.to_ascii_lowercase().as_str() {
        "debug" => "debug",
        "warn" => "warn",
        "error" | "dpanic" | "panic" | "fatal" => "error",
        "info" | "0" => "info",
        number if number.parse::<u8>().is_ok_and(|v| v >= 2) => "trace",
        number if number.parse::<u8>().is_ok() => "debug",
        _ => "info",
    }
}

/// An error and its sources on one line (`a: b: c`), each source once.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::zap_level;

    #[test]
    fn zap_levels_map_to_tracing_levels() {
        assert_eq!(zap_level("info"), "info");
        assert_eq!(zap_level("Debug"), "debug");
        assert_eq!(zap_level("1"), "debug");
        assert_eq!(zap_level("5"), "trace");
        assert_eq!(zap_level("error"), "error");
    }
}
