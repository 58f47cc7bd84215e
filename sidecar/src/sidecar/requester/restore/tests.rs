//! The requester side's checks before decoding: the shape a peer
//! declares and what a decode is charged.

use super::*;

/// A frame whose entropy stage decompresses to a raw codec payload as
/// large as the tensor: the decode's charge covers the values, their
/// bytes and that payload (before, it covered the first two only:
/// 2 x 4 MiB charged for 12 MiB held).
#[test]
fn the_decode_charge_covers_the_entropy_stage_output() {
    let n = 1 << 20;
    let values = vec![0.25f32; n];
    let mut encoder = tlc_codec::Encoder::new(tlc_codec::Codec::None, tlc_codec::Feedback::Off);
    encoder.set_entropy_stage(tlc_codec::EntropyStage::Zstd);
    let header = EnvelopeHeader::push(7);
    let mut envelope = Vec::new();
    header.write(&mut envelope);
    let frame = encoder.encode(&values, &mut envelope).unwrap();
    let raw_len = u64::from(frame.raw_len.expect("zstd kept: the values repeat"));
    assert_eq!(raw_len, 4 * n as u64);
    let content_len = 4 * n as u64;
    assert_eq!(entropy_output_bytes(&envelope, content_len), raw_len);
    let prepared = Prepared {
        response: RecvTensorResponse::default(),
        dims: vec![n as u64],
        content_len,
        token: Some(7),
        rows: false,
        entropy_bytes: entropy_output_bytes(&envelope, content_len),
        wire_len: envelope.len(),
        unpacked_bytes: 0,
    };
    assert_eq!(decode_charge(&prepared), 2 * content_len + raw_len);
    // A compact envelope's full form is charged too.
    let unpacked = Prepared {
        unpacked_bytes: envelope.len() as u64,
        ..prepared
    };
    assert_eq!(
        decode_charge(&unpacked),
        2 * content_len + raw_len + envelope.len() as u64
    );
    // Without the stage, nothing more; junk charges nothing more either.
    let mut plain = Vec::new();
    header.write(&mut plain);
    encoder.set_entropy_stage(tlc_codec::EntropyStage::Off);
    encoder.encode(&values, &mut plain).unwrap();
    assert_eq!(entropy_output_bytes(&plain, content_len), 0);
    assert_eq!(entropy_output_bytes(b"junk", content_len), 0);
}

#[test]
fn a_shape_no_response_can_carry_is_refused_before_decoding() {
    let max = MAX_RESPONSE as u64;
    assert_eq!(content_bytes(&[1000, 10], max), Ok(40_000));
    assert_eq!(content_bytes(&[], max), Ok(4), "a scalar");
    assert_eq!(content_bytes(&[0, 7], max), Ok(0));
    let most = max / 4;
    assert_eq!(content_bytes(&[most], max), Ok(most * 4));
    assert!(content_bytes(&[most + 1], max).is_err());
    assert_eq!(content_bytes(&[250, 4], 4000), Ok(4000));
    assert!(
        content_bytes(&[251, 4], 4000).is_err(),
        "this sidecar's bound"
    );
    // The envelope bomb that aborted tlcd: 7e9 elements, 28 GB.
    assert!(content_bytes(&[7_000_000_000], max).is_err());
    // Products and byte counts that overflow u64.
    assert!(content_bytes(&[u64::MAX, 2], max).is_err());
    assert!(content_bytes(&[1 << 62], max).is_err());
}

/// The response around `content` as it crosses the hop, for `n` values.
fn collected_with(content: Vec<u8>, n: u64) -> Collected {
    let meta = recv_tensor::ResponseMeta {
        is_dead: false,
        send_start_micros: 1,
        transport_options: None,
        require_ack: false,
    };
    let built = recv_tensor::build_response_with_content(
        &meta,
        &[n],
        tlc_wire::tf::proto::DataType::DtFloat as i32,
        Bytes::from(content),
    )
    .unwrap();
    Collected {
        chunks: built.into_grpc_chunks().unwrap().to_vec(),
        trailers: None,
    }
}

/// A compact envelope is turned back into the full one before anything
/// reads it, within the declared shape's element limit; a damaged one is
/// refused with its token, so that the original can still be fetched.
#[test]
fn a_compact_envelope_is_read_as_its_full_form() {
    let n = 1000u64;
    let values: Vec<f32> = (0..n).map(|i| (i as f32 * 0.3).sin()).collect();
    let mut encoder = tlc_codec::Encoder::new(
        tlc_codec::Codec::ThreeLc {
            sparsity: tlc_codec::Sparsity::ONE,
        },
        tlc_codec::Feedback::On,
    );
    let mut envelope = Vec::new();
    EnvelopeHeader::push(0xfeed).write(&mut envelope);
    encoder.encode(&values, &mut envelope).unwrap();
    let mut packed = Vec::new();
    compact::pack(&envelope, &mut packed).unwrap();

    let prepared = prepare(&collected_with(packed.clone(), n), 1 << 20)
        .unwrap_or_else(|f| panic!("{}", f.reason));
    let tensor = prepared.response.tensor.as_ref().unwrap();
    assert_eq!(&tensor.tensor_content[..], &envelope[..]);
    assert_eq!(prepared.token, Some(0xfeed));
    assert_eq!(prepared.wire_len, packed.len());
    assert_eq!(prepared.unpacked_bytes, envelope.len() as u64);

    // Declared as fewer values than its frame holds: over the limit.
    let fewer = prepare(&collected_with(packed.clone(), n - 1), 1 << 20);
    assert_eq!(fewer.err().and_then(|f| f.token), Some(0xfeed));
    let mut damaged = packed;
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    let refused = prepare(&collected_with(damaged, n), 1 << 20);
    let failure = refused
        .err()
        .expect("a damaged compact envelope is refused");
    assert_eq!(failure.token, Some(0xfeed));
    assert!(failure.reason.contains("checksum"), "{}", failure.reason);
}
