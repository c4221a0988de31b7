//! Log lines as etcd's zap logger writes them (`--log-format json`, the default with `--logger zap`):
//! one JSON object a line with `level` (lower case), `ts` (RFC 3339, UTC), `caller`, `msg`, then the
//! event's fields, so tools that read etcd's JSON logs (`jq 'select(.msg == "ready to serve client
//! requests")'`) read ours.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter.
pub struct ZapJson;

/// Collects an event's message and fields.
#[derive(Default)]
struct Fields {
    msg: String,
    rest: Map<String, Value>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.msg = match value {
                Value::String(text) => text,
                other => other.to_string(),
            };
        } else {
            // zap's keys use dashes (`local-member-id`).
            self.rest.insert(field.name().replace('_', "-"), value);
        }
    }
}

impl<S, N> FormatEvent<S, N> for ZapJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        let caller = match (meta.file(), meta.line()) {
            (Some(file), Some(number)) => format!("{file}:{number}"),
            _ => meta.target().to_string(),
        };
        // zap's order: level, ts, caller, msg, then the fields (serde_json's map would sort them all).
        let quoted = |text: &str| Value::from(text).to_string();
        let mut line = format!(
            "{{\"level\":{},\"ts\":{},\"caller\":{},\"msg\":{}",
            quoted(&meta.level().as_str().to_ascii_lowercase()),
            quoted(&crate::date::rfc3339(std::time::SystemTime::now())),
            quoted(&caller),
            quoted(&fields.msg)
        );
        for (key, value) in fields.rest {
            line.push_str(&format!(",{}:{value}", quoted(&key)));
        }
        writeln!(writer, "{line}}}")
    }
}
