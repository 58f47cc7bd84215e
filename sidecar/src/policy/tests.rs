//! Tests of the `[policy]` table: defaults, overrides, thresholds, and
//! the errors that name their key.

use super::*;
use tlc_codec::{Sparsity, TopKPercent};

fn policy(toml_text: &str) -> Result<Policy, ConfigError> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        policy: PolicySettings,
    }
    let file: File = toml::from_str(toml_text).expect("test TOML parses");
    Policy::new(&file.policy)
}

#[test]
fn defaults_compress_large_tensors_with_3lc() {
    let p = policy("").unwrap();
    assert!(p.is_parameter_job("ps"));
    assert!(!p.is_parameter_job("worker"));
    assert_eq!(
        p.decide(Direction::Push, TensorClass::DenseGradient, "w1", 60, 2),
        Decision::Pass(PassReason::Small)
    );
    let Decision::Compress(choice, Treatment::Replica) =
        p.decide(Direction::Pull, TensorClass::DenseRead, "w1", 1 << 20, 2)
    else {
        panic!("large tensor not compressed")
    };
    assert_eq!(
        choice.codec,
        Codec::ThreeLc {
            sparsity: Sparsity::ONE
        }
    );
    assert_eq!(choice.feedback, Feedback::On);
}

#[test]
fn overrides_first_match_wins() {
    let p = policy(
        r#"
        [policy]
        min_bytes = 0
        min_vector_bytes = 0
        [policy.push]
        codec = "3lc"
        sparsity = 1.5
        [[policy.overrides]]
        tensor = "*batch_norm*"
        skip = true
        [[policy.overrides]]
        tensor = "dense_2/*"
        direction = "push"
        sparsity = 1.9
        [[policy.overrides]]
        tensor = "dense_2/*"
        codec = "topk"
        k = 5
        "#,
    )
    .unwrap();
    assert_eq!(
        p.decide(
            Direction::Pull,
            TensorClass::DenseRead,
            "bn/batch_norm/gamma",
            10,
            1
        ),
        Decision::Pass(PassReason::Skipped)
    );
    let three = |s| Codec::ThreeLc {
        sparsity: Sparsity::new(s).unwrap(),
    };
    assert!(
        matches!(p.decide(Direction::Push, TensorClass::DenseGradient, "dense_2/kernel", 10, 2), Decision::Compress(c, _) if c.codec == three(1.9))
    );
    assert!(
        matches!(p.decide(Direction::Pull, TensorClass::DenseRead, "dense_2/kernel", 10, 2), Decision::Compress(c, _) if c.codec == Codec::TopK { percent: TopKPercent::new(5.0).unwrap() })
    );
    assert!(
        matches!(p.decide(Direction::Push, TensorClass::DenseGradient, "dense_1/kernel", 10, 2), Decision::Compress(c, _) if c.codec == three(1.5))
    );
}

#[test]
fn bad_values_name_their_key() {
    let err = policy("[policy.push]\ncodec = \"3lc\"\nsparsity = 2.5\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy.push.sparsity = 2.5: sparsity 2.5 is out of range [1.0, 2.0)"
    );
    // Only how each starts: the rest is the words of what refused the value.
    for (toml, starts) in [
        (
            "[policy.pull]\ncodec = \"int8\"\nsparsity = 1.5\n",
            "policy.pull.sparsity = set: applies only to codec \"3lc\"",
        ),
        (
            "[policy.push]\ncodec = \"gzip\"\n",
            "policy.push.codec = gzip: unknown codec",
        ),
        (
            "[[policy.overrides]]\ntensor = \"[\"\nskip = true\n",
            "policy.overrides[0].tensor = [",
        ),
        ("[policy]\nparameter_jobs = []\n", "policy.parameter_jobs"),
    ] {
        let err = policy(toml).unwrap_err();
        assert!(err.to_string().starts_with(starts), "{err}");
    }
}

