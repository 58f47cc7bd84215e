//! The holder's encoding of one response: TensorFlow's answer parsed,
//! the tensor's treatment decided by the policy, and the tensor encoded
//! (ids by reference, rows by row id, anything else through its memory)
//! into the response the requester's sidecar restores.

use std::time::Instant;

use bytes::Bytes;
use tracing::{debug, warn, Span};

use crate::graph::{Classified, RowRole, Training};
use crate::policy::{CodecChoice, Decision, Policy, Treatment};
use crate::sidecar::pass::PassReason;
use crate::sidecar::{ids_again, tensor_bytes, Sidecar, MAX_RESPONSE};
use tlc_codec::{Codec, EntropyStage, Feedback};
use tlc_context::{EncodeRefused, Encoded, Encoding, Memory, Reads, ReplicaState, Requester};
use tlc_core::{Role, TensorCall};
use tlc_proxy::body::Collected;
use tlc_proxy::connection::ConnectionId;
use tlc_wire::negotiation::{Ask, Mark};
use tlc_wire::peer::RowsHeader;
use tlc_wire::tf::proto::{DataType, RecvTensorResponse};
use tlc_wire::tf::{grpc, recv_tensor};

/// A compressed response: its gRPC body chunks, how it is marked for the
/// requester, and whether it is a pull's keyframe.
pub(super) struct Compressed {
    pub chunks: Vec<Bytes>,
    pub mark: Mark,
    pub keyframe: bool,
}

/// What the requester asked, and what this side made of it.
pub(super) struct Asked<'a> {
    /// The requester's whole say.
    pub ask: &'a Ask,
    /// The largest tensor the requester decodes and this side reads whole.
    pub max_tensor: u64,
    /// The connection the call came on, which alone may claim the fallback.
    pub connection: ConnectionId,
    /// Whether to send the tensor exactly through its memory (a
    /// settling call, or one `[policy.check]` forces): a push with its
    /// pending error, a pull with its replica made the model.
    pub exact: bool,
}

/// The compressed response as gRPC body chunks and its mark, or why it
/// stays as it is.
pub(super) fn compress(
    sidecar: &Sidecar,
    policy: &Policy,
    (call, classified): (&TensorCall, &Classified),
    asked: Asked,
    collected: &Collected,
    span: &Span,
) -> Result<Compressed, PassReason> {
    let Asked {
        ask,
        max_tensor,
        connection,
        exact,
    } = asked;
    let message = grpc::parse_single(collected.to_bytes(), MAX_RESPONSE)
        .map_err(|_| PassReason::GrpcFraming)?;
    let response =
        recv_tensor::decode_response(message).map_err(|_| PassReason::UnparsableResponse)?;
    let ids = sidecar.keep_row_ids(call, Some(classified), &response);
    if let Some(ids) = ids.filter(|_| ask.ids && policy.hop_compression()) {
        if let Some(again) = by_reference(sidecar, call, (&response, &ids), collected, connection) {
            return Ok(again);
        }
    }
    let tensor = recv_tensor::classify(&response).map_err(PassReason::Tensor)?;
    let raw_bytes = tensor.content.len();
    span.record("raw_bytes", raw_bytes);
    if raw_bytes as u64 > max_tensor {
        // Larger than the requester decodes (its `tlc-max`) or than this
        // side reads whole: it would only come back as a fallback.
        return Err(PassReason::TooLarge);
    }
    let size = (raw_bytes, tensor.dims.len());
    let (mut choice, treatment) = decide(sidecar, policy, call, classified, size)?;
    if exact {
        // Lossless through the error buffer: the gradient and what earlier
        // calls left of others, the buffer empty after.
        choice.codec = Codec::None;
    }
    let token = sidecar.holder.fallbacks.token();
    let how = How {
        choice,
        treatment,
        token,
        exact,
    };
    let mut encoded = encode(sidecar, policy, (call, classified), ask, &tensor, how)?;
    if ask.compact {
        encoded.bytes = compacted(encoded.bytes);
    }
    let wire_bytes = encoded.bytes.len();
    let built = recv_tensor::build_response_with_content(
        &tensor.meta,
        &tensor.dims,
        DataType::DtFloat as i32,
        Bytes::from(std::mem::take(&mut encoded.bytes)),
    )
    .map_err(|_| PassReason::RebuildFailed)?;
    let chunks = built
        .into_grpc_chunks()
        .map_err(|_| PassReason::RebuildFailed)?;
    let sizes = (raw_bytes, wire_bytes);
    account(sidecar, (call, classified), &encoded, sizes, span);
    let (kept, trailers) = (collected.chunks.clone(), collected.trailers.clone());
    sidecar
        .holder
        .fallbacks
        .keep(token, connection, kept, trailers);
    Ok(Compressed {
        chunks: chunks.to_vec(),
        mark: Mark::Envelope {
            mirror: encoded.mirror,
        },
        keyframe: encoded.keyframe,
    })
}

