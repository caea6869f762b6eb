//! Log output: `tracing` subscriber set up from controller-runtime's zap flags.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogEncoder};

/// Installs the global subscriber. JSON lines at info level by default; `--zap-devel` switches to
/// console output at debug level, as controller-runtime does. `RUST_LOG` overrides the level.
pub fn init(args: &LogArgs) {
    let level = match args.zap_log_level.as_deref() {
        Some(level) => zap_level(level),
        None if args.zap_devel => "debug",
        None => "info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let encoder =
        args.zap_encoder.unwrap_or(if args.zap_devel { LogEncoder::Console } else { LogEncoder::Json });
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match encoder {
        LogEncoder::Json => builder.json().flatten_event(true).with_span_list(false).try_init(),
        LogEncoder::Console => builder.try_init(),
    };
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
