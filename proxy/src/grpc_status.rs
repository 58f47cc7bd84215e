//! gRPC error responses the proxy makes itself, so a failed call reaches
//! TensorFlow as a status on that one stream rather than a reset connection.

use http::{HeaderValue, Response, StatusCode};

use super::body::{self, ProxyBody};

/// gRPC status `UNAVAILABLE`: the call failed for a reason that may pass.
pub const UNAVAILABLE: u16 = 14;
/// gRPC status `INTERNAL`.
pub const INTERNAL: u16 = 13;
/// gRPC status `UNIMPLEMENTED`: the server does not know the method.
pub const UNIMPLEMENTED: u16 = 12;
/// The caller may not do this.
pub const PERMISSION_DENIED: u16 = 7;
/// gRPC status `FAILED_PRECONDITION`: the system is not in a state the
/// call can go on from. TensorFlow's session recovery retries `UNAVAILABLE`
/// and `ABORTED` by rebuilding the session; this one reaches the training
/// script and ends the job.
pub const FAILED_PRECONDITION: u16 = 9;

/// A trailers-only gRPC response carrying `code` and `message`.
pub fn response(code: u16, message: &str) -> Response<ProxyBody> {
    let mut response = Response::new(body::empty());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code));
    if let Ok(value) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert("grpc-message", value);
    }
    response
}

/// gRPC's percent-encoding of `grpc-message`: printable ASCII except `%` as is.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..0x7f).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_message_in_headers() {
        let response = response(UNAVAILABLE, "upstream 10.0.0.1:2222 refused: 100%\n");
        assert_eq!(response.headers()["grpc-status"], "14");
        assert_eq!(
            response.headers()["grpc-message"],
            "upstream 10.0.0.1:2222 refused: 100%25%0A"
        );
    }
}
