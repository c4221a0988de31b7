//! etcd's gRPC gateway: the unary RPCs as JSON over HTTP (`POST /v3/kv/range`, `/v3/kv/put`, ...).
//!
//! As etcd's gateway, each request goes through the gRPC service itself: the JSON body becomes the
//! protobuf request (read through the message's descriptor), travels through the same tower stack as any
//! gRPC call (interceptors, counters, limits), and the answer is written back as JSON the way etcd's
//! gateway (grpc-gateway v1 with jsonpb, original field names) writes it: bytes in base64, 64-bit
//! integers as strings, enums by name, fields at their default left out. A gRPC error becomes grpc-gateway's
//! `{"error":..,"message":..,"code":..}` with its HTTP status.
//!
//! Streams (`/v3/watch`, `/v3/lease/keepalive`, `/v3/maintenance/snapshot`, `/v3/election/observe`) are
//! served as grpc-gateway v1 serves them: every JSON object in the request body is one request message
//! (the request stream ends with the body), and each response message is written as it comes, as a line
//! `{"result":{..}}`; an error ends the stream with a line `{"error":{"grpc_code":..,"http_code":..,
//! "message":..,"http_status":..}}`.

use std::sync::LazyLock;

use bytes::{BufMut, Bytes, BytesMut};
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use prost::Message;
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MethodDescriptor, SerializeOptions};
use tonic::body::Body;
use tonic::Code;

