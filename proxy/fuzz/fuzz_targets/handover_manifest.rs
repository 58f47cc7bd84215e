//! Arbitrary bytes as each line of the listener hand-over
//! (`tlc_proxy::handover::protocol`): the running tlcd's manifest (or
//! refusal), read by the successor; the successor's hello and its ready
//! line, read by the running tlcd. Each line comes from another process
//! over a Unix socket, so a successor of another version, or a stranger on
//! the socket, could write anything.
//!
//! Must hold: no panic; an accepted manifest lists at most 64 listeners,
//! no address twice, and written back parses to the same manifest; a
//! refusal's reason is at most 1024 bytes; an accepted hello's tlcd
//! version is at most 64 bytes and the hello reads back the same; a ready
//! line reads back the same. A line over 64 KiB is refused as too long.
//! Seeds: the lines the tests write (`daemon/fuzz`'s `seeds` binary).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_proxy::handover::protocol::MAX_REASON;
use tlc_proxy::handover::{HandoverError, Hello, Manifest, Ready, MAX_LINE, MAX_LISTENERS};

fuzz_target!(|line: &[u8]| {
    let too_long = line.len() > MAX_LINE;

    match Manifest::parse(line) {
        Ok(manifest) => {
            assert!(!too_long);
            assert!(manifest.listeners.len() <= MAX_LISTENERS);
            let mut addrs: Vec<_> = manifest.listeners.iter().map(|l| l.addr).collect();
            addrs.sort();
            addrs.dedup();
            assert_eq!(addrs.len(), manifest.listeners.len(), "an address twice");
            let written = manifest.to_line();
            assert!(written.len() <= MAX_LINE);
            assert_eq!(Manifest::parse(&written).expect("reads back"), manifest);
        }
        Err(HandoverError::Refused(why)) => {
            assert!(!too_long);
            assert!(why.len() <= MAX_REASON);
            let again = Manifest::parse(&Manifest::refusal_line(&why));
            assert!(matches!(again, Err(HandoverError::Refused(w)) if w == why));
        }
        Err(HandoverError::TooLong { .. }) => assert!(too_long),
        Err(_) => {}
    }

    match Hello::parse(line) {
        Ok(hello) => {
            assert!(!too_long);
            assert!(hello.tlcd.len() <= 64);
            assert_eq!(Hello::parse(&hello.to_line()).expect("reads back"), hello);
        }
        Err(HandoverError::TooLong { .. }) => assert!(too_long),
        Err(_) => {}
    }

    match Ready::parse(line) {
        Ok(ready) => {
            assert!(!too_long);
            if let Ready::Failed(why) = &ready {
                assert!(why.len() <= MAX_REASON);
            }
            assert_eq!(Ready::parse(&ready.to_line()).expect("reads back"), ready);
        }
        Err(HandoverError::TooLong { .. }) => assert!(too_long),
        Err(_) => {}
    }
});
