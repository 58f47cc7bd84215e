//! The body type the proxy moves: any `http_body::Body` of `Bytes`, boxed,
//! so streamed pass-through bodies and rebuilt ones travel alike.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};

/// Any error a body may fail with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of every request and response the proxy sends.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Boxes a streaming body (for example hyper's `Incoming`) without reading it.
pub fn stream<B>(body: B) -> ProxyBody
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A body holding bytes already in memory.
pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A body with no data.
pub fn empty() -> ProxyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}