/// `envelope` in its compact form, for a requester that reads it; as it is
/// if it cannot be packed, which only a bug here would cause (it is
/// logged): the requester reads both forms.
fn compacted(envelope: Vec<u8>) -> Vec<u8> {
    let mut compact = Vec::with_capacity(envelope.len());
    match tlc_wire::compact::pack(&envelope, &mut compact) {
        Ok(()) => compact,
        Err(err) => {
            warn!(error = %err, "cannot pack an envelope compact; sending it as it is");
            envelope
        }
    }
}

/// Counts a tensor encoded `raw_bytes` → `wire_bytes`, in the call's span,
/// the counters and the tensor's class record.
fn account(
    sidecar: &Sidecar,
    (call, classified): (&TensorCall, &Classified),
    encoded: &EncodedTensor,
    (raw_bytes, wire_bytes): (usize, usize),
    span: &Span,
) {
    let codec = encoded.codec.id();
    span.record("codec", codec.name());
    span.record("wire_bytes", wire_bytes);
    let (direction, class) = (call.direction, classified.class);
    let took = encoded.took;
    sidecar
        .stats
        .compressed(direction, codec, class, raw_bytes, wire_bytes, took);
    let sizes = (encoded.treatment, encoded.codec, raw_bytes, wire_bytes);
    sidecar.record_class(call, classified, Some(sizes), raw_bytes / 4);
    if encoded.keyframe {
        sidecar.stats.keyframe(Role::Inbound);
    }
}

/// Ids the requester keeps (`tlc-ids`) sent as a reference to equal
/// ids of the step it already has, the original kept for its fallback;
/// `None` where there are none (these then go in full, and a later tensor
/// of the step may name them).
fn by_reference(
    sidecar: &Sidecar,
    call: &TensorCall,
    (response, ids): (&RecvTensorResponse, &[i64]),
    collected: &Collected,
    connection: ConnectionId,
) -> Option<Compressed> {
    let token = sidecar.holder.fallbacks.token();
    let Some((chunks, again)) = ids_again::reference(sidecar, call, response, ids, token) else {
        ids_again::sent_in_full(sidecar, call);
        return None;
    };
    let wire: usize = chunks.iter().map(Bytes::len).sum();
    sidecar.stats.ids_again(collected.len(), wire);
    let (kept, trailers) = (collected.chunks.clone(), collected.trailers.clone());
    sidecar
        .holder
        .fallbacks
        .keep(token, connection, kept, trailers);
    Some(Compressed {
        chunks,
        mark: Mark::IdsAgain(again),
        keyframe: false,
    })
}

/// How the policy has the tensor encoded.
struct How {
    choice: CodecChoice,
    treatment: Treatment,
    /// The fallback token the envelope carries.
    token: u64,
    /// Exactly through the tensor's memory.
    exact: bool,
}

/// An encoded tensor: the envelope, and what it took and is.
struct EncodedTensor {
    bytes: Vec<u8>,
    took: std::time::Duration,
    keyframe: bool,
    /// The hash of what the requester should restore, where it checks.
    mirror: Option<u64>,
    /// The codec and treatment it went with (rows take their own).
    codec: Codec,
    treatment: Treatment,
}

