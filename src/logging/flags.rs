//! controller-runtime's zap logging flags (`--zap-*`), as `run` accepts them.

use clap::{ArgAction, Args, ValueEnum};

/// Log encoder (`--zap-encoder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogEncoder {
    /// One JSON object a line (production default).
    Json,
    /// Human-readable lines (development default).
    Console,
}

/// controller-runtime's zap logging flags, mapped onto `tracing`.
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// Development mode: console output at debug level.
    #[arg(long, env = "ANSIBLE_OPERATOR_ZAP_DEVEL", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", action = ArgAction::Set)]
    pub zap_devel: bool,

    /// Log encoding: json or console.
    #[arg(long, env = "ANSIBLE_OPERATOR_ZAP_ENCODER")]
    pub zap_encoder: Option<LogEncoder>,

    /// Log level: debug, info, error, or an integer verbosity (1 = debug).
    #[arg(long, env = "ANSIBLE_OPERATOR_ZAP_LOG_LEVEL")]
    pub zap_log_level: Option<String>,

    /// Accepted for compatibility; stack traces are not printed.
    #[arg(long, env = "ANSIBLE_OPERATOR_ZAP_STACKTRACE_LEVEL", hide = true)]
    pub zap_stacktrace_level: Option<String>,

    /// Accepted for compatibility; timestamps are RFC 3339.
    #[arg(long, env = "ANSIBLE_OPERATOR_ZAP_TIME_ENCODING", hide = true)]
    pub zap_time_encoding: Option<String>,
}
