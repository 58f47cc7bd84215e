//! How the `RecvTensor` targets (`recv_tensor_request`,
//! `recv_tensor_response`) read their input: a mode byte, then a gRPC body.

use bytes::Bytes;
use tlc_wire::tf::grpc;

/// The mode byte and the body of `input`, or `None` if it is empty. With
/// the mode's low bit set the gRPC prefix (flag 0 and the length) is
/// rewritten to frame the rest, so that mutations of a seed still reach
/// the protobuf behind it.
pub fn mode_and_body(input: &[u8]) -> Option<(u8, Bytes)> {
    let (&mode, rest) = input.split_first()?;
    let mut data = rest.to_vec();
    if mode & 1 == 1 && data.len() >= grpc::PREFIX_LEN {
        let len = (data.len() - grpc::PREFIX_LEN) as u32;
        data[0] = 0;
        data[1..grpc::PREFIX_LEN].copy_from_slice(&len.to_be_bytes());
    }
    Some((mode, Bytes::from(data)))
}
