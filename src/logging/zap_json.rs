//! Zap production-style JSON lines: `level`, `ts`, `logger`, `msg`, then span and event fields.

use std::error::Error as StdError;
use std::fmt;
use std::io::Write;

use jiff::Timestamp;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber, span};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Our own targets start with this; zap logger names don't carry it.
const CRATE_PREFIX: &str = concat!(env!("CARGO_CRATE_NAME"), "::");

/// Keys every line starts with; span and event fields of the same name are dropped so that the
/// line never holds a key twice and these stay reliable for log processors.
const HEADER_KEYS: [&str; 4] = ["level", "ts", "logger", "msg"];

/// A `Layer` writing one JSON object per event, shaped like controller-runtime's zap production
/// logs, with a single write per line so that concurrent lines never interleave.
pub struct ZapJsonLayer<W> {
    make_writer: W,
    clock: fn() -> Timestamp,
}

impl<W> ZapJsonLayer<W>
where
    W: for<'w> MakeWriter<'w> + 'static,
{
    /// A layer writing to `make_writer` (e.g. `std::io::stderr`).
    pub fn new(make_writer: W) -> Self {
        Self { make_writer, clock: Timestamp::now }
    }

    /// Replaces the clock that stamps `ts`, so that tests see fixed lines.
    #[cfg(test)]
    fn with_clock(self, clock: fn() -> Timestamp) -> Self {
        Self { clock, ..self }
    }
}

impl<S, W> Layer<S> for ZapJsonLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(fields);
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<Fields>() {
            Some(fields) => values.record(fields),
            None => {
                let mut fields = Fields::default();
                values.record(&mut fields);
                extensions.insert(fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<Fields>() {
                    fields.merge(span_fields.0.iter().cloned());
                }
            }
        }
        let mut own = Fields::default();
        event.record(&mut own);
        let msg = match own.remove("message") {
            Some(Value::String(message)) => message,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        // Events bridged from the `log` crate carry their real target as a field.
        let logger = match own.remove("log.target") {
            Some(Value::String(target)) => {
                own.0.retain(|(name, _)| !name.starts_with("log."));
                logger_name(&target)
            }
            _ => logger_name(event.metadata().target()),
        };
        fields.merge(own.0);

        let header = [
            Value::from(level_name(*event.metadata().level())),
            Value::from(format_ts((self.clock)())),
            Value::from(logger),
            Value::from(msg),
        ];
        let Ok(line) = render(&header, &fields) else { return };
        // A failed write to stderr has nowhere better to be reported.
        let _ = self.make_writer.make_writer_for(event.metadata()).write_all(&line);
    }
}