/// The envelope for `tensor`: by row id where the tensor has rows and they
/// can be kept, else through the tensor's memory.
fn encode(
    sidecar: &Sidecar,
    policy: &Policy,
    (call, classified): (&TensorCall, &Classified),
    ask: &Ask,
    tensor: &recv_tensor::FloatTensor,
    how: How,
) -> Result<EncodedTensor, PassReason> {
    let mut scratch = Vec::new();
    let values = tensor_bytes::as_f32(&tensor.content, &mut scratch);
    let entropy = if ask.entropy && policy.entropy() {
        EntropyStage::Zstd
    } else {
        EntropyStage::Off
    };
    if how.treatment == Treatment::Stateless {
        if let Some(asked) = ask.rows {
            match by_rows(
                sidecar,
                call,
                classified,
                asked,
                (tensor, values),
                &how,
                entropy,
            ) {
                Some(Ok(rows)) => return Ok(rows),
                Some(Err(refused)) => {
                    debug!(tensor = %call.tensor, reason = refused.label(), "rows without memory this time")
                }
                None => {}
            }
        }
    }
    let capacity = tensor.content.len() / 8 + 256;
    through_memory(
        sidecar,
        policy,
        (call, classified),
        ask,
        (values, capacity),
        how,
        entropy,
    )
}

/// The envelope for a row-keyed tensor, by row id (`None` if it is not
/// one this side can key: encode it without memory).
fn by_rows(
    sidecar: &Sidecar,
    call: &TensorCall,
    classified: &Classified,
    asked: RowsHeader,
    (tensor, values): (&recv_tensor::FloatTensor, &[f32]),
    how: &How,
    entropy: EntropyStage,
) -> Option<Result<EncodedTensor, EncodeRefused>> {
    let found = sidecar.rows_for(call, classified, how.exact)?;
    let encoding = Encoding {
        codec: found.codec,
        memory: Memory::Rows(found.memory(&tensor.dims, asked)),
        fallback_token: how.token,
        entropy,
        // Rows are not checked: no hash for them.
        mirror: false,
    };
    let mut envelope = Vec::with_capacity(values.len() / 4 + 256);
    let encoded = sidecar
        .contexts
        .encode(call, values, encoding, Instant::now(), &mut envelope);
    Some(encoded.map(|encoded| {
        sidecar.stats.refined(call.direction, encoded.refinements);
        EncodedTensor {
            bytes: envelope,
            took: encoded.took,
            keyframe: false,
            mirror: None,
            codec: found.codec,
            treatment: Treatment::RowMemory,
        }
    }))
}

/// The envelope for `values` through the tensor's memory (its error
/// buffer or the requester's replica), in an envelope of `capacity` bytes
/// to start with.
fn through_memory(
    sidecar: &Sidecar,
    policy: &Policy,
    (call, classified): (&TensorCall, &Classified),
    ask: &Ask,
    (values, capacity): (&[f32], usize),
    how: How,
    entropy: EntropyStage,
) -> Result<EncodedTensor, PassReason> {
    let How {
        choice,
        treatment,
        token,
        exact,
    } = how;
    let requester = Requester {
        has: ask.replica.map(|h| ReplicaState {
            epoch: h.epoch,
            version: h.version,
        }),
        first_keyframe: policy.keyframe_codec().filter(|_| ask.int8_keyframes),
        reads: if exact {
            Reads::Settle
        } else {
            reads_for(policy, classified)
        },
    };
    let said = Said {
        requester,
        agreement: ask.agreement,
    };
    let memory = memory_for(sidecar, policy, call, classified, &choice, treatment, said);
    let encoding = Encoding {
        codec: choice.codec,
        memory,
        fallback_token: token,
        entropy,
        mirror: ask.mirror,
    };
    let mut envelope = Vec::with_capacity(capacity);
    let encoded = sidecar
        .contexts
        .encode(call, values, encoding, Instant::now(), &mut envelope)
        .map_err(PassReason::Refused)?;
    account_refinement(sidecar, call, &encoded);
    Ok(EncodedTensor {
        bytes: envelope,
        took: encoded.took,
        keyframe: encoded.keyframe,
        mirror: encoded.mirror,
        codec: choice.codec,
        treatment,
    })
}

