//! Socket and HTTP/2 settings for moving large tensors quickly.
//!
//! TensorFlow sets no message size limit and moves megabytes per call; the
//! HTTP/2 defaults (64 KiB windows, 16 KiB frames) would make each call
//! wait on window updates. Large windows and frames keep a fast link full,
//! while flow control still bounds what the proxy buffers per stream.

use hyper::client::conn::http2 as client;
use hyper::server::conn::http2 as server;
use tokio::net::TcpStream;
use tracing::debug;

use tlc_core::Role;

/// Flow-control windows (stream, connection) on a hop that may cross a
/// slow, long link: large enough for its bandwidth-delay product.
const WIDE: (u32, u32) = (16 << 20, 64 << 20);
/// Windows on the hop between an inbound sidecar and its own TensorFlow
/// task (loopback): small windows cost nothing there, and they bound what
/// a peer that never reads can make tlcd hold per connection.
const LOCAL: (u32, u32) = (2 << 20, 8 << 20);
/// Windows for what a peer sends to an inbound sidecar (requests, which
/// its TensorFlow task reads as they come).
const FROM_PEER: (u32, u32) = (4 << 20, 16 << 20);
/// Largest HTTP/2 frame accepted.
const MAX_FRAME: u32 = 1 << 20;
/// Concurrent calls per connection TensorFlow may make.
const MAX_STREAMS: u32 = 4096;
/// Concurrent calls per connection a peer may make: more than TensorFlow
/// asks for at once (one per tensor of a step), few enough that a peer
/// that never reads holds a bounded number of send buffers.
const MAX_PEER_STREAMS: u32 = 1024;
/// Bytes hyper may buffer per stream before applying backpressure to the writer.
const SEND_BUFFER: usize = 4 << 20;
/// The same towards a peer.
const PEER_SEND_BUFFER: usize = 1 << 20;

/// Small messages (RecvTensor requests, control RPCs) must not wait for Nagle.
pub fn tcp(stream: &TcpStream) {
    if let Err(err) = stream.set_nodelay(true) {
        debug!(error = %err, "cannot set TCP_NODELAY");
    }
}

/// Settings for connections the proxy makes on a route of `role`: to a
/// peer over the link (outbound), or to the local task (inbound).
pub fn client<E: Clone>(builder: &mut client::Builder<E>, role: Role) {
    let (stream, connection) = match role {
        Role::Outbound => WIDE,
        Role::Inbound => LOCAL,
    };
    builder
        .initial_stream_window_size(stream)
        .initial_connection_window_size(connection)
        .max_frame_size(MAX_FRAME)
        .max_send_buf_size(SEND_BUFFER);
}

/// Settings for connections the proxy accepts on a route of `role`: from
/// the local task (outbound), or from a peer (inbound).
pub fn server<E>(builder: &mut server::Builder<E>, role: Role) {
    let ((stream, connection), streams, send_buffer) = match role {
        Role::Outbound => (WIDE, MAX_STREAMS, SEND_BUFFER),
        Role::Inbound => (FROM_PEER, MAX_PEER_STREAMS, PEER_SEND_BUFFER),
    };
    builder
        .initial_stream_window_size(stream)
        .initial_connection_window_size(connection)
        .max_frame_size(MAX_FRAME)
        .max_send_buf_size(send_buffer)
        .max_concurrent_streams(streams);
}
