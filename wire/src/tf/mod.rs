//! TensorFlow's wire format, as far as tlc needs it: the gRPC message
//! framing, the protobuf messages of `RecvTensor`, the rendezvous keys that
//! name tensors, and the exact layout of a `RecvTensorResponse` that TF reads
//! on its fast path.
//!
//! Follow one response: [`grpc::parse_single`] takes the message out of the
//! gRPC body, [`recv_tensor::decode_response`] decodes it without copying the
//! tensor, [`recv_tensor::classify`] says whether it is a float tensor tlc may
//! compress, and [`recv_tensor::build_standard_response`] writes the response
//! handed back to TensorFlow. [`rendezvous`] reads the request's key to name
//! the tensor's context.

pub mod fast_parse;
pub mod grpc;
pub mod ids;
pub mod proto;
pub mod recv_tensor;
pub mod rendezvous;

pub use recv_tensor::RECV_TENSOR_PATH;

#[cfg(test)]
mod tests;
