//! Generic HTTP/2 proxying for a sidecar: it knows nothing of tensors.
//!
//! The path of a call: [`listener`] accepts a connection (after
//! [`intercept`] found where it was going and [`preface`] saw HTTP/2 or a
//! TLS handshake, [`tls`] for peers; another protocol's bytes are
//! forwarded untouched by [`opaque`]) and serves it as HTTP/2; each call goes
//! to the [`Handler`] the proxy was started with, which answers it, mostly
//! through [`forward`] to the connection's [`upstream`]. [`body`] holds the
//! body types and the memory they charge to [`limits`]; [`tuning`] the
//! socket and HTTP/2 settings, [`batched`] the system calls that read and
//! write a connection's socket, many frames at a time; [`grpc_status`] the
//! error responses the proxy itself returns; [`lifecycle`], [`linger`] and
//! [`handover`] how connections end without losing a byte, on shutdown or
//! when a successor takes the listening sockets over ([`server`] ties them
//! together).
//! [`http_server`] serves the small HTTP/1 endpoints (admin, metrics).
//! Whatever is put around a connection's stream is an [`io::Wrapped`]
//! layer; whatever a body keeps alive while it lives (a call in progress,
//! a memory charge) it keeps through [`body::holding`].
//!
//! The only crate of tlc besides the codec with `unsafe`: the socket
//! option that reads a redirected connection's original destination
//! ([`intercept`]) and the allocator call that returns freed memory
//! ([`limits::memory`]), each with a SAFETY note.

pub mod batched;
pub mod body;
pub mod connection;
pub mod first_bytes;
pub mod forward;
pub mod grpc_status;
pub mod handler;
pub mod handover;
pub mod http_server;
pub mod intercept;
pub mod io;
pub mod lifecycle;
pub mod limits;
pub mod linger;
pub mod listener;
pub mod mux;
pub mod opaque;
pub mod preface;
pub mod server;
pub mod tasks;
pub mod tls;
pub mod tuning;
pub mod upstream;

#[cfg(test)]
mod test_support;

pub use handler::{Handler, Unauthenticated};
pub use intercept::Target;
pub use listener::Listener;
pub use server::{listen, listener_copy, BindError, Proxy, ProxySettings, StartError};
