//! One generated request: the method, the message, who sends it, and its two JSON forms (the protobuf
//! JSON mapping for replay, and a readable one with bytes shown as text for the printed table).

use bytes::Bytes;
use prost::Message;
use prost_reflect::{DynamicMessage, Kind, ReflectMessage, SerializeOptions, Value};
use serde_json::{json, Map};

use super::catalog::Method;
use super::names::USERS;

/// Strings and bytes longer than this are summarized in the JSON forms (the 1.5 MiB values).
const LONG: usize = 4096;

/// Whose token goes with the request (the `token` metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// No token.
    Nobody,
    /// The token of [`USERS`]`[i]` on the server the request goes to.
    User(usize),
    /// A token no server issued.
    Garbage,
}

impl Caller {
    pub fn describe(self) -> String {
        match self {
            Caller::Nobody => "no token".to_string(),
            Caller::User(user) => USERS.get(user).map_or_else(|| format!("user #{user}"), |u| format!("token of {u}")),
            Caller::Garbage => "garbage token".to_string(),
        }
    }
}

/// A request as sent to both servers.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub message: DynamicMessage,
    pub caller: Caller,
    /// A top-level string field whose value is overridden on the wire by the single byte `\xff` (not
    /// UTF-8, which proto3 requires of strings): a [`DynamicMessage`] only holds valid strings, but a
    /// later occurrence of a field replaces an earlier one, so the override is appended after encoding.
    pub invalid_utf8_field: Option<u32>,
}

impl Request {
    /// The bytes on the wire.
    pub fn encode(&self) -> Bytes {
        let mut buf = self.message.encode_to_vec();
        if let Some(number) = self.invalid_utf8_field {
            prost::encoding::encode_key(number, prost::encoding::WireType::LengthDelimited, &mut buf);
            prost::encoding::encode_varint(1, &mut buf);
            buf.push(0xff);
        }
        Bytes::from(buf)
    }

    /// The `watch_id` a Watch create asks for (0: any).
    pub fn requested_watch_id(&self) -> Option<i64> {
        if !self.message.has_field_by_name("create_request") {
            return None;
        }
        let create = self.message.get_field_by_name("create_request")?;
        let create = create.as_message()?;
        create.get_field_by_name("watch_id").and_then(|v| v.as_i64())
    }

    /// The protobuf JSON mapping (field names as in the `.proto`, bytes in base64, as etcd's gateway
    /// takes them), with the caller; long values are summarized.
    pub fn json(&self) -> serde_json::Value {
        let options = SerializeOptions::new().use_proto_field_name(true);
        let message = self
            .message
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_or_else(|err| json!(format!("<cannot serialize: {err}>")), shorten);
        self.wrap(message)
    }

    /// Bytes as text (`\xff` escapes), enums by name: what the printed table shows.
    pub fn readable(&self) -> serde_json::Value {
        self.wrap(readable_message(&self.message))
    }

    fn wrap(&self, message: serde_json::Value) -> serde_json::Value {
        let mut out = Map::new();
        out.insert("method".into(), json!(self.method.label()));
        out.insert("caller".into(), json!(self.caller.describe()));
        out.insert("request".into(), message);
        if let Some(number) = self.invalid_utf8_field {
            let name =
                self.message.descriptor().get_field(number).map_or_else(|| number.to_string(), |f| f.name().into());
            out.insert("invalid_utf8_field".into(), json!(name));
        }
        serde_json::Value::Object(out)
    }
}

/// Replaces every string longer than [`LONG`] (only the 1.5 MiB values, in base64) by its length.
fn shorten(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::String(s) if s.len() > LONG => json!(format!("<{} base64 chars>", s.len())),
        serde_json::Value::Array(items) => serde_json::Value::Array(items.into_iter().map(shorten).collect()),
        serde_json::Value::Object(map) => {
            serde_json::Value::Object(map.into_iter().map(|(k, v)| (k, shorten(v))).collect())
        }
        other => other,
    }
}

/// The fields that are set, by their `.proto` names.
pub fn readable_message(message: &DynamicMessage) -> serde_json::Value {
    let mut out = Map::new();
    for (field, value) in message.fields() {
        out.insert(field.name().to_string(), readable_value(&field.kind(), value));
    }
    serde_json::Value::Object(out)
}

