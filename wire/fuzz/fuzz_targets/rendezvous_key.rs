//! Arbitrary text as a rendezvous key, the way a `RecvTensor` request names
//! its tensor: `RendezvousKey::parse`, `src_task`/`dst_task`
//! (`TaskName::of_device`), `context_name` and `TaskName::prefix`, on the
//! whole input and on each of its `;`-separated parts.
//!
//! Must hold: no panic; a parsed key's devices and tensor name are exactly
//! the input's parts, its context name a non-empty suffix of the tensor
//! name, and the key written back (`Display`, as TF writes keys) parses to
//! the same key; a task read from a device name has a job that is a
//! substring of it, a prefix no longer than it, and a prefix that reads
//! back as the same task. Bytes that are not UTF-8 are read lossily (a
//! protobuf string field holds only UTF-8). Seeds: keys from the tests and
//! from recorded TensorFlow requests (`daemon/fuzz`'s `seeds` binary).

#![no_main]

use libfuzzer_sys::fuzz_target;
use tlc_wire::tf::rendezvous::{context_name, RendezvousKey, TaskName};

fuzz_target!(|input: &[u8]| {
    let text = String::from_utf8_lossy(input);
    let text = text.as_ref();
    check_device(text);
    for part in text.split(';') {
        check_device(part);
        check_context_name(part);
    }
    let Ok(key) = RendezvousKey::parse(text) else {
        return;
    };
    let parts: Vec<&str> = text.split(';').collect();
    assert_eq!(parts.len(), 5);
    assert_eq!(key.src_device, parts[0]);
    assert_eq!(key.dst_device, parts[2]);
    assert_eq!(key.tensor_name, parts[3]);
    assert!(!key.src_device.is_empty() && !key.dst_device.is_empty());
    assert!(!key.tensor_name.is_empty());
    let context = key.context_name();
    assert!(!context.is_empty());
    assert!(key.tensor_name.ends_with(context));
    assert_eq!(key.src_task(), TaskName::of_device(&key.src_device));
    assert_eq!(key.dst_task(), TaskName::of_device(&key.dst_device));
    // Written back as TF writes it, read again: the same key.
    let written = key.to_string();
    assert_eq!(
        RendezvousKey::parse(&written).as_ref(),
        Ok(&key),
        "{written}"
    );
    // TF's own spelling (16 hex digits, decimal frame and iteration) is
    // written back unchanged.
    if parts[1].len() == 16
        && parts[1]
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && parts[4] == format!("{}:{}", key.frame_iter.frame_id, key.frame_iter.iter_id)
    {
        assert_eq!(written, text);
    }
});

fn check_device(device: &str) {
    let Some(task) = TaskName::of_device(device) else {
        return;
    };
    assert!(!task.job.is_empty());
    assert!(device.contains(&format!("job:{}", task.job)));
    let prefix = task.prefix();
    assert_eq!(prefix, task.to_string());
    assert!(prefix.len() <= device.len(), "{prefix} from {device}");
    assert_eq!(TaskName::of_device(&prefix).as_ref(), Some(&task));
    // The task's own devices name the same task.
    assert_eq!(
        TaskName::of_device(&format!("{prefix}/device:CPU:0")).as_ref(),
        Some(&task)
    );
}

fn check_context_name(tensor_name: &str) {
    let context = context_name(tensor_name);
    assert!(tensor_name.ends_with(context));
    assert_eq!(context.is_empty(), tensor_name.is_empty());
    if context.len() < tensor_name.len() {
        // Only an `edge_<digits>_` prefix is dropped.
        let dropped = &tensor_name[..tensor_name.len() - context.len()];
        let digits = dropped
            .strip_prefix("edge_")
            .and_then(|d| d.strip_suffix('_'))
            .expect("edge_N_");
        assert!(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    }
}