/// Field values in the order their names were first recorded; a later value for the same name
/// replaces the earlier one in place, so that inner spans and events override outer spans.
#[derive(Debug, Default)]
struct Fields(Vec<(&'static str, Value)>);

impl Fields {
    fn insert(&mut self, name: &'static str, value: Value) {
        match self.0.iter_mut().find(|(existing, _)| *existing == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }

    fn merge(&mut self, other: impl IntoIterator<Item = (&'static str, Value)>) {
        for (name, value) in other {
            self.insert(name, value);
        }
    }

    fn remove(&mut self, name: &str) -> Option<Value> {
        let index = self.0.iter().position(|(existing, _)| *existing == name)?;
        Some(self.0.remove(index).1)
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.insert(field.name(), Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.insert(field.name(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.insert(field.name(), Value::from(value));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let value = i64::try_from(value).map_or_else(|_| Value::from(value.to_string()), Value::from);
        self.insert(field.name(), value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let value = u64::try_from(value).map_or_else(|_| Value::from(value.to_string()), Value::from);
        self.insert(field.name(), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.insert(field.name(), Value::from(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.insert(field.name(), Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn StdError + 'static)) {
        self.insert(field.name(), Value::from(super::error_chain(value)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.insert(field.name(), Value::from(format!("{value:?}")));
    }
}

/// Zap's level names; zap has no trace level, so trace lines read as debug.
fn level_name(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG | Level::TRACE => "debug",
    }
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-11-21T05:20:01.123Z`.
fn format_ts(ts: Timestamp) -> String {
    format!("{ts:.3}")
}

/// A zap logger name from a tracing target: our crate prefix dropped, `::` written as `.`.
fn logger_name(target: &str) -> String {
    target.strip_prefix(CRATE_PREFIX).unwrap_or(target).replace("::", ".")
}

/// One JSON object and a newline: the header values under `HEADER_KEYS`, then the fields.
fn render(header: &[Value; 4], fields: &Fields) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = Vec::with_capacity(256);
    let mut serializer = serde_json::Serializer::new(&mut line);
    let mut map = serializer.serialize_map(None)?;
    for (key, value) in HEADER_KEYS.iter().zip(header) {
        map.serialize_entry(key, value)?;
    }
    for (name, value) in fields.0.iter().filter(|(name, _)| !HEADER_KEYS.contains(name)) {
        map.serialize_entry(name, value)?;
    }
    map.end()?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// A `MakeWriter` collecting every write in one shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    fn fixed_clock() -> Timestamp {
        "2026-11-21T05:20:01.123456789Z".parse().expect("valid timestamp")
    }

    /// Runs `emit` under a subscriber with only the zap JSON layer and returns the lines written.
    fn lines_of(emit: impl FnOnce()) -> Vec<String> {
        let captured = Captured::default();
        let layer = ZapJsonLayer::new(captured.clone()).with_clock(fixed_clock);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), emit);
        let bytes = captured.0.lock().expect("not poisoned").clone();
        let text = String::from_utf8(bytes).expect("utf-8 output");
        assert!(text.ends_with('\n'), "every line ends with a newline: {text:?}");
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn info_event_in_a_span_writes_header_then_span_fields_then_event_fields() {
        let lines = lines_of(|| {
            let span = tracing::info_span!("reconcile", namespace = "default", name = "demo", job = 42);
            let _entered = span.enter();
            tracing::info!(target: "ansible_operator::reconcile", attempt = 1, cached = true, "running");
        });
        assert_eq!(
            lines,
            [concat!(
                r#"{"level":"info","ts":"2026-11-21T05:20:01.123Z","logger":"reconcile","msg":"running","#,
                r#""namespace":"default","name":"demo","job":42,"attempt":1,"cached":true}"#
            )]
        );
    }

    #[test]
    fn inner_span_and_event_fields_overwrite_outer_ones_in_place() {
        let lines = lines_of(|| {
            let outer =
                tracing::info_span!("outer", name = "outer", gvk = "v1/Pod", job = tracing::field::Empty);
            let _outer = outer.enter();
            let inner = tracing::info_span!("inner", name = "inner", extra = 1.5);
            let _inner = inner.enter();
            outer.record("job", 7);
            tracing::info!(target: "ansible_operator::runner", extra = "event", "step");
        });
        assert_eq!(
            lines,
            [concat!(
                r#"{"level":"info","ts":"2026-11-21T05:20:01.123Z","logger":"runner","msg":"step","#,
                r#""name":"inner","gvk":"v1/Pod","job":7,"extra":"event"}"#
            )]
        );
    }

    #[test]
    fn display_and_debug_fields_become_strings() {
        let lines = lines_of(|| {
            let gvk = "apps/v1, Kind=Deployment";
            let path = std::path::Path::new("/opt/ansible");
            tracing::warn!(target: "ansible_operator::watches", gvk = %gvk, path = ?path, "");
        });
        assert_eq!(
            lines,
            [concat!(
                r#"{"level":"warn","ts":"2026-11-21T05:20:01.123Z","logger":"watches","msg":"","#,
                r#""gvk":"apps/v1, Kind=Deployment","path":"\"/opt/ansible\""}"#
            )]
        );
    }

    #[test]
    fn error_event_has_error_level_and_error_chain() {
        #[derive(Debug, thiserror::Error)]
        #[error("running ansible-runner")]
        struct Outer(#[source] io::Error);

        let lines = lines_of(|| {
            let error = Outer(io::Error::other("no such file"));
            tracing::error!(
                target: "ansible_operator::reconcile",
                error = &error as &(dyn StdError + 'static),
                "reconcile failed"
            );
        });
        assert_eq!(
            lines,
            [concat!(
                r#"{"level":"error","ts":"2026-11-21T05:20:01.123Z","logger":"reconcile","#,
                r#""msg":"reconcile failed","error":"running ansible-runner: no such file"}"#
            )]
        );
    }

    #[test]
    fn logger_drops_our_crate_prefix_and_dots_module_paths() {
        let lines = lines_of(|| {
            tracing::info!(target: "ansible_operator::proxy::dependents", "a");
            tracing::info!(target: "kube_runtime::controller", "b");
            tracing::debug!(target: "reconciler", "c");
            tracing::trace!("d");
        });
        let loggers: Vec<(String, String)> = lines
            .iter()
            .map(|line| {
                let value: Value = serde_json::from_str(line).expect("a JSON line");
                (value["level"].as_str().unwrap_or_default().to_owned(), value["logger"].to_string())
            })
            .collect();
        assert_eq!(
            loggers,
            [
                ("info".to_owned(), r#""proxy.dependents""#.to_owned()),
                ("info".to_owned(), r#""kube_runtime.controller""#.to_owned()),
                ("debug".to_owned(), r#""reconciler""#.to_owned()),
                ("debug".to_owned(), r#""logging.zap_json.tests""#.to_owned()),
            ]
        );
    }

    #[test]
    fn fields_named_like_header_keys_do_not_duplicate_them() {
        let lines = lines_of(|| {
            let span = tracing::info_span!("s", level = "span", logger = "span");
            let _entered = span.enter();
            tracing::info!(target: "ansible_operator::cmd", ts = 1, "hello");
        });
        assert_eq!(
            lines,
            [r#"{"level":"info","ts":"2026-11-21T05:20:01.123Z","logger":"cmd","msg":"hello"}"#]
        );
    }

    #[test]
    fn timestamps_keep_milliseconds_even_when_zero() {
        let ts: Timestamp = "2026-11-21T05:20:01Z".parse().expect("valid timestamp");
        assert_eq!(format_ts(ts), "2026-11-21T05:20:01.000Z");
    }
}
