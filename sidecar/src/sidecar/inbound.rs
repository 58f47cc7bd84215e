//! The holder's side of `RecvTensor`: a peer sidecar asks for a tensor the
//! local TensorFlow task holds; the response is compressed on its way out.
//!
//! Only calls that announce a peer (`tlc-peer`) are touched. Everything
//! that cannot be compressed safely (not a float tensor, too small, a
//! codec refusal) leaves exactly as TensorFlow sent it.

use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use tracing::{debug, warn, Span};

use super::boundary::{self, forward};
use super::request_key;
use super::tensor_bytes;
use super::AlreadyCharged;
use super::{Sidecar, MAX_RESPONSE};
use crate::graph::{Classified, RowRole, Training};
use crate::hop::LeaveAsIs;
use crate::link::{LinkNow, PayoffKey, Verdict};
use crate::policy::{CodecChoice, Decision, Policy, Treatment};
use crate::sidecar::calls;
use crate::training::step_reads::{self, Watched};
use tlc_codec::{Codec, EntropyStage, Feedback};
use tlc_context::{Encoded, Encoding, Memory, Reads, ReplicaState, Requester};
use tlc_core::TensorCall;
use tlc_core::{Outcome, Role};
use tlc_proxy::body::{self, Collected, Peeked, ProxyBody};
use tlc_proxy::connection::ConnectionId;
use tlc_proxy::grpc_status;
use tlc_proxy::upstream::Upstream;
use tlc_wire::negotiation::{Ask, Mark};
use tlc_wire::peer;
use tlc_wire::tf::proto::DataType;
use tlc_wire::tf::{grpc, recv_tensor};

