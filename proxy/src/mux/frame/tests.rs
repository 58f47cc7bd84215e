use super::*;

fn pairs(list: &[(&str, &str)]) -> Pairs {
    list.iter()
        .map(|(n, v)| {
            (
                Bytes::copy_from_slice(n.as_bytes()),
                Bytes::copy_from_slice(v.as_bytes()),
            )
        })
        .collect()
}

fn request(replica: &str) -> Frame {
    Frame::Call(
        7,
        Part {
            head: Some(pairs(&[
                (":path", "/t/R"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("tlc-peer", "1"),
                ("tlc-replica", replica),
            ])),
            data: Some(Bytes::from_static(b"\x08\x01\x12\x04abcd")),
            grpc: true,
            end: true,
            tail: None,
        },
    )
}

fn response() -> Frame {
    Frame::Call(
        7,
        Part {
            head: Some(pairs(&[
                (":status", "200"),
                ("content-type", "application/grpc"),
            ])),
            data: Some(Bytes::from_static(b"tensor")),
            grpc: true,
            end: true,
            tail: Some(pairs(&[("grpc-status", "0")])),
        },
    )
}

/// Writes `frames` with one set of tables, reads them back with another,
/// and returns the bytes each took.
fn round_trip(frames: &[Frame]) -> Vec<usize> {
    let mut writer = Tables::default();
    let mut reader = Tables::default();
    let mut sizes = Vec::new();
    let mut all = BytesMut::new();
    for frame in frames {
        let before = all.len();
        writer.write(frame, &mut all);
        sizes.push(all.len() - before);
    }
    let mut batch = all.freeze();
    for frame in frames {
        let read = reader.read(&mut batch).expect("a frame");
        // The reader's header order puts what it kept first; compare as sets.
        assert_eq!(normalised(&read), normalised(frame));
    }
    assert!(batch.is_empty());
    sizes
}

fn normalised(frame: &Frame) -> Frame {
    match frame {
        Frame::Call(id, part) => {
            let mut part = part.clone();
            for list in [&mut part.head, &mut part.tail].into_iter().flatten() {
                list.sort();
            }
            Frame::Call(*id, part)
        }
        other => other.clone(),
    }
}

#[test]
fn frames_come_back_as_written() {
    round_trip(&[
        request("1:1"),
        response(),
        Frame::Credit(7, 1 << 20),
        Frame::Reset(9, 8),
        Frame::GoAway,
        Frame::Call(
            3,
            Part {
                data: Some(Bytes::from_static(b"more")),
                ..Part::default()
            },
        ),
        Frame::Call(
            3,
            Part {
                end: true,
                ..Part::default()
            },
        ),
    ]);
}

#[test]
fn a_call_like_the_last_costs_a_few_bytes() {
    // Requests go one way, responses the other: each direction its tables.
    let requests = round_trip(&[request("1:1"), request("1:2"), request("1:2")]);
    let responses = round_trip(&[response(), response()]);
    // The first of each carries its names and values.
    assert!(
        requests[0] > 60 && responses[0] > 30,
        "{requests:?} {responses:?}"
    );
    // A request whose only new value is tlc-replica's: flags, id, keep,
    // count, the name's slot, the value, and the data's length.
    let data = 8;
    assert_eq!(
        requests[1] - data,
        1 + 1 + 1 + 1 + 1 + 4 + 1,
        "{requests:?}"
    );
    // The same again: flags, id and the data's length.
    assert_eq!(requests[2] - data, 1 + 1 + 1, "{requests:?}");
    // A response like the last: flags, id, length.
    assert_eq!(responses[1] - 6, 1 + 1 + 1, "{responses:?}");
}

#[test]
fn repeated_names_keep_their_order() {
    let first = pairs(&[("a", "1"), ("b", "1"), ("b", "2")]);
    let second = pairs(&[("b", "2"), ("b", "1"), ("a", "1")]);
    let mut writer = Tables::default();
    let mut reader = Tables::default();
    let mut out = BytesMut::new();
    for list in [&first, &second] {
        let frame = Frame::Call(
            1,
            Part {
                head: Some(list.clone()),
                end: true,
                ..Part::default()
            },
        );
        writer.write(&frame, &mut out);
    }
    let mut batch = out.freeze();
    reader.read(&mut batch).expect("first");
    let Frame::Call(_, part) = reader.read(&mut batch).expect("second") else {
        panic!("not a call")
    };
    let head = part.head.expect("a head");
    let bs: Vec<_> = head.iter().filter(|(n, _)| &n[..] == b"b").collect();
    assert_eq!(bs[0].1, "2");
    assert_eq!(bs[1].1, "1");
}

#[test]
fn hostile_frames_are_errors() {
    let cases: &[(&[u8], FrameError)] = &[
        (b"", FrameError::Short),
        (b"\x02\x01\x05ab", FrameError::Short),
        (b"\x83\x00", FrameError::Flags(0x83)),
        (b"\x10\x01", FrameError::Flags(0x10)),
        (b"\x00\x01", FrameError::Flags(0x00)),
        (b"\x01\x01\x03\x00", FrameError::Keep { keep: 3, had: 0 }),
        (b"\x01\x01\x00\x41", FrameError::BlockTooLarge),
        (b"\x01\x01\x00\x01\x0b", FrameError::Slot(5)),
        (b"\x01\x01\x00\x01\x04\x01", FrameError::Slot(1)),
        (b"\x02\xff\xff\xff\xff\x7f", FrameError::Number),
    ];
    for (bytes, want) in cases {
        let mut batch = Bytes::from_static(bytes);
        let got = Tables::default().read(&mut batch);
        assert_eq!(got.as_ref().err(), Some(want), "{bytes:?}: {got:?}");
    }
}

#[test]
fn any_bytes_are_a_frame_or_an_error() {
    // A cheap stand-in for the fuzz target: pseudo-random batches.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let len = (state % 40) as usize;
        let mut bytes = Vec::with_capacity(len);
        for _ in 0..len {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            bytes.push(state as u8);
        }
        let mut tables = Tables::default();
        let mut batch = Bytes::from(bytes);
        while !batch.is_empty() {
            if tables.read(&mut batch).is_err() {
                break;
            }
        }
    }
}

#[test]
fn batches_are_grpc_messages() {
    let mut buffer = BytesMut::new();
    buffer.put_slice(&batch_prefix(3));
    buffer.put_slice(b"abc");
    buffer.put_slice(&batch_prefix(2));
    buffer.put_slice(b"d");
    assert_eq!(
        next_batch(&mut buffer).expect("ok").as_deref(),
        Some(&b"abc"[..])
    );
    assert_eq!(next_batch(&mut buffer).expect("ok"), None);
    let mut compressed = BytesMut::from(&b"\x01\x00\x00\x00\x01a"[..]);
    assert_eq!(next_batch(&mut compressed), Err(FrameError::Batch(1, 1)));
    let mut huge = BytesMut::from(&batch_prefix(MAX_BATCH + 1)[..]);
    assert!(next_batch(&mut huge).is_err());
    let message = Bytes::from_static(b"\x00\x00\x00\x00\x02hi");
    assert_eq!(single_grpc_message(&message).as_deref(), Some(&b"hi"[..]));
    assert_eq!(
        single_grpc_message(&Bytes::from_static(b"\x00\x00\x00\x00\x03hi")),
        None
    );
}