#[test]
fn only_dense_tensors_get_memory() {
    let p = policy("").unwrap();
    let big = 1 << 20;
    let fp16 = |d, c| match p.decide(d, c, "t", big, 2) {
        Decision::Compress(choice, Treatment::Stateless) => {
            choice.codec == Codec::Fp16 && choice.feedback == Feedback::Off
        }
        _ => false,
    };
    // Gathered rows pulled, sparse gradient values pushed, never classified.
    assert!(fp16(Direction::Pull, TensorClass::Sparse));
    assert!(fp16(Direction::Push, TensorClass::Sparse));
    // Never classified, or a class that contradicts the direction: not
    // trusted with memory, nor with a lossy codec.
    let passes = |d, c| p.decide(d, c, "t", big, 2) == Decision::Pass(PassReason::Skipped);
    assert!(passes(Direction::Push, TensorClass::Unknown));
    assert!(passes(Direction::Pull, TensorClass::Unknown));
    assert!(passes(Direction::Push, TensorClass::DenseRead));
    assert!(passes(Direction::Pull, TensorClass::DenseGradient));
    // A user may still choose a lossy codec for them.
    let p = policy("[policy.unknown]\ncodec = \"fp16\"\n").unwrap();
    assert!(matches!(
        p.decide(Direction::Pull, TensorClass::Unknown, "t", big, 2),
        Decision::Compress(c, Treatment::Stateless) if c.codec == Codec::Fp16
    ));
    assert!(matches!(
        p.decide(Direction::Push, TensorClass::DenseGradient, "t", big, 2),
        Decision::Compress(c, Treatment::ErrorFeedback) if c.feedback == Feedback::On
    ));
}

#[test]
fn row_keyframes_take_a_codec_that_keeps_each_rows_precision() {
    let p = Policy::default();
    assert_eq!(p.row_keyframe_codec().id(), CodecId::Int8Rows);
    let p = policy("[policy]\nrow_keyframe_codec = \"fp16\"\n").unwrap();
    assert_eq!(p.row_keyframe_codec(), Codec::Fp16);
    for bad in ["int8", "3lc", "gzip"] {
        let err = policy(&format!("[policy]\nrow_keyframe_codec = \"{bad}\"\n")).unwrap_err();
        assert!(
            err.to_string().contains("policy.row_keyframe_codec"),
            "{err}"
        );
        assert!(err.to_string().contains("int8-rows"), "{err}");
    }
}

#[test]
fn memoryless_classes_refuse_feedback_and_take_3lc_without_it() {
    let err = policy("[policy.sparse]\ncodec = \"3lc\"\nfeedback = true\n").unwrap_err();
    assert!(
        err.to_string().starts_with("policy.sparse.feedback = true"),
        "{err}"
    );
    let p = policy("[policy.unknown]\ncodec = \"3lc\"\nsparsity = 1.5\n").unwrap();
    let Decision::Compress(choice, Treatment::Stateless) =
        p.decide(Direction::Push, TensorClass::Unknown, "t", 1 << 20, 2)
    else {
        panic!("unknown tensor not compressed statelessly")
    };
    assert_eq!(choice.feedback, Feedback::Off);
    assert_eq!(
        choice.codec,
        Codec::ThreeLc {
            sparsity: Sparsity::new(1.5).unwrap()
        }
    );
    let p = policy("[policy.sparse]\ncodec = \"none\"\n").unwrap();
    assert!(p.never_compresses(Direction::Pull, TensorClass::Sparse, "t"));
    assert!(!p.never_compresses(Direction::Pull, TensorClass::DenseRead, "t"));
}