/// The gateway paths etcd 3.4 registers for unary RPCs, with the gRPC method each one calls.
const ROUTES: &[(&str, &str, &str)] = &[
    ("/v3/kv/range", "etcdserverpb.KV", "Range"),
    ("/v3/kv/put", "etcdserverpb.KV", "Put"),
    ("/v3/kv/deleterange", "etcdserverpb.KV", "DeleteRange"),
    ("/v3/kv/txn", "etcdserverpb.KV", "Txn"),
    ("/v3/kv/compaction", "etcdserverpb.KV", "Compact"),
    ("/v3/lease/grant", "etcdserverpb.Lease", "LeaseGrant"),
    ("/v3/lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("/v3/kv/lease/revoke", "etcdserverpb.Lease", "LeaseRevoke"),
    ("/v3/lease/timetolive", "etcdserverpb.Lease", "LeaseTimeToLive"),
    ("/v3/kv/lease/timetolive", "etcdserverpb.Lease", "LeaseTimeToLive"),
    ("/v3/lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("/v3/kv/lease/leases", "etcdserverpb.Lease", "LeaseLeases"),
    ("/v3/cluster/member/add", "etcdserverpb.Cluster", "MemberAdd"),
    ("/v3/cluster/member/remove", "etcdserverpb.Cluster", "MemberRemove"),
    ("/v3/cluster/member/update", "etcdserverpb.Cluster", "MemberUpdate"),
    ("/v3/cluster/member/list", "etcdserverpb.Cluster", "MemberList"),
    ("/v3/cluster/member/promote", "etcdserverpb.Cluster", "MemberPromote"),
    ("/v3/maintenance/alarm", "etcdserverpb.Maintenance", "Alarm"),
    ("/v3/maintenance/status", "etcdserverpb.Maintenance", "Status"),
    ("/v3/maintenance/defragment", "etcdserverpb.Maintenance", "Defragment"),
    ("/v3/maintenance/hash", "etcdserverpb.Maintenance", "Hash"),
    ("/v3/maintenance/hashkv", "etcdserverpb.Maintenance", "HashKV"),
    ("/v3/maintenance/transfer-leadership", "etcdserverpb.Maintenance", "MoveLeader"),
    ("/v3/maintenance/downgrade", "etcdserverpb.Maintenance", "Downgrade"),
    ("/v3/watch", "etcdserverpb.Watch", "Watch"),
    ("/v3/lease/keepalive", "etcdserverpb.Lease", "LeaseKeepAlive"),
    ("/v3/maintenance/snapshot", "etcdserverpb.Maintenance", "Snapshot"),
    ("/v3/lock/lock", "v3lockpb.Lock", "Lock"),
    ("/v3/lock/unlock", "v3lockpb.Lock", "Unlock"),
    ("/v3/election/campaign", "v3electionpb.Election", "Campaign"),
    ("/v3/election/proclaim", "v3electionpb.Election", "Proclaim"),
    ("/v3/election/leader", "v3electionpb.Election", "Leader"),
    ("/v3/election/observe", "v3electionpb.Election", "Observe"),
    ("/v3/election/resign", "v3electionpb.Election", "Resign"),
    ("/v3/auth/enable", "etcdserverpb.Auth", "AuthEnable"),
    ("/v3/auth/disable", "etcdserverpb.Auth", "AuthDisable"),
    ("/v3/auth/status", "etcdserverpb.Auth", "AuthStatus"),
    ("/v3/auth/authenticate", "etcdserverpb.Auth", "Authenticate"),
    ("/v3/auth/user/add", "etcdserverpb.Auth", "UserAdd"),
    ("/v3/auth/user/get", "etcdserverpb.Auth", "UserGet"),
    ("/v3/auth/user/list", "etcdserverpb.Auth", "UserList"),
    ("/v3/auth/user/delete", "etcdserverpb.Auth", "UserDelete"),
    ("/v3/auth/user/changepw", "etcdserverpb.Auth", "UserChangePassword"),
    ("/v3/auth/user/grant", "etcdserverpb.Auth", "UserGrantRole"),
    ("/v3/auth/user/revoke", "etcdserverpb.Auth", "UserRevokeRole"),
    ("/v3/auth/role/add", "etcdserverpb.Auth", "RoleAdd"),
    ("/v3/auth/role/get", "etcdserverpb.Auth", "RoleGet"),
    ("/v3/auth/role/list", "etcdserverpb.Auth", "RoleList"),
    ("/v3/auth/role/delete", "etcdserverpb.Auth", "RoleDelete"),
    ("/v3/auth/role/grant", "etcdserverpb.Auth", "RoleGrantPermission"),
    ("/v3/auth/role/revoke", "etcdserverpb.Auth", "RoleRevokePermission"),
];

/// The largest JSON body read (etcd's default request limit is 1.5 MiB; base64 and JSON add a third).
const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// etcd's messages, from the descriptors the `proto` crate compiled.
static POOL: LazyLock<Option<DescriptorPool>> =
    LazyLock::new(|| DescriptorPool::decode(proto::FILE_DESCRIPTOR_SET).ok());

/// The gRPC method a gateway path calls, if it is one.
pub fn route(path: &str) -> Option<MethodDescriptor> {
    let (_, service, method) = ROUTES.iter().find(|(p, _, _)| *p == path)?;
    let service = POOL.as_ref()?.get_service_by_name(service)?;
    let found = service.methods().find(|m| m.name() == *method);
    found
}

/// Answers one gateway request by calling `grpc` (the client gRPC service stack) with its protobuf form.
pub async fn call<S, B>(grpc: S, method: MethodDescriptor, request: Request<Body>) -> Response<Body>
where
    S: tower_service::Service<Request<Body>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    if request.method() != Method::POST {
        // grpc-gateway's answer to a path it knows with another method (Go's http.Error).
        let mut response = Response::new(Body::new("Method Not Allowed\n".to_string()));
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
        return response;
    }
    if method.is_server_streaming() {
        return match open_stream(grpc, &method, request).await {
            Ok(response) => response,
            Err((code, message)) => {
                let (status, line) = stream_error(code, &message);
                let mut response = json_response(status, line);
                *response.status_mut() = status;
                response
            }
        };
    }
    match exchange(grpc, &method, request).await {
        Ok(json) => {
            let mut response = json_response(StatusCode::OK, json);
            let metadata = HeaderValue::from_static("application/grpc");
            response.headers_mut().insert("grpc-metadata-content-type", metadata);
            response
        }
        Err((code, message)) => error_response(code, &message),
    }
}

type Failure = (Code, String);

/// Sends the gateway request through the gRPC stack; answers the gRPC response, its headers checked for
/// an error.
async fn send<S, B>(mut grpc: S, method: &MethodDescriptor, request: Request<Body>) -> Result<Response<B>, Failure>
where
    S: tower_service::Service<Request<Body>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    // grpc-gateway passes the `Authorization` header on as metadata, where auth looks for the token.
    let token = request.headers().get(header::AUTHORIZATION).cloned();
    // The connection's client certificate goes along: its Common Name is the user of a request without a
    // token, as on gRPC (etcd 3.5 answers 400 here instead; users of the gateway with certificates would
    // rather be served).
    let connection = request.extensions().get::<crate::tls::TlsConnectInfo>().cloned();
    let body = Limited::new(request.into_body(), MAX_BODY_BYTES).collect().await;
    let body = body.map_err(|e| (Code::InvalidArgument, e.to_string()))?.to_bytes();
    let messages = if method.is_client_streaming() {
        decode_json_stream(method, &body)?
    } else {
        vec![decode_json(method, &body)?]
    };

    let mut frames = BytesMut::new();
    for message in messages {
        frames.put_u8(0);
        frames
            .put_u32(u32::try_from(message.len()).map_err(|_| (Code::ResourceExhausted, "request too large".into()))?);
        frames.put_slice(&message);
    }
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    let mut call = Request::new(Body::new(Full::new(frames.freeze())));
    *call.method_mut() = Method::POST;
    *call.version_mut() = http::Version::HTTP_2;
    *call.uri_mut() = path.parse().map_err(|_| (Code::Internal, format!("bad gRPC path {path}")))?;
    call.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    call.headers_mut().insert(header::TE, HeaderValue::from_static("trailers"));
    if let Some(token) = token {
        call.headers_mut().insert(header::AUTHORIZATION, token);
    }
    if let Some(connection) = connection {
        call.extensions_mut().insert(connection);
    }

    std::future::poll_fn(|cx| grpc.poll_ready(cx))
        .await
        .map_err(|_| (Code::Unavailable, "service unavailable".into()))?;
    let response = grpc.call(call).await.map_err(|_| (Code::Unavailable, "service unavailable".into()))?;
    if let Some(failure) = grpc_failure(response.headers()) {
        return Err(failure);
    }
    Ok(response)
}

