//! Random requests from the protobuf descriptors, seeded: the same seed gives the same sequence. A method
//! is picked by weight, then its message is filled field by field from [`super::value`]: scalars with
//! edge values, repeated fields with 0 to 3 elements, oneofs with one case or none, nested messages down to
//! [`MAX_DEPTH`].

use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, ReflectMessage, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::catalog::{Catalog, Method};
use super::names::USERS;
use super::request::{Caller, Request};
use super::value::{self, Hint};

/// How deep messages nest below the request. A message that is only a oneof (`RequestOp`, `WatchRequest`)
/// wraps another and does not count, so a Txn can hold a Txn that holds a Txn that holds a Range.
pub const MAX_DEPTH: u32 = 3;
/// Methods that change no state (a LeaseKeepAlive renews a lease that lasts 600 s or more anyway).
const READ_ONLY: [&str; 14] = [
    "Range",
    "Watch",
    "LeaseKeepAlive",
    "LeaseTimeToLive",
    "LeaseLeases",
    "MemberList",
    "Status",
    "Hash",
    "HashKV",
    "AuthStatus",
    "UserGet",
    "UserList",
    "RoleGet",
    "RoleList",
];
/// How often a oneof is left empty.
const ONEOF_NONE_RATE: f64 = 0.1;
/// How often a request carries a raw `\xff` in one of its top-level string fields.
const INVALID_UTF8_RATE: f64 = 0.02;

/// The seeded source of requests of one session.
pub struct Generator {
    rng: StdRng,
    methods: Vec<Method>,
    total_weight: u32,
    auth: bool,
}

impl Generator {
    /// `auth` says whether the servers run with auth on (then most requests carry a user's token).
    pub fn new(catalog: &Catalog, seed: u64, auth: bool) -> Generator {
        let methods = catalog.methods.clone();
        let total_weight = methods.iter().map(|m| m.weight).sum();
        Generator { rng: StdRng::seed_from_u64(seed), methods, total_weight, auth }
    }

    /// The generator's random source, for the auth setup's random permissions.
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    pub fn next_request(&mut self) -> Request {
        let method = self.pick_method();
        let message = self.message(&method.input, 0);
        let invalid_utf8_field = self.invalid_utf8_field(&message);
        let caller = self.caller(&method);
        Request { method, message, caller, invalid_utf8_field }
    }

    fn pick_method(&mut self) -> Method {
        let mut ticket = self.rng.gen_range(0..self.total_weight.max(1));
        for method in &self.methods {
            if ticket < method.weight {
                return method.clone();
            }
            ticket -= method.weight;
        }
        // Unreachable with a non-empty catalog; the last method is as good as any.
        self.methods.last().cloned().unwrap_or_else(|| panic!("the fuzz catalog has no methods"))
    }

    /// With auth on: mostly one of the users, sometimes no token or a garbage one. With auth off: no token,
    /// or now and then a garbage one on a request that changes nothing. etcd 3.5.1 checks a token it is
    /// given even with auth off; a write it refuses for that would be applied by a server that ignores
    /// the token, and the two stores would part for good over one known difference.
    fn caller(&mut self, method: &Method) -> Caller {
        let roll = self.rng.gen_range(0..100);
        match (self.auth, roll) {
            (true, 0..10) => Caller::Nobody,
            (true, 10..20) => Caller::Garbage,
            (true, _) => Caller::User(self.rng.gen_range(0..USERS.len())),
            (false, 0..10) if READ_ONLY.contains(&method.name.as_str()) => Caller::Garbage,
            (false, _) => Caller::Nobody,
        }
    }

    /// A message of this type, `depth` levels below the request.
    pub fn message(&mut self, descriptor: &MessageDescriptor, depth: u32) -> DynamicMessage {
        let mut message = DynamicMessage::new(descriptor.clone());
        for oneof in descriptor.oneofs().filter(|o| !o.is_synthetic()) {
            let cases: Vec<FieldDescriptor> = oneof.fields().collect();
            if cases.is_empty() || self.rng.gen_bool(ONEOF_NONE_RATE) {
                continue;
            }
            let case = &cases[self.rng.gen_range(0..cases.len())];
            self.fill(&mut message, case, depth);
        }
        for field in descriptor.fields().filter(|f| f.containing_oneof().is_none()) {
            let hint = Hint::of(descriptor.name(), field.name());
            if self.rng.gen_bool(hint.presence()) {
                self.fill(&mut message, &field, depth);
            }
        }
        message
    }

    fn fill(&mut self, message: &mut DynamicMessage, field: &FieldDescriptor, depth: u32) {
        let hint = Hint::of(message.descriptor().name(), field.name());
        let value = if field.is_list() {
            let len = self.rng.gen_range(0..=3);
            let items: Vec<Value> = (0..len).filter_map(|_| self.element(field, hint, depth)).collect();
            Some(Value::List(items))
        } else {
            self.element(field, hint, depth)
        };
        if let Some(value) = value {
            // The value is built for the field's kind, so this cannot fail; a mismatch leaves it unset.
            let _ = message.try_set_field(field, value);
        }
    }

