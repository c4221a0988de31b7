//! Helpers for asserting on the gRPC status a server returned.

use tonic::Code;

/// The gRPC code and message of a server error, or `None` if the error did not come from the
/// server (transport failure, client-side validation, ...).
pub fn grpc_error(err: &etcd_client::Error) -> Option<(Code, String)> {
    match err {
        etcd_client::Error::GRpcStatus(status) => Some((status.code(), status.message().to_owned())),
        _ => None,
    }
}

/// Asserts that `result` failed on the server with exactly `code` and `message`.
#[track_caller]
pub fn assert_grpc_error<T: std::fmt::Debug>(result: Result<T, etcd_client::Error>, code: Code, message: &str) {
    match result {
        Ok(value) => panic!("expected {code:?} {message:?}, got Ok({value:?})"),
        Err(err) => {
            assert_eq!(grpc_error(&err), Some((code, message.to_owned())), "unexpected error: {err}");
        }
    }
}
