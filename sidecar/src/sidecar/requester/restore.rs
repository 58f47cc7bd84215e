//! The requester's restore of one envelope: the response around it read
//! and its declared shape checked against this sidecar's bound before
//! anything is allocated, then the tensor decoded through its memory (or
//! its rows), checked against the holder's hash where asked, counted in
//! the workers' agreement where asked, and rebuilt as the response
//! TensorFlow expects.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tracing::{debug, Span};

use crate::sidecar::{calls, tensor_bytes, Sidecar, MAX_RESPONSE};
use tlc_codec::{CodecId, Limits};
use tlc_context::Restored as Decoded;
use tlc_core::TensorCall;
use tlc_proxy::body::Collected;
use tlc_wire::compact;
use tlc_wire::envelope::EnvelopeHeader;
use tlc_wire::tf::proto::RecvTensorResponse;
use tlc_wire::tf::{grpc, recv_tensor};

/// Why a response could not be restored, and the token to recover with.
pub(super) struct Failure {
    pub token: Option<u64>,
    pub reason: String,
}

pub(super) fn fail(token: Option<u64>, reason: impl ToString) -> Failure {
    Failure {
        token,
        reason: reason.to_string(),
    }
}

/// A restored response and what it took.
pub(super) struct Restored {
    /// The standard response, as gRPC chunks.
    pub chunks: Vec<Bytes>,
    /// The envelope's first frame's codec.
    pub codec: CodecId,
    /// Whether the envelope was a keyframe.
    pub keyframe: bool,
    /// Time spent decoding the envelope into the tensor's content.
    pub took: Duration,
    /// Bytes of the tensor's content.
    pub content_len: usize,
    /// The envelope's fallback token.
    pub token: Option<u64>,
}

/// An envelope response whose framing and shape have been checked, before
/// anything is allocated for its values.
pub(super) struct Prepared {
    pub response: RecvTensorResponse,
    pub dims: Vec<u64>,
    pub content_len: u64,
    pub token: Option<u64>,
    /// A row-keyed envelope: restored with the step's ids.
    pub rows: bool,
    /// What the entropy stage writes for its largest frame.
    pub entropy_bytes: u64,
    /// Bytes of the envelope as it crossed (its compact form, where it
    /// came so).
    pub wire_len: usize,
    /// Bytes of the full form a compact envelope was turned back into (0
    /// for one that came in full).
    pub unpacked_bytes: u64,
}

/// What decoding `prepared` holds at its peak, charged before it starts: a
/// keyframe's or a push's values, their copy as bytes, and the entropy
/// stage's output (the codec payload a frame's zstd decompresses to,
/// before the codec decodes it), and the full form of a compact envelope.
pub(super) fn decode_charge(prepared: &Prepared) -> u64 {
    prepared
        .content_len
        .saturating_mul(2)
        .saturating_add(prepared.entropy_bytes)
        .saturating_add(prepared.unpacked_bytes)
}

/// The most bytes the entropy stage writes for one frame of `envelope`
/// (its declared `raw_len`, which the frame's checks bound by the codec
/// and the element count): frames are decoded one after another, each
/// stage's output dropped before the next. 0 without the stage, and for an
/// envelope that does not parse (its decode fails before allocating).
fn entropy_output_bytes(envelope: &[u8], content_len: u64) -> u64 {
    let limits = Limits {
        max_elements: content_len / 4,
    };
    tlc_wire::envelope::Envelope::parse(envelope, &limits).map_or(0, |parsed| {
        let stage = parsed.frames().iter().filter_map(|f| f.header.raw_len);
        stage.map(u64::from).max().unwrap_or(0)
    })
}

/// Reads the response around an envelope and checks the shape it declares
/// against `max_tensor` bytes; a compact envelope is turned back into its
/// full form here, so everything after reads one form.
pub(super) fn prepare(collected: &Collected, max_tensor: u64) -> Result<Prepared, Failure> {
    let message =
        grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).map_err(|e| fail(None, e))?;
    let mut response: RecvTensorResponse =
        recv_tensor::decode_response(message).map_err(|e| fail(None, e))?;
    let Some(tensor) = &mut response.tensor else {
        return Err(fail(None, "response without a tensor"));
    };
    let wire_len = tensor.tensor_content.len();
    let is_compact = compact::is_compact(&tensor.tensor_content);
    let token = if is_compact {
        compact::token(&tensor.tensor_content)
    } else {
        EnvelopeHeader::parse(&tensor.tensor_content)
            .ok()
            .map(|h| h.fallback_token)
    };
    let dims = dims_of(tensor).ok_or_else(|| fail(token, "bad tensor shape"))?;
    let content_len = content_bytes(&dims, max_tensor).map_err(|e| fail(token, e))?;
    let mut unpacked_bytes = 0;
    if is_compact {
        let limits = Limits {
            max_elements: content_len / 4,
        };
        let mut envelope = Vec::with_capacity(wire_len.saturating_add(256));
        compact::unpack(&tensor.tensor_content, &limits, &mut envelope)
            .map_err(|e| fail(token, e))?;
        unpacked_bytes = envelope.len() as u64;
        tensor.tensor_content = Bytes::from(envelope);
    }
    let rows = crate::sidecar::rows::is_rows_envelope(&tensor.tensor_content);
    let entropy_bytes = entropy_output_bytes(&tensor.tensor_content, content_len);
    Ok(Prepared {
        response,
        dims,
        content_len,
        token,
        rows,
        entropy_bytes,
        wire_len,
        unpacked_bytes,
    })
}

