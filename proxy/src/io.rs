//! The one stream type every connection runs on.

use tokio::io::{AsyncRead, AsyncWrite};

/// Any stream a connection runs on, accepted or dialled: plain TCP, or
/// TLS over it. Boxed, so one code path serves both.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
