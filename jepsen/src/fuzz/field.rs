//! Reading the fields of a generated request ([`DynamicMessage`]): what [`super::known`] and
//! [`super::guard`] both look at. An unset or mistyped field reads as its zero value, as proto3 has it.

use prost_reflect::{DynamicMessage, Value};

pub fn enum_number(message: &DynamicMessage, name: &str) -> i32 {
    message.get_field_by_name(name).and_then(|v| v.as_enum_number()).unwrap_or(0)
}

pub fn bytes(message: &DynamicMessage, name: &str) -> Vec<u8> {
    message.get_field_by_name(name).and_then(|v| v.as_bytes().map(|b| b.to_vec())).unwrap_or_default()
}

/// The length in bytes of a string (or bytes) field.
pub fn text_len(message: &DynamicMessage, name: &str) -> usize {
    match message.get_field_by_name(name) {
        Some(value) => value.as_str().map(str::len).or_else(|| value.as_bytes().map(|b| b.len())).unwrap_or(0),
        None => 0,
    }
}

pub fn int64(message: &DynamicMessage, name: &str) -> i64 {
    message.get_field_by_name(name).and_then(|v| v.as_i64()).unwrap_or(0)
}

pub fn boolean(message: &DynamicMessage, name: &str) -> bool {
    message.get_field_by_name(name).and_then(|v| v.as_bool()).unwrap_or(false)
}

/// The message in a set message field (a oneof case); `None` when another case is set.
pub fn message<'a>(parent: &'a DynamicMessage, name: &str) -> Option<&'a DynamicMessage> {
    parent.fields().find(|(field, _)| field.name() == name).and_then(|(_, value)| value.as_message())
}

/// The messages of a repeated message field.
pub fn messages(parent: &DynamicMessage, name: &str) -> Vec<DynamicMessage> {
    let Some(value) = parent.get_field_by_name(name) else { return Vec::new() };
    value.as_list().map_or_else(Vec::new, |items| items.iter().filter_map(Value::as_message).cloned().collect())
}