async fn exchange<S, B>(grpc: S, method: &MethodDescriptor, request: Request<Body>) -> Result<String, Failure>
where
    S: tower_service::Service<Request<Body>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    let response = send(grpc, method, request).await?;
    let collected = response.into_body().collect().await.map_err(|e| (Code::Unavailable, e.into().to_string()))?;
    if let Some(failure) = collected.trailers().and_then(grpc_failure) {
        return Err(failure);
    }
    let bytes = collected.to_bytes();
    let payload = bytes.get(5..).ok_or_else(|| (Code::Internal, "a gRPC answer without its message".to_string()))?;
    encode_json(method, payload)
}

/// A server stream: the response is written as the gRPC answer's messages arrive, one JSON line each.
async fn open_stream<S, B>(
    grpc: S,
    method: &MethodDescriptor,
    request: Request<Body>,
) -> Result<Response<Body>, Failure>
where
    S: tower_service::Service<Request<Body>, Response = Response<B>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    let response = send(grpc, method, request).await?;
    let state = StreamState {
        body: Box::pin(response.into_body()),
        buffer: BytesMut::new(),
        method: method.clone(),
        done: false,
    };
    let lines = futures::stream::unfold(state, |mut state| async move {
        let line = state.next_line().await?;
        Some((Ok::<_, tonic::Status>(http_body::Frame::data(Bytes::from(line))), state))
    });
    let mut response = Response::new(Body::new(http_body_util::StreamBody::new(lines)));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("grpc-metadata-content-type", HeaderValue::from_static("application/grpc"));
    Ok(response)
}

/// Reads gRPC frames off a response body and turns each into a gateway line.
struct StreamState<B> {
    body: std::pin::Pin<Box<B>>,
    buffer: BytesMut,
    method: MethodDescriptor,
    done: bool,
}

impl<B> StreamState<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<tonic::codegen::StdError>,
{
    /// The next line to write, `None` at the end of the stream.
    async fn next_line(&mut self) -> Option<String> {
        loop {
            if self.done {
                return None;
            }
            if let Some(message) = self.take_message() {
                return Some(match encode_json(&self.method, &message) {
                    Ok(json) => format!("{{\"result\":{json}}}\n"),
                    Err((code, message)) => self.fail(code, &message),
                });
            }
            match self.body.frame().await {
                None => return None,
                Some(Err(err)) => return Some(self.fail(Code::Unavailable, &err.into().to_string())),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.buffer.extend_from_slice(&data),
                    Err(frame) => {
                        if let Some((code, message)) = frame.trailers_ref().and_then(grpc_failure) {
                            return Some(self.fail(code, &message));
                        }
                    }
                },
            }
        }
    }

    /// A whole gRPC message from the buffer, if one has arrived.
    fn take_message(&mut self) -> Option<Bytes> {
        let header = self.buffer.get(..5)?;
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if self.buffer.len() < 5 + len {
            return None;
        }
        let mut frame = self.buffer.split_to(5 + len);
        Some(frame.split_off(5).freeze())
    }

    fn fail(&mut self, code: Code, message: &str) -> String {
        self.done = true;
        stream_error(code, message).1
    }
}