/// Handles one `RecvTensor` call arriving from a peer, inside its span
/// (see [`calls::measured`]); returns the response and how the call ended.
pub async fn recv_tensor(
    sidecar: &Sidecar,
    upstream: &Upstream,
    request: Request<ProxyBody>,
    span: &Span,
) -> (Response<ProxyBody>, Outcome) {
    let Some(ask) = Ask::parse(request.headers()) else {
        return calls::unchanged(forward(upstream, request).await);
    };
    let Some(connection) = ConnectionId::of(&request) else {
        // Every listener stamps its calls; without a connection there is
        // no way to keep a fallback for this one, so it is not compressed.
        return calls::unchanged(forward(upstream, request).await);
    };
    if !ask.acks.is_empty() {
        // Envelopes the requester restored: their originals are done with.
        let released = sidecar.fallbacks.release(&ask.acks);
        sidecar.stats.fallbacks_released(released);
    }
    let source = boundary::source(&request, connection);
    // What the requester decodes, and what this side reads whole.
    let max_tensor = ask
        .max_tensor
        .unwrap_or(u64::MAX)
        .min(sidecar.options().max_tensor_bytes);
    let (mut parts, request_body) = request.into_parts();
    peer::strip(&mut parts.headers);
    // One policy for the whole call, even if an operator changes it meanwhile.
    let policy = sidecar.policy();
    let (peeked, call) = match request_key::peek_call(request_body, &policy).await {
        Ok(read) => read,
        Err(response) => return (response, Outcome::Error),
    };
    let request = Request::from_parts(parts, peeked.into_body());
    let response = forward(upstream, request).await;
    let Some(mut call) = call else {
        sidecar.stats.passed("request_unreadable");
        return calls::unchanged(response);
    };
    // Before anything that may pass the response on unread: the watch
    // must see every step counter read (its response is a few bytes).
    let response = if step_reads::is_step_read(&call) {
        match step_reads::watch(&sidecar.steps, &call, response).await {
            Watched::Pass(response) => response,
            Watched::Fail(response) => return (response, Outcome::Error),
        }
    } else {
        response
    };
    let classified = sidecar.classify(&call, ask.class);
    call.tensor = classified.context_name(&call.tensor, &call.tensor_name);
    calls::record_call(span, &call);
    span.record("class", classified.class.name());
    if policy.never_compresses(call.direction, classified.class, &call.tensor) {
        // Nothing to decide from the response: stream it through.
        sidecar.stats.passed("policy_skip");
        return calls::unchanged(response);
    }
    // An error from TensorFlow (a trailers-only response) passes as it is.
    if response.status() != http::StatusCode::OK || response.headers().contains_key("grpc-status") {
        return calls::unchanged(response);
    }
    let payoff_key = PayoffKey {
        requester: call.requester_task.clone(),
        source,
        direction: call.direction,
        tensor: call.tensor.clone(),
    };
    let link = link_to(sidecar, &call.requester_task, ask.link);
    let verdict = sidecar
        .payoffs
        .verdict(&payoff_key, link, policy.link(), Instant::now());
    match verdict {
        Verdict::Compress | Verdict::Probe | Verdict::Settle => {}
        Verdict::Pass | Verdict::Explore => {
            // Faster raw on this link: streamed through unread, and left
            // alone by hop compression too. The tensor's memory (error
            // buffer, the requester's replica) stays as it was.
            let reason = if verdict == Verdict::Pass {
                "link_fast"
            } else {
                "link_explore"
            };
            sidecar.stats.passed(reason);
            let mut response = response;
            response.extensions_mut().insert(LeaveAsIs);
            return calls::unchanged(response);
        }
    }
    let (mut parts, response_body) = response.into_parts();
    // Read whole only what may be compressed and what the in-flight budget
    // holds; anything else streams through as TensorFlow sent it.
    let mut charge = sidecar.budget.empty();
    let limit = usize::try_from(max_tensor)
        .unwrap_or(usize::MAX)
        .saturating_add(RESPONSE_SLACK);
    let collected = match body::peek_charged(response_body, limit, Some(&mut charge)).await {
        Ok(Peeked::Whole(collected)) => collected,
        Ok(partial @ Peeked::Partial(..)) => {
            let read = match &partial {
                Peeked::Partial(read, _) => read.len(),
                Peeked::Whole(_) => 0,
            };
            let reason = if read > limit {
                "too_large"
            } else {
                "memory_budget"
            };
            if sidecar.stats.passed(reason) && reason == "too_large" {
                warn_too_large(sidecar, &call.tensor, read);
            }
            let body = body::holding(partial.into_body(), charge);
            parts.extensions.insert(AlreadyCharged);
            return (Response::from_parts(parts, body), Outcome::Passed);
        }
        Err(err) => {
            let response = grpc_status::response(
                grpc_status::UNAVAILABLE,
                &format!("tlcd: reading TensorFlow's response: {err}"),
            );
            return (response, Outcome::Error);
        }
    };
    // The encoder's output and scratch: at most the tensor's size again.
    if charge.try_grow(collected.len() as u64).is_err() {
        sidecar
            .stats
            .passed_read("memory_budget", collected.len() as u64);
        let body = body::holding(body::chunks(collected.chunks, collected.trailers), charge);
        parts.extensions.insert(AlreadyCharged);
        return (Response::from_parts(parts, body), Outcome::Passed);
    }
    // What compressing costs this tensor, for the link decision: parsing
    // the answer, encoding, rebuilding it (not the wait for its bytes).
    let started = Instant::now();
    let forced = sidecar.forced_exact(&call, policy.check().exact_at_call);
    let exact = verdict == Verdict::Settle || forced;
    let compressed = tokio::task::block_in_place(|| {
        compress(
            sidecar,
            &policy,
            &call,
            &classified,
            Asked {
                ask,
                max_tensor,
                connection,
                exact,
            },
            &collected,
            span,
        )
    });
    match compressed {
        Ok(Compressed {
            chunks,
            mark,
            keyframe,
        }) => {
            if forced {
                sidecar.stats.forced_exact();
            }
            match (exact, &mark) {
                (true, _) if verdict == Verdict::Settle => sidecar.payoffs.settled(&payoff_key),
                // Forced exact (`[policy.check]`): nothing owed either.
                (true, _) => sidecar.payoffs.made_current(&payoff_key),
                // A pull's replica made anew: current, but what it cost and
                // saved says nothing of the deltas that follow.
                (false, Mark::Envelope { .. }) if keyframe => {
                    sidecar.payoffs.made_current(&payoff_key)
                }
                (false, Mark::Envelope { .. }) => {
                    let wire = chunks.iter().map(Bytes::len).sum();
                    let took = started.elapsed();
                    sidecar
                        .payoffs
                        .record(&payoff_key, collected.len(), wire, took);
                }
                (false, Mark::IdsAgain(_)) => {}
            }
            mark.to_headers(&mut parts.headers);
            let body = body::holding(body::chunks(chunks, collected.trailers), charge);
            parts.extensions.insert(AlreadyCharged);
            (Response::from_parts(parts, body), Outcome::Compressed)
        }
        Err(reason) => {
            debug!(tensor = %call.tensor, reason, "passing through");
            let first = sidecar.stats.passed_read(reason, collected.len() as u64);
            if first && reason == "too_large" {
                warn_too_large(sidecar, &call.tensor, collected.len());
            }
            let body = body::holding(body::chunks(collected.chunks, collected.trailers), charge);
            parts.extensions.insert(AlreadyCharged);
            (Response::from_parts(parts, body), Outcome::Passed)
        }
    }
}

