//! Opt-in OpenTelemetry traces over OTLP/HTTP, on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: a span per reconcile (its parent the W3C
//! `traceparent` in the CR's [`TRACEPARENT`] annotation, when it holds one), per run, per task (from
//! the run's events, with their own start and end) and per API request a run makes through the
//! proxy. Off, nothing is exported and no run, task or request span is made. Spans carry the CR's
//! identity, never its spec.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span as _, TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

use crate::job_event::JobEvent;

/// The annotation whose W3C `traceparent` a CR's reconciles continue.
pub const TRACEPARENT: &str = "ansible-operator.dev/traceparent";

/// The instrumentation scope of every span.
const SCOPE: &str = "ansible-operator";

/// The provider, when traces are on.
static PROVIDER: OnceLock<(SdkTracerProvider, SdkTracer)> = OnceLock::new();

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry traces could not be set up: {0}")]
pub struct Error(#[from] opentelemetry_otlp::ExporterBuildError);

/// Whether the environment asks for traces.
pub fn wanted() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Whether traces are on.
pub fn enabled() -> bool {
    PROVIDER.get().is_some()
}

/// The layer that turns this process's spans into OpenTelemetry spans, exported in batches to
/// the endpoint the environment names (`OTEL_SERVICE_NAME` defaults to `ansible-operator`).
pub fn layer<S>() -> Result<impl Layer<S>, Error>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SCOPE);
    }
    let provider =
        SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let tracer = provider.tracer(SCOPE);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer.clone()).with_tracked_inactivity(false);
    let _ = PROVIDER.set((provider, tracer));
    Ok(layer)
}

/// Sends what is left and stops the export (at shutdown).
pub fn shutdown() {
    if let Some((provider, _)) = PROVIDER.get()
        && let Err(error) = provider.shutdown_with_timeout(Duration::from_secs(5))
    {
        tracing::warn!(%error, "could not send the last traces");
    }
}

/// Makes `span` continue the trace of the `traceparent` in `annotations`, when traces are on and
/// it holds a valid one (anything else is ignored: the reconcile starts a trace of its own).
pub fn continue_trace(span: &tracing::Span, annotations: &std::collections::BTreeMap<String, String>) {
    if !enabled() {
        return;
    }
    let Some(parent) = annotations.get(TRACEPARENT).and_then(|value| parse_traceparent(value)) else {
        return;
    };
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
}

/// A W3C `traceparent` (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`), when valid.
fn parse_traceparent(value: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let parts: Vec<&str> = value.trim().split('-').collect();
    let [version, trace_id, span_id, flags] = parts[..] else { return None };
    let hex = |text: &str, len: usize| text.len() == len && text.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00" || !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1);
    let context = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    context.is_valid().then_some(context)
}

/// A span for one run, under the current span (the reconcile's), when traces are on.
pub fn run_span(lane: &str, ident: &str) -> tracing::Span {
    if enabled() {
        tracing::info_span!("run", otel.name = "ansible run", lane, ident)
    } else {
        tracing::Span::none()
    }
}

/// A span for one API request a run makes through the proxy, under the run's span (`parent`),
/// when traces are on.
pub fn request_span(parent: &Context, method: &str, path: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "proxy",
        otel.name = format!("{method} {path}"),
        http.request.method = method,
        url.path = path,
        http.response.status_code = tracing::field::Empty,
    );
    let _ = span.set_parent(parent.clone());
    span
}

/// Records a task's end (`runner_on_ok`, `_failed`, `_skipped`, `_unreachable`) as a span under
/// `parent` (the run's), from the event's own start and end.
pub fn task(parent: &Context, event: &JobEvent) {
    let Some((_, tracer)) = PROVIDER.get() else { return };
    let status = match event.event.as_str() {
        "runner_on_ok" => "ok",
        "runner_on_failed" => "failed",
        "runner_on_skipped" => "skipped",
        "runner_on_unreachable" => "unreachable",
        _ => return,
    };
    let time = |key: &str| event.data_str(key).and_then(parse_time);
    let (Some(start), Some(end)) = (time("start"), time("end")) else { return };
    let text = |key: &str| event.data_str(key).unwrap_or_default().to_string();
    let mut span = tracer
        .span_builder(text("task"))
        .with_start_time(start)
        .with_attributes([
            KeyValue::new("ansible.task.action", text("task_action")),
            KeyValue::new("ansible.host", text("host")),
            KeyValue::new("ansible.task.status", status),
        ])
        .start_with_context(tracer, parent);
    if status == "failed" || status == "unreachable" {
        span.set_status(opentelemetry::trace::Status::error(status));
    }
    span.end_with_timestamp(end);
}

/// An ansible-runner event time (`2026-11-29T15:04:05.123456+00:00`, or without an offset: UTC).
fn parse_time(text: &str) -> Option<SystemTime> {
    let timestamp = text.parse::<jiff::Timestamp>().ok().or_else(|| {
        text.parse::<jiff::civil::DateTime>()
            .ok()?
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()
            .map(|z| z.timestamp())
    })?;
    Some(SystemTime::from(timestamp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_read_and_anything_else_ignored() {
        let context =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").expect("valid");
        assert_eq!(context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-{{ x }}-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn runner_times_with_or_without_an_offset_are_utc() {
        let with = parse_time("2026-11-29T15:04:05.123456+00:00").expect("a time");
        let without = parse_time("2026-11-29T15:04:05.123456").expect("a time");
        assert_eq!(with, without);
        assert_eq!(parse_time("soon"), None);
    }
}