/// Counts the further passes an encode sent, and says so loudly the first
/// time a tensor's pull replica had to be reset.
fn account_refinement(sidecar: &Sidecar, call: &TensorCall, encoded: &Encoded) {
    sidecar.stats.refined(call.direction, encoded.refinements);
    if encoded.settled {
        sidecar.stats.settled();
    }
    if encoded.critical {
        sidecar.stats.critical_push();
    }
    if let Some(first) = encoded.drift_reset {
        sidecar.stats.drift_reset();
        if first {
            warn!(
                tensor = %call.tensor,
                "pull replica drifted too far from the model (lossy deltas cannot keep up, \
                 as in fast asynchronous training): sending keyframes when it does; \
                 consider a lossless or 16-bit pull codec for this job"
            );
        }
    }
}

/// The codec and treatment the policy gives the tensor `call` asks for,
/// `raw_bytes` long with `rank` dimensions, or why it passes (too small,
/// skipped, warming up). A tensor that passes is still recorded with its
/// class.
fn decide(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    classified: &Classified,
    (raw_bytes, rank): (usize, usize),
) -> Result<(CodecChoice, Treatment), PassReason> {
    let elements = raw_bytes / 4;
    let row_keyed = classified
        .rows
        .as_ref()
        .is_some_and(|rows| rows.role != RowRole::Ids);
    let decision = if row_keyed {
        policy.decide_rows(call.direction, &call.tensor, raw_bytes as u64, rank)
    } else {
        policy.decide(
            call.direction,
            classified.class,
            &call.tensor,
            raw_bytes as u64,
            rank,
        )
    };
    let (choice, treatment) = match decision {
        Decision::Compress(choice, treatment) => (choice, treatment),
        Decision::Pass(reason) => {
            sidecar.record_class(call, classified, None, elements);
            return Err(PassReason::Policy(reason));
        }
    };
    if treatment != Treatment::Stateless && sidecar.warming_up(call, policy.warmup_steps()) {
        let codec = policy.warmup_codec();
        if codec == Codec::None {
            sidecar.record_class(call, classified, None, elements);
            return Err(PassReason::Warmup);
        }
        // Through the tensor's own memory, so that 3LC carries on from
        // what the warm-up left (an error buffer, a replica).
        let warm = CodecChoice {
            codec,
            feedback: Feedback::On,
        };
        return Ok((warm, treatment));
    }
    Ok((choice, treatment))
}

/// What a pull of `classified` needs of the value: with `exact_reads`, a
/// read-only graph's reads the model itself, and every other read the model
/// once it reads a value again that has not changed since (training ended,
/// a frozen variable, an evaluation pass); without, the replica.
fn reads_for(policy: &Policy, classified: &Classified) -> Reads {
    match (policy.exact_reads(), classified.read_only) {
        (false, _) => Reads::Replica,
        (true, true) => Reads::Exact,
        (true, false) => Reads::SettleRereads,
    }
}

/// What the requester said that the tensor's memory needs: for a pull,
/// what it holds and reads; for a gradient, how much the workers agree.
struct Said {
    requester: Requester,
    agreement: Option<f64>,
}

/// The memory `treatment` keeps for the tensor (an error buffer only if
/// `choice` uses one), with the refinement the
/// policy sets for it: tighter where training does not look synchronous.
fn memory_for(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    classified: &Classified,
    choice: &CodecChoice,
    treatment: Treatment,
    said: Said,
) -> Memory<'static> {
    match treatment {
        Treatment::ErrorFeedback => Memory::ErrorFeedback {
            feedback: choice.feedback,
            refine: policy
                .refine()
                .push(classified.accumulated, classified.adaptive),
            agreement: said.agreement,
        },
        Treatment::Replica => Memory::Replica {
            requester: said.requester,
            refine: policy
                .refine()
                .pull(sidecar.graphs.training(&call.holder_task) == Training::Synchronous),
        },
        // Rows are encoded through their memory in `by_rows`, never here.
        Treatment::Stateless | Treatment::RowMemory => Memory::None,
    }
}
