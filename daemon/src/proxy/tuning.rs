//! Socket and HTTP/2 settings for moving large tensors quickly.
//!
//! TensorFlow sets no message size limit and moves megabytes per call; the
//! HTTP/2 defaults (64 KiB windows, 16 KiB frames) would make each call
//! wait on window updates. Large windows and frames keep a fast link full,
//! while flow control still bounds what the proxy buffers per stream.

use hyper::client::conn::http2 as client;
use hyper::server::conn::http2 as server;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpStream;
use tracing::debug;

/// Flow-control window of one stream.
const STREAM_WINDOW: u32 = 16 << 20;
/// Flow-control window of a whole connection.
const CONNECTION_WINDOW: u32 = 64 << 20;
/// Largest HTTP/2 frame accepted.
const MAX_FRAME: u32 = 1 << 20;
/// Concurrent calls per connection TensorFlow may make.
const MAX_STREAMS: u32 = 4096;
/// Bytes hyper may buffer per stream before applying backpressure to the writer.
const SEND_BUFFER: usize = 4 << 20;

/// Small messages (RecvTensor requests, control RPCs) must not wait for Nagle.
pub fn tcp(stream: &TcpStream) {
    if let Err(err) = stream.set_nodelay(true) {
        debug!(error = %err, "cannot set TCP_NODELAY");
    }
}

/// Settings for connections the proxy makes.
pub fn client(builder: &mut client::Builder<TokioExecutor>) {
    builder
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_send_buf_size(SEND_BUFFER);
}

/// Settings for connections the proxy accepts.
pub fn server(builder: &mut server::Builder<TokioExecutor>) {
    builder
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_send_buf_size(SEND_BUFFER)
        .max_concurrent_streams(MAX_STREAMS);
}