#[test]
fn row_keyed_tensors_compress_from_their_own_threshold() {
    let p = policy("[policy]\nmin_bytes = 1024\n").unwrap();
    // 130 rows of a one-column table: under min_bytes, over min_row_bytes.
    assert_eq!(
        p.decide(Direction::Push, TensorClass::Sparse, "wide", 520, 2),
        Decision::Pass(PassReason::Small)
    );
    assert!(matches!(
        p.decide_rows(Direction::Push, "wide", 520, 2),
        Decision::Compress(_, Treatment::Stateless)
    ));
    assert_eq!(
        p.decide_rows(Direction::Pull, "wide", 200, 2),
        Decision::Pass(PassReason::Small)
    );
    // Overrides still apply; without row memory, min_bytes does.
    let p = policy(
        "[policy]\nmin_bytes = 1024\n[[policy.overrides]]\ntensor = \"wide\"\nskip = true\n",
    )
    .unwrap();
    assert_eq!(
        p.decide_rows(Direction::Push, "wide", 520, 2),
        Decision::Pass(PassReason::Skipped)
    );
    let p = policy("[policy]\nrow_memory = false\nmin_bytes = 1024\n").unwrap();
    assert_eq!(
        p.decide_rows(Direction::Push, "wide", 520, 2),
        Decision::Pass(PassReason::Small)
    );
    let err = policy("[policy]\nmin_row_bytes = 4294967296\n").unwrap_err();
    assert!(err.to_string().starts_with("policy.min_row_bytes"), "{err}");
}

#[test]
fn a_first_keyframe_is_int8_or_lossless() {
    assert_eq!(Policy::default().keyframe_codec(), Some(Codec::Int8));
    let p = policy("[policy]\nkeyframe_codec = \"none\"\n").unwrap();
    assert_eq!(p.keyframe_codec(), None);
    for bad in ["fp16", "3lc", "int8-rows"] {
        let err = policy(&format!("[policy]\nkeyframe_codec = \"{bad}\"\n")).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("policy.keyframe_codec = {bad}")),
            "{err}"
        );
        assert!(err.to_string().contains("none or int8"), "{err}");
    }
}

#[test]
fn warmup_takes_a_nearly_lossless_codec() {
    assert_eq!(Policy::default().warmup_codec(), Codec::None);
    let p = policy("[policy]\nwarmup_codec = \"int8\"\n").unwrap();
    assert_eq!(p.warmup_codec(), Codec::Int8);
    for bad in ["3lc", "topk", "int8-rows", "gzip"] {
        let err = policy(&format!("[policy]\nwarmup_codec = \"{bad}\"\n")).unwrap_err();
        assert!(err.to_string().starts_with("policy.warmup_codec"), "{err}");
        assert!(err.to_string().contains("fp16, bf16 or int8"), "{err}");
    }
}

#[test]
fn vectors_compress_from_their_own_threshold() {
    let p = Policy::default();
    assert_eq!(
        (p.threshold(0), p.threshold(1), p.threshold(2)),
        (4096, 4096, 1024)
    );
    let decide = |bytes, rank| {
        p.decide(
            Direction::Push,
            TensorClass::DenseGradient,
            "t",
            bytes,
            rank,
        )
    };
    let small = Decision::Pass(PassReason::Small);
    // A 512-value bias passes; a 32 x 10 logits kernel of 1280 bytes does not.
    assert_eq!(decide(2048, 1), small);
    assert_eq!(decide(0, 0), small);
    assert!(matches!(decide(1280, 2), Decision::Compress(..)));
    assert!(matches!(decide(1280, 4), Decision::Compress(..)));
    assert_eq!(decide(1000, 2), small);
    assert!(matches!(decide(4096, 1), Decision::Compress(..)));
    // min_bytes above the vectors' threshold holds for every rank.
    let p = policy("[policy]\nmin_bytes = 65536\n").unwrap();
    assert_eq!(p.threshold(1), 65536);
    assert_eq!(p.threshold(2), 65536);
    let p = policy("[policy]\nmin_bytes = 0\nmin_vector_bytes = 0\n").unwrap();
    assert_eq!(p.threshold(0), 0);
    let err = policy("[policy]\nmin_vector_bytes = 4294967296\n").unwrap_err();
    assert!(
        err.to_string().starts_with("policy.min_vector_bytes"),
        "{err}"
    );
}