/// grpc-gateway v1's error line for a stream, with the HTTP status of the code.
fn stream_error(code: Code, message: &str) -> (StatusCode, String) {
    let status = http_status(code);
    let json = serde_json::json!({
        "grpc_code": code as i32,
        "http_code": status.as_u16(),
        "message": message,
        "http_status": status.canonical_reason().unwrap_or(""),
    });
    // grpc-gateway writes the fields in this order; serde_json would sort them.
    let line = format!(
        r#"{{"error":{{"grpc_code":{},"http_code":{},"message":{},"http_status":{}}}}}"#,
        json["grpc_code"], json["http_code"], json["message"], json["http_status"]
    );
    (status, line + "\n")
}

/// Every JSON object in a client stream's body, each as its protobuf encoding.
fn decode_json_stream(method: &MethodDescriptor, body: &[u8]) -> Result<Vec<Vec<u8>>, Failure> {
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let mut json = serde_json::Deserializer::from_slice(body).into_iter::<serde_json::Value>();
    let mut messages = Vec::new();
    for value in &mut json {
        let value = value.map_err(|e| (Code::InvalidArgument, e.to_string()))?;
        let message = DynamicMessage::deserialize_with_options(method.input(), value, &options)
            .map_err(|e| (Code::InvalidArgument, e.to_string()))?;
        messages.push(message.encode_to_vec());
    }
    Ok(messages)
}

/// The request's protobuf encoding. An empty body is an empty message, and unknown fields are ignored,
/// as etcd's gateway does.
fn decode_json(method: &MethodDescriptor, body: &[u8]) -> Result<Vec<u8>, Failure> {
    let body = if body.iter().all(u8::is_ascii_whitespace) { &b"{}"[..] } else { body };
    let mut json = serde_json::Deserializer::from_slice(body);
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let message = DynamicMessage::deserialize_with_options(method.input(), &mut json, &options)
        .map_err(|e| (Code::InvalidArgument, e.to_string()))?;
    Ok(message.encode_to_vec())
}

fn encode_json(method: &MethodDescriptor, payload: &[u8]) -> Result<String, Failure> {
    let message = DynamicMessage::decode(method.output(), payload).map_err(|e| (Code::Internal, e.to_string()))?;
    let options = SerializeOptions::new().use_proto_field_name(true).skip_default_fields(true);
    let mut json = serde_json::Serializer::new(Vec::new());
    message.serialize_with_options(&mut json, &options).map_err(|e| (Code::Internal, e.to_string()))?;
    String::from_utf8(json.into_inner()).map_err(|e| (Code::Internal, e.to_string()))
}

/// The status a gRPC header or trailer block carries, when it is an error.
fn grpc_failure(headers: &http::HeaderMap) -> Option<Failure> {
    let status = headers.get("grpc-status")?.to_str().ok()?.parse::<i32>().ok()?;
    if status == 0 {
        return None;
    }
    let message = headers.get("grpc-message").map(|m| percent_decode(m.as_bytes())).unwrap_or_default();
    Some((Code::from_i32(status), message))
}

