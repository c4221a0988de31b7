//! Alarms raised by fuzzed requests are cleared again after a few requests. A raised NOSPACE alarm refuses
//! writes for as long as it stays, and etcd 3.5.1 stops checking permissions on writes while an alarm is
//! raised (it swaps its permission-checking applier for the capped one): left alone, one Alarm request
//! would make the two stores part for reasons that have nothing to do with ours.

use prost_reflect::Value;

use super::request::{Caller, Request};

/// How many requests run under a raised alarm before it is cleared.
pub const HOLD: u64 = 10;

/// `AlarmRequest.action`: ACTIVATE, DEACTIVATE.
const ACTIVATE: i32 = 1;
const DEACTIVATE: i32 = 2;
/// `AlarmType`: NOSPACE, CORRUPT.
const RAISED: [i32; 2] = [1, 2];

/// For an Alarm request that raises an alarm, the request that clears it (same member id and alarm
/// type), sent with root's token so that it passes with auth on.
pub fn clearing(request: &Request) -> Option<Request> {
    if request.method.name != "Alarm" {
        return None;
    }
    let number = |name: &str| request.message.get_field_by_name(name).and_then(|v| v.as_enum_number()).unwrap_or(0);
    if number("action") != ACTIVATE || !RAISED.contains(&number("alarm")) {
        return None;
    }
    let mut message = request.message.clone();
    message.set_field_by_name("action", Value::EnumNumber(DEACTIVATE));
    Some(Request { method: request.method.clone(), message, caller: Caller::User(0), invalid_utf8_field: None })
}

#[cfg(test)]
mod tests {
    use prost_reflect::DynamicMessage;

    use super::super::catalog::Catalog;
    use super::*;

    #[test]
    fn a_raised_alarm_gets_its_clearing_request_and_nothing_else_does() {
        let catalog = Catalog::load().expect("descriptors");
        let method = catalog.method("etcdserverpb.Maintenance", "Alarm").expect("Alarm");
        let alarm = |action: i32, alarm: i32| {
            let mut message = DynamicMessage::new(method.input.clone());
            message.set_field_by_name("action", Value::EnumNumber(action));
            message.set_field_by_name("alarm", Value::EnumNumber(alarm));
            message.set_field_by_name("memberID", Value::U64(7));
            Request { method: method.clone(), message, caller: Caller::Garbage, invalid_utf8_field: None }
        };
        let clear = clearing(&alarm(ACTIVATE, 1)).expect("NOSPACE is cleared");
        assert_eq!(clear.caller, Caller::User(0));
        assert_eq!(clear.message.get_field_by_name("action").and_then(|v| v.as_enum_number()), Some(DEACTIVATE));
        assert_eq!(clear.message.get_field_by_name("memberID").and_then(|v| v.as_u64()), Some(7));
        assert!(clearing(&alarm(ACTIVATE, 0)).is_none());
        assert!(clearing(&alarm(0, 1)).is_none());
        assert!(clearing(&alarm(DEACTIVATE, 2)).is_none());
    }
}