    /// One value of the field's kind; `None` for a message that would nest too deep.
    fn element(&mut self, field: &FieldDescriptor, hint: Hint, depth: u32) -> Option<Value> {
        let rng = &mut self.rng;
        Some(match field.kind() {
            Kind::Message(nested) => {
                let depth = if is_wrapper(&nested) { depth } else { depth + 1 };
                if depth > MAX_DEPTH {
                    return None;
                }
                Value::Message(self.message(&nested, depth))
            }
            Kind::Enum(descriptor) => Value::EnumNumber(value::enum_number(rng, &descriptor, hint)),
            Kind::Bytes => Value::Bytes(value::hinted_bytes(rng, hint)),
            Kind::String => Value::String(value::hinted_string(rng, hint)),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(value::hinted_int64(rng, hint)),
            Kind::Uint64 | Kind::Fixed64 => Value::U64(value::hinted_uint64(rng, hint)),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(value::int32(rng)),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(value::uint32(rng)),
            Kind::Bool => Value::Bool(rng.gen_bool(0.5)),
            Kind::Float => Value::F32(rng.gen_range(-1.0..1.0)),
            Kind::Double => Value::F64(rng.gen_range(-1.0..1.0)),
        })
    }

    /// Now and then one of the message's top-level string fields, to carry a raw `\xff`.
    fn invalid_utf8_field(&mut self, message: &DynamicMessage) -> Option<u32> {
        let strings: Vec<u32> = message
            .descriptor()
            .fields()
            .filter(|f| matches!(f.kind(), Kind::String) && !f.is_list())
            .map(|f| f.number())
            .collect();
        if strings.is_empty() || !self.rng.gen_bool(INVALID_UTF8_RATE) {
            return None;
        }
        Some(strings[self.rng.gen_range(0..strings.len())])
    }
}

/// A message whose fields are all cases of one oneof.
fn is_wrapper(descriptor: &MessageDescriptor) -> bool {
    let mut oneofs = descriptor.fields().map(|f| f.containing_oneof().map(|o| o.name().to_string()));
    match oneofs.next() {
        Some(Some(first)) => oneofs.all(|o| o.as_deref() == Some(first.as_str())),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::known;
    use super::super::value::{BIG_LEN, OUT_OF_RANGE_RATE};
    use super::*;

    fn requests(seed: u64, auth: bool, count: usize) -> Vec<Request> {
        let catalog = Catalog::load().expect("descriptors");
        let mut generator = Generator::new(&catalog, seed, auth);
        (0..count).map(|_| generator.next_request()).collect()
    }

    #[test]
    fn the_same_seed_gives_the_same_requests_and_another_seed_others() {
        let encode = |rs: &[Request]| rs.iter().map(|r| (r.method.path(), r.encode(), r.caller)).collect::<Vec<_>>();
        let first = encode(&requests(5, true, 300));
        assert_eq!(first, encode(&requests(5, true, 300)));
        assert_ne!(first, encode(&requests(6, true, 300)));
    }

    #[test]
    fn every_method_is_called_and_callers_follow_the_auth_mode() {
        let on = requests(1, true, 3000);
        let catalog = Catalog::load().expect("descriptors");
        for method in &catalog.methods {
            assert!(on.iter().any(|r| r.method.name == method.name), "{} never called", method.name);
        }
        assert!(on.iter().filter(|r| matches!(r.caller, Caller::User(_))).count() > 2000);
        let off = requests(1, false, 1000);
        assert!(off.iter().all(|r| !matches!(r.caller, Caller::User(_))));
        assert!(off.iter().filter(|r| r.caller == Caller::Nobody).count() > 900);
        let garbage: Vec<&Request> = off.iter().filter(|r| r.caller == Caller::Garbage).collect();
        assert!(!garbage.is_empty() && garbage.iter().all(|r| READ_ONLY.contains(&r.method.name.as_str())));
    }

    #[test]
    fn big_values_and_unknown_sort_options_reach_the_requests() {
        let all = requests(3, false, 5000);
        let big = all.iter().filter(|r| r.encode().len() > BIG_LEN).count();
        // 1% of bytes values are big; most requests carry one or two that are not keys (and keys come
        // mostly from the key space), so a few requests in a thousand.
        assert!((5..200).contains(&big), "{big} of 5000 requests carry a 1.5 MiB value");
        let ranges: Vec<&Request> = all.iter().filter(|r| r.method.name == "Range").collect();
        let unknown = ranges.iter().filter(|r| known::has_unknown_sort(r)).count();
        // Two enum fields, each set half of the time and then out of range 10% of the time.
        #[allow(clippy::cast_precision_loss)]
        let share = unknown as f64 / ranges.len() as f64;
        assert!((OUT_OF_RANGE_RATE * 0.5..OUT_OF_RANGE_RATE * 1.6).contains(&share), "{share}");
        assert!(all.iter().any(|r| r.invalid_utf8_field.is_some()));
    }

    #[test]
    fn txns_nest_down_to_the_maximum_depth_and_no_further() {
        fn txn_depth(message: &DynamicMessage) -> u32 {
            let mut deepest = 0;
            for (field, value) in message.fields() {
                let items = value.as_list().map_or_else(|| vec![value.clone()], <[Value]>::to_vec);
                for item in items {
                    if let Some(nested) = item.as_message() {
                        let own = u32::from(field.name() == "request_txn");
                        deepest = deepest.max(own + txn_depth(nested));
                    }
                }
            }
            deepest
        }
        let depths: Vec<u32> =
            requests(4, false, 4000).iter().filter(|r| r.method.name == "Txn").map(|r| txn_depth(&r.message)).collect();
        assert_eq!(depths.iter().max(), Some(&MAX_DEPTH), "{depths:?}");
    }
}