/// Says, once per sidecar, that a tensor crossed uncompressed because it
/// is larger than the sidecars compress: such a tensor is usually the one
/// that matters most (an embedding table), and a counter alone goes unread.
fn warn_too_large(sidecar: &Sidecar, tensor: &str, bytes: usize) {
    warn!(
        tensor,
        mib = bytes >> 20,
        max_tensor_mib = sidecar.options().max_tensor_bytes >> 20,
        "a tensor larger than this sidecar or its peer compresses crosses uncompressed \
         (limits.max_tensor_mib, at most a third of the in-flight budget, itself a quarter \
         of the memory limit): raise the container's memory limit or limits.memory_mib; \
         tlc_passthrough_total{{reason=\"too_large\"}} counts the rest"
    );
}

/// What is known of the link to `requester`: what it measured (its
/// `tlc-link`), else what this side measured of answers from it, for a
/// requester that has not timed its link yet (the links of a job are
/// mostly as fast both ways).
fn link_to(sidecar: &Sidecar, requester: &str, header: Option<peer::LinkHeader>) -> LinkNow {
    let header = header.unwrap_or_default();
    let known = |value: u64| (value > 0).then_some(value as f64);
    LinkNow {
        rate: known(header.rate).or_else(|| sidecar.link_meter.rate(requester, Instant::now())),
        decode_ps_per_byte: known(header.decode_ps_per_byte),
    }
}

/// What the request said beyond the tensor's name, and what this side
/// made of it.
struct Asked {
    /// The requester's whole say.
    ask: Ask,
    /// The largest tensor the requester decodes and this side reads whole.
    max_tensor: u64,
    /// The connection the call came on, which alone may claim the fallback.
    connection: ConnectionId,
    /// Whether to send the tensor exactly through its memory (a
    /// [`Verdict::Settle`]): a push with its pending error, a pull with
    /// its replica made the model.
    exact: bool,
}

/// What gRPC and protobuf framing add to a tensor's content in a response.
const RESPONSE_SLACK: usize = 64 << 10;

/// A compressed response: its gRPC body chunks, how it is marked for the
/// requester, and whether it is a pull's keyframe.
struct Compressed {
    chunks: Vec<Bytes>,
    mark: Mark,
    keyframe: bool,
}