/// The standard response TensorFlow gets for a prepared envelope (a
/// row-keyed one with the step's `row_ids`), checked against the holder's
/// `mirror` hash if it sent one and counted in the workers' agreement
/// where asked (`checks`).
pub(super) fn restore(
    sidecar: &Sidecar,
    call: &TensorCall,
    (prepared, row_ids, checks): (Prepared, Option<&[i64]>, Checks),
    span: &Span,
) -> Result<Restored, Failure> {
    let Prepared {
        response,
        dims,
        content_len,
        token,
        wire_len,
        ..
    } = prepared;
    let Some(tensor) = &response.tensor else {
        return Err(fail(None, "response without a tensor"));
    };
    let envelope = &tensor.tensor_content;
    let limits = Limits {
        max_elements: content_len / 4,
    };
    let decoded = sidecar
        .contexts
        .restore(
            call,
            (envelope, row_ids),
            &limits,
            Instant::now(),
            tensor_bytes::into_bytes,
            tensor_bytes::copy_to_bytes,
        )
        .map_err(|e| fail(token, e))?;
    let Decoded {
        content,
        codec,
        keyframe,
        took,
    } = decoded;
    if content.len() as u64 != content_len {
        return Err(fail(token, "decoded tensor has the wrong size"));
    }
    sidecar
        .check_mirror(call, checks.mirror, &content)
        .map_err(|e| fail(token, e))?;
    if let Some(window) = checks.agreement_window {
        count_in_agreement(sidecar, call, &content, window);
    }
    calls::record_sizes(span, codec.name(), content.len(), wire_len);
    let meta = recv_tensor::ResponseMeta::of(&response);
    let built =
        recv_tensor::build_standard_response(&meta, &dims, content).map_err(|e| fail(token, e))?;
    let chunks = built.into_grpc_chunks().map_err(|e| fail(token, e))?;
    Ok(Restored {
        chunks: chunks.to_vec(),
        codec,
        keyframe,
        took,
        content_len: content_len as usize,
        token,
    })
}

/// Counts a restored gradient's `content` in the workers' agreement over
/// windows of `window` steps.
fn count_in_agreement(sidecar: &Sidecar, call: &TensorCall, content: &Bytes, window: u32) {
    let mut scratch = Vec::new();
    let values = tensor_bytes::as_f32(content, &mut scratch);
    let now = Instant::now();
    sidecar
        .contexts
        .measure_agreement(call, values, window, now);
    debug!(tensor = %call.tensor, holder = %call.holder_task,
        agreement = ?sidecar.contexts.agreement(call, now), "workers' agreement");
}

/// What is done with a restored tensor beside handing it to TensorFlow.
pub(super) struct Checks {
    /// The holder's hash of what should be restored (`tlc-mirror`).
    pub mirror: Option<u64>,
    /// Counted in the workers' agreement, over windows of this many steps
    /// (`requester::measures_agreement`).
    pub agreement_window: Option<u32>,
}

/// The bytes of f32 content a tensor of `dims` decodes to, checked before
/// anything is allocated. The shape is the peer's word, and decoding
/// allocates what it declares: a shape beyond `max_tensor` bytes (this
/// sidecar's `limits.max_tensor_mib`, which the request announced in
/// `tlc-max`) is refused, so a small zero-run envelope that declares 7·10⁹
/// elements (28 GB) falls back instead of aborting tlcd.
fn content_bytes(dims: &[u64], max_tensor: u64) -> Result<u64, &'static str> {
    let elements = dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .ok_or("tensor shape overflows")?;
    elements
        .checked_mul(4)
        .filter(|&bytes| bytes <= max_tensor)
        .ok_or("tensor shape larger than this sidecar decodes (limits.max_tensor_mib)")
}

/// Dimension sizes of a tensor, if all are non-negative.
fn dims_of(tensor: &tlc_wire::tf::proto::TensorProto) -> Option<Vec<u64>> {
    let shape = tensor.tensor_shape.as_ref()?;
    shape
        .dim
        .iter()
        .map(|d| u64::try_from(d.size).ok())
        .collect()
}

#[cfg(test)]
mod tests;