/// gRPC's `grpc-message` is percent-encoded.
fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (raw[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn json_response(status: StatusCode, json: String) -> Response<Body> {
    let mut response = Response::new(Body::new(json));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// grpc-gateway v1's error body and its HTTP status for the code.
fn error_response(code: Code, message: &str) -> Response<Body> {
    let status = http_status(code);
    let body = serde_json::json!({ "error": message, "message": message, "code": code as i32 });
    // serde_json orders the keys; grpc-gateway writes error, message, code.
    let json = format!(r#"{{"error":{},"message":{},"code":{}}}"#, body["error"], body["message"], body["code"]);
    json_response(status, json)
}

/// grpc-gateway's HTTP status for a gRPC code.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::REQUEST_TIMEOUT,
        Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Any JSON (or not) a client may send, shaped after `message`'s fields so that it reaches the
    /// protobuf mapping: seeded, to depth 3.
    fn arbitrary_json(rng: &mut rand::rngs::StdRng, message: &prost_reflect::MessageDescriptor, depth: u32) -> String {
        use rand::Rng;
        let scalar = |rng: &mut rand::rngs::StdRng| -> String {
            let choices = [
                "null",
                "true",
                "0",
                "-1",
                "1.5",
                "1e400",
                "\"\"",
                "\"Zm9v\"",
                "\"not base64!\"",
                "\"-9223372036854775809\"",
                "\"18446744073709551616\"",
                "\"SORT_MOD\"",
                "\"NOPE\"",
                "[]",
                "{}",
                "\"\\u0000\"",
                "\"\\ud800\"",
            ];
            choices[rng.gen_range(0..choices.len())].to_string()
        };
        let fields: Vec<prost_reflect::FieldDescriptor> = message.fields().collect();
        let entries: Vec<String> = (0..rng.gen_range(0..5))
            .map(|_| {
                if fields.is_empty() || rng.gen_bool(0.1) {
                    return format!("\"bogus{}\": {}", rng.gen_range(0..9), scalar(rng));
                }
                let field = &fields[rng.gen_range(0..fields.len())];
                let name = if rng.gen_bool(0.5) { field.json_name().to_string() } else { field.name().to_string() };
                let value = match field.kind().as_message() {
                    Some(inner) if depth > 0 && rng.gen_bool(0.6) => {
                        let one = arbitrary_json(rng, inner, depth - 1);
                        if field.is_list() {
                            format!("[{one}, {}]", scalar(rng))
                        } else {
                            one
                        }
                    }
                    _ if field.is_list() => format!("[{}, {}]", scalar(rng), scalar(rng)),
                    _ => scalar(rng),
                };
                format!("\"{name}\": {value}")
            })
            .collect();
        format!("{{{}}}", entries.join(", "))
    }

    #[test]
    fn arbitrary_bodies_are_decoded_or_refused_in_one_line() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(41);
        let (mut refused, mut tried) = (0, 0);
        for (path, _, _) in ROUTES {
            let method = route(path).expect("a route");
            for _ in 0..150 {
                let body = match rng.gen_range(0..8) {
                    0 => (0..rng.gen_range(0..64)).map(|_| rng.gen::<u8>()).collect(),
                    1 => {
                        // Deeper than any parser should follow.
                        let depth = rng.gen_range(100..300);
                        format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
                    }
                    2 => {
                        let mut text = arbitrary_json(&mut rng, &method.input(), 3).into_bytes();
                        let cut = rng.gen_range(0..=text.len());
                        text.truncate(cut);
                        text
                    }
                    _ => arbitrary_json(&mut rng, &method.input(), 3).into_bytes(),
                };
                for result in [decode_json(&method, &body).map(|_| ()), decode_json_stream(&method, &body).map(|_| ())]
                {
                    tried += 1;
                    if let Err((code, message)) = result {
                        refused += 1;
                        assert_eq!(code, Code::InvalidArgument, "{path} {:?}", String::from_utf8_lossy(&body));
                        assert!(!message.is_empty() && !message.contains('\n'), "{path}: {message:?}");
                    }
                }
            }
        }
        assert!(refused > tried / 10 && refused < tried * 9 / 10, "{refused} of {tried} refused");
    }

    #[test]
    fn every_route_names_a_method_of_etcds_api() {
        for (path, _, method) in ROUTES {
            let found = route(path).map(|m| m.name().to_string());
            assert_eq!(found.as_deref(), Some(*method), "{path}");
        }
        assert!(route("/v3/watch").is_some_and(|m| m.is_server_streaming() && m.is_client_streaming()));
    }

    #[test]
    fn json_round_trips_as_etcds_gateway_writes_it() {
        let range = route("/v3/kv/range").expect("a route");
        let request = decode_json(&range, br#"{"key":"Zm9v","limit":"1","keysOnly":true,"bogus":1}"#).expect("decodes");
        let request = proto::etcdserverpb::RangeRequest::decode(&request[..]).expect("a RangeRequest");
        assert_eq!((request.key.as_slice(), request.limit, request.keys_only), (&b"foo"[..], 1, true));
        assert_eq!(decode_json(&range, b"").map(|m| m.len()), Ok(0), "an empty body is an empty request");

        let response = proto::etcdserverpb::RangeResponse {
            header: Some(proto::etcdserverpb::ResponseHeader {
                cluster_id: 1,
                member_id: 2,
                revision: 3,
                raft_term: 4,
            }),
            kvs: vec![proto::mvccpb::KeyValue {
                key: b"foo".to_vec(),
                create_revision: 2,
                mod_revision: 2,
                version: 1,
                value: b"bar".to_vec(),
                lease: 0,
            }],
            more: false,
            count: 1,
        };
        let json = encode_json(&range, &response.encode_to_vec()).expect("encodes");
        let want = r#"{"header":{"cluster_id":"1","member_id":"2","revision":"3","raft_term":"4"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2","version":"1","value":"YmFy"}],"count":"1"}"#;
        assert_eq!(json, want);
    }

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(percent_decode(b"etcdserver: key is not provided"), "etcdserver: key is not provided");
        assert_eq!(percent_decode(b"100%25 sure%0A"), "100% sure\n");
    }
}