fn readable_value(kind: &Kind, value: &Value) -> serde_json::Value {
    match value {
        Value::Bool(b) => json!(b),
        Value::I32(n) => json!(n),
        Value::I64(n) => json!(n),
        Value::U32(n) => json!(n),
        Value::U64(n) => json!(n),
        Value::F32(n) => json!(n),
        Value::F64(n) => json!(n),
        Value::String(s) => json!(escape(s.as_bytes())),
        Value::Bytes(b) => json!(escape(b)),
        Value::EnumNumber(n) => match kind {
            Kind::Enum(e) => e.get_value(*n).map_or_else(|| json!(n), |v| json!(v.name())),
            _ => json!(n),
        },
        Value::Message(m) => readable_message(m),
        Value::List(items) => serde_json::Value::Array(items.iter().map(|v| readable_value(kind, v)).collect()),
        Value::Map(_) => json!("<map>"),
    }
}

/// Printable ASCII as is, anything else as `\xNN`; long values by their length and first byte.
pub fn escape(bytes: &[u8]) -> String {
    if bytes.len() > LONG {
        let first = bytes.first().map_or_else(String::new, |b| escape(&[*b]));
        return format!("<{} bytes of '{first}'>", bytes.len());
    }
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if (0x20..0x7f).contains(&b) && b != b'\\' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::catalog::Catalog;
    use super::*;

    fn range(catalog: &Catalog) -> Request {
        let method = catalog.method("etcdserverpb.KV", "Range").expect("Range");
        let mut message = DynamicMessage::new(method.input.clone());
        message.set_field_by_name("key", Value::Bytes(Bytes::from_static(b"k1\xff")));
        message.set_field_by_name("sort_order", Value::EnumNumber(1));
        message.set_field_by_name("sort_target", Value::EnumNumber(7));
        Request { method, message, caller: Caller::User(1), invalid_utf8_field: None }
    }

    #[test]
    fn readable_json_shows_bytes_as_text_and_enums_by_name() {
        let catalog = Catalog::load().expect("descriptors");
        let readable = range(&catalog).readable();
        assert_eq!(readable["method"], "KV/Range");
        assert_eq!(readable["caller"], "token of u0");
        assert_eq!(readable["request"]["key"], "k1\\xff");
        assert_eq!(readable["request"]["sort_order"], "ASCEND");
        assert_eq!(readable["request"]["sort_target"], 7);
        assert_eq!(escape(&vec![b'x'; LONG + 1]), format!("<{} bytes of 'x'>", LONG + 1));
    }

    #[test]
    fn the_protobuf_json_is_base64_and_the_utf8_override_lands_on_the_wire() {
        let catalog = Catalog::load().expect("descriptors");
        assert_eq!(range(&catalog).json()["request"]["key"], "azH/");
        let method = catalog.method("etcdserverpb.Auth", "UserGet").expect("UserGet");
        let mut message = DynamicMessage::new(method.input.clone());
        message.set_field_by_name("name", Value::String("u0".into()));
        let request = Request { method, message, caller: Caller::Nobody, invalid_utf8_field: Some(1) };
        // name = "u0", then name = "\xff": the last one wins on decode.
        assert_eq!(request.encode().as_ref(), b"\x0a\x02u0\x0a\x01\xff");
        assert_eq!(request.json()["invalid_utf8_field"], "name");
        assert_eq!(request.requested_watch_id(), None);
    }

    #[test]
    fn a_watch_create_tells_the_id_it_asks_for() {
        let catalog = Catalog::load().expect("descriptors");
        let method = catalog.method("etcdserverpb.Watch", "Watch").expect("Watch");
        let create_desc = catalog.pool.get_message_by_name("etcdserverpb.WatchCreateRequest").expect("create");
        let mut create = DynamicMessage::new(create_desc);
        create.set_field_by_name("watch_id", Value::I64(7));
        let mut message = DynamicMessage::new(method.input.clone());
        message.set_field_by_name("create_request", Value::Message(create));
        let request = Request { method: method.clone(), message, caller: Caller::Nobody, invalid_utf8_field: None };
        assert_eq!(request.requested_watch_id(), Some(7));
        let progress = Request { method: method.clone(), message: DynamicMessage::new(method.input), ..request };
        assert_eq!(progress.requested_watch_id(), None);
    }
}