/// The compressed response as gRPC body chunks and its mark, or why it
/// stays as it is.
fn compress(
    sidecar: &Sidecar,
    policy: &Policy,
    call: &TensorCall,
    classified: &Classified,
    asked: Asked,
    collected: &Collected,
    span: &Span,
) -> Result<Compressed, &'static str> {
    let Asked {
        ask,
        max_tensor,
        connection,
        exact,
    } = asked;
    let message =
        grpc::parse_single(collected.to_bytes(), MAX_RESPONSE).map_err(|_| "grpc_framing")?;
    let response = recv_tensor::decode_response(message).map_err(|_| "unparsable_response")?;
    let ids = sidecar.keep_row_ids(call, Some(classified), &response);
    if let Some(ids) = ids.filter(|_| ask.ids && policy.hop_compression()) {
        let token = sidecar.fallbacks.token();
        match super::ids_again::reference(sidecar, call, &response, &ids, token) {
            Some((chunks, again)) => {
                let wire: usize = chunks.iter().map(Bytes::len).sum();
                sidecar.stats.ids_again(collected.len(), wire);
                sidecar.fallbacks.keep(
                    token,
                    connection,
                    collected.chunks.clone(),
                    collected.trailers.clone(),
                );
                return Ok(Compressed {
                    chunks,
                    mark: Mark::IdsAgain(again),
                    keyframe: false,
                });
            }
            // These go in full: a later tensor of the step may name them.
            None => super::ids_again::sent_in_full(sidecar, call),
        }
    }
    let tensor = recv_tensor::classify(&response).map_err(|reason| reason.label())?;
    let raw_bytes = tensor.content.len();
    span.record("raw_bytes", raw_bytes);
    if raw_bytes as u64 > max_tensor {
        // Larger than the requester decodes (its `tlc-max`) or than this
        // side reads whole: it would only come back as a fallback.
        return Err("too_large");
    }
    let size = (raw_bytes, tensor.dims.len());
    let (mut choice, mut treatment) = decide(sidecar, policy, call, classified, size)?;
    if exact {
        // Lossless through the error buffer: the gradient and what earlier
        // calls left of others, the buffer empty after.
        choice.codec = Codec::None;
    }
    let mut scratch = Vec::new();
    let values = tensor_bytes::as_f32(&tensor.content, &mut scratch);
    let token = sidecar.fallbacks.token();
    let entropy = if ask.entropy && policy.entropy() {
        EntropyStage::Zstd
    } else {
        EntropyStage::Off
    };
    let by_rows = match treatment {
        Treatment::Stateless => {
            let asked = super::rows::RowsAsked {
                rows: ask.rows,
                entropy,
                exact,
            };
            sidecar.encode_rows(call, classified, asked, &tensor.dims, values, token)
        }
        _ => None,
    };
    let (envelope, took, keyframe, restores) = match by_rows {
        Some(Ok(rows)) => {
            choice.codec = rows.codec;
            treatment = Treatment::RowMemory;
            sidecar
                .stats
                .refined(call.direction, u64::from(rows.refinements));
            // Rows are not checked: no hash for them.
            (rows.bytes, rows.took, false, None)
        }
        not_rows => {
            if let Some(Err(reason)) = not_rows {
                debug!(tensor = %call.tensor, reason, "rows without memory this time");
            }
            let mut envelope = Vec::with_capacity(raw_bytes / 8 + 256);
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
            let encoded = sidecar
                .contexts
                .encode(call, values, encoding, Instant::now(), &mut envelope)
                .map_err(|refused| refused.label())?;
            account_refinement(sidecar, call, &encoded);
            (envelope, encoded.took, encoded.keyframe, encoded.mirror)
        }
    };
    let wire_bytes = envelope.len();
    let built = recv_tensor::build_response_with_content(
        &tensor.meta,
        &tensor.dims,
        DataType::DtFloat as i32,
        Bytes::from(envelope),
    )
    .map_err(|_| "rebuild_failed")?;
    let chunks = built.into_grpc_chunks().map_err(|_| "rebuild_failed")?;
    let codec = choice.codec.id();
    span.record("codec", codec.name());
    span.record("wire_bytes", wire_bytes);
    sidecar.stats.compressed(
        call.direction,
        codec,
        classified.class,
        raw_bytes,
        wire_bytes,
        took,
    );
    sidecar.record_class(
        call,
        classified,
        Some((treatment, choice.codec, raw_bytes, wire_bytes)),
        raw_bytes / 4,
    );
    if keyframe {
        sidecar.stats.keyframe(Role::Inbound);
    }
    sidecar.fallbacks.keep(
        token,
        connection,
        collected.chunks.clone(),
        collected.trailers.clone(),
    );
    Ok(Compressed {
        chunks: chunks.to_vec(),
        mark: Mark::Envelope { mirror: restores },
        keyframe,
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
) -> Result<(CodecChoice, Treatment), &'static str> {
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
            return Err(reason.label());
        }
    };
    if treatment != Treatment::Stateless && sidecar.warming_up(call, policy.warmup_steps()) {
        let codec = policy.warmup_codec();
        if codec == Codec::None {
            sidecar.record_class(call, classified, None, elements);
            return Err("warmup");
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
) -> Memory {
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
        // Rows are encoded through their own contexts, never here.
        Treatment::Stateless | Treatment::RowMemory => Memory::None,
    }
}
