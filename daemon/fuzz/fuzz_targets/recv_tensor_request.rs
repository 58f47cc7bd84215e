//! A peer's (or the local task's) `RecvTensor` request body, as both sides
//! of the sidecar read it: `request_key::read` on the whole body and
//! `request_key::peek_call` on the same bytes cut into chunks. Must hold:
//! no panic; both agree; the body is forwarded byte for byte; a call read
//! from it names only what the input holds (its rendezvous key, tensor
//! name and context name are substrings of the input, its task names no
//! longer than the key), its direction follows the policy's parameter
//! jobs, and the same key in a request TensorFlow would write reads as the
//! same call.
//!
//! The first byte is a mode: with its low bit set the gRPC prefix (flag 0
//! and the length) is rewritten to frame the rest, so that mutations of a
//! seed still reach the protobuf and the key; the byte also gives the
//! chunk size. Seeds: `cargo run --bin seeds -- corpus`.

#![no_main]

mod grpc_input;
mod runtime;

use std::sync::OnceLock;

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use tlc_core::Direction;
use tlc_core::TensorCall;
use tlc_demo::wire;
use tlc_proxy::body::{self, Peeked};
use tlc_sidecar::policy::Policy;
use tlc_sidecar::sidecar::request_key;
use tlc_sidecar::sidecar::MAX_REQUEST;
use tlc_wire::tf::grpc;
use tlc_wire::tf::proto::RecvTensorRequest;
use tlc_wire::tf::rendezvous::{context_name, RendezvousKey, TaskName};

use grpc_input::mode_and_body;
use runtime::runtime;

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(Policy::default)
}

fuzz_target!(|input: &[u8]| {
    let Some((mode, body)) = mode_and_body(input) else {
        return;
    };
    let policy = policy();
    let call = request_key::read(&body, policy);
    if let Some(call) = &call {
        check_call(&body, call, policy);
    }

    // The sidecar's own path: the body arrives in chunks and is peeked.
    let chunk = usize::from(mode >> 1).max(1);
    let chunks: Vec<Bytes> = body
        .chunks(chunk)
        .map(|c| body.slice_ref(c))
        .collect::<Vec<_>>();
    runtime().block_on(async {
        let (peeked, peeked_call) = request_key::peek_call(body::chunks(chunks, None), policy)
            .await
            .unwrap_or_else(|_| panic!("a body in memory is always readable"));
        assert_eq!(peeked_call, call, "peek_call and read disagree");
        assert!(
            matches!(peeked, Peeked::Whole(_)) || body.len() > MAX_REQUEST,
            "a short body is read whole"
        );
        let forwarded = body::collect(peeked.into_body(), usize::MAX)
            .await
            .unwrap_or_else(|_| panic!("the peeked body reads back"));
        assert_eq!(
            forwarded.to_bytes(),
            body,
            "the body is forwarded unchanged"
        );
    });
});

/// What a call read from `body` must satisfy.
fn check_call(body: &Bytes, call: &TensorCall, policy: &Policy) {
    let message = grpc::parse_single(body.clone(), MAX_REQUEST).expect("a read call is framed");
    let request = RecvTensorRequest::decode(message).expect("a read call decodes");
    let key_text = &request.rendezvous_key;
    assert!(
        contains(body, key_text.as_bytes()),
        "the key comes from the input"
    );
    let key = RendezvousKey::parse(key_text).expect("a read call's key parses");
    assert!(contains(body, call.tensor_name.as_bytes()));
    assert!(key_text.contains(&call.tensor_name));
    assert!(call.tensor_name.ends_with(&call.tensor));
    assert_eq!(call.tensor, context_name(&call.tensor_name));
    assert!(!call.tensor.is_empty());
    for (task, device) in [
        (&call.holder_task, &key.src_device),
        (&call.requester_task, &key.dst_device),
    ] {
        assert!(task.len() <= device.len(), "{task} longer than {device}");
        let parsed = TaskName::of_device(task).expect("a task prefix is a device name");
        assert_eq!(&parsed.prefix(), task, "task names round-trip");
    }
    let holder = TaskName::of_device(&call.holder_task).expect("checked above");
    let direction = if policy.is_parameter_job(&holder.job) {
        Direction::Pull
    } else {
        Direction::Push
    };
    assert_eq!(call.direction, direction);
    // The request TensorFlow would send for this key reads the same.
    let again = wire::request_body(key_text, request.step_id);
    assert_eq!(request_key::read(&again, policy).as_ref(), Some(call));
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}
