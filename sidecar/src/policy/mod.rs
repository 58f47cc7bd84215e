//! Which tensors are compressed, and how: the `[policy]` table of the
//! config file.
//!
//! ```toml
//! [policy]
//! parameter_jobs = ["ps"]   # jobs whose tasks hold the model
//! min_bytes = 1024          # smaller tensors pass as they are
//! min_vector_bytes = 4096   # and so do smaller vectors (biases, batch norm)
//! hop_compression = true    # zstd over every other message between sidecars
//! row_memory = true         # embedding rows by row id, see `sidecar::rows`
//! entropy = true            # zstd over each frame's payload where it shrinks
//!
//! [policy.push]             # gradients, worker -> parameter task
//! codec = "3lc"
//! sparsity = 1.0
//!
//! [policy.pull]             # model values, parameter task -> worker
//! codec = "3lc"
//! sparsity = 1.0
//!
//! [policy.sparse]           # gathered rows, IndexedSlices: no memory
//! codec = "fp16"
//!
//! [policy.unknown]          # never classified by a graph: as it is
//! codec = "none"
//!
//! [policy.refine]           # bounded lag for 3LC's memory, see `refine`
//! pull_max_drift = 0.01
//!
//! [policy.link]             # or only where it pays: mode = "auto", see `link`
//! mode = "always"
//!
//! [policy.check]            # checks for an operator, off: see `check`
//! mirror = false
//!
//! [[policy.overrides]]      # first match wins
//! tensor = "*batch_norm*"   # glob over the tensor's node name
//! direction = "both"        # push, pull or both
//! skip = true               # or codec = ..., sparsity = ...
//! ```
//!
//! Which table applies depends on the tensor's class, learned from the graph
//! ([`crate::graph`]): only a dense variable read travelling as a pull gets
//! `[policy.pull]` and a replica, only a dense gradient travelling as a push
//! gets `[policy.push]` and error feedback. Everything else is encoded
//! without memory, each tensor on its own.

mod check;
mod codecs;
mod link;
mod refine;

pub use check::CheckSettings;
pub use codecs::{codec_view, CodecChoice, CodecSettings};
pub use link::{Link, LinkMode, LinkSettings};
pub use refine::{AdaptiveTargets, Refine, RefineSettings, SynchronousTargets};

use codecs::{keyframe_codec, row_keyframe_codec, warmup_codec};

use globset::{Glob, GlobMatcher};
use serde::{Deserialize, Serialize};
use tlc_codec::{Codec, CodecId, Feedback};

/// Which directions an override applies to (one word for the file and
/// the admin API).
pub use tlc_core::Directions;
use tlc_core::TensorClass;
use tlc_core::{bounds, ConfigError, Direction, PassReason};

/// One override as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSettings {
    /// Glob over the tensor's node name (for example `*batch_norm*`).
    pub tensor: String,
    /// Directions it applies to.
    #[serde(default)]
    pub direction: Directions,
    /// Leave matching tensors uncompressed.
    #[serde(default)]
    pub skip: bool,
    /// Codec for matching tensors (default: the direction's codec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub codec: Option<String>,
    /// 3LC sparsity for matching tensors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f32>,
    /// Top-k share for matching tensors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub k: Option<f32>,
}

/// The `[policy]` table as written in the file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    /// Jobs whose tasks hold parameters.
    pub parameter_jobs: Vec<String>,
    /// Tensors smaller than this many bytes pass uncompressed.
    pub min_bytes: u64,
    /// Tensors of at most one dimension (biases, batch-norm parameters and
    /// moving statistics) smaller than this many bytes pass too, whatever
    /// `min_bytes`: their norms are small, and one 3LC pass leaves such a
    /// vector 10-100% off where a matrix of the same size is not.
    pub min_vector_bytes: u64,
    /// Compress, losslessly, every message between two sidecars that is
    /// not an envelope (control calls, integer and small tensors; see
    /// `crate::hop`).
    pub hop_compression: bool,
    /// Gathered embedding rows and gradient rows that the graph pairs with
    /// their ids get memory by row id (a mirror of the requester's rows,
    /// an error buffer per row) and the push or pull codec; otherwise
    /// they get `[policy.sparse]`, without memory.
    pub row_memory: bool,
    /// Row-keyed tensors (with `row_memory`) are compressed from this many
    /// bytes, below `min_bytes`: their memory by row id makes even a
    /// one-column table's few hundred bytes shrink several times.
    pub min_row_bytes: u64,
    /// Codec of a row new to a requester's mirror (its keyframe): `none`,
    /// `fp16`, `bf16`, or `int8-rows` (int8 with a step per row: within
    /// about 0.5% of each row, well inside the pull bound, at half of
    /// fp16's bytes).
    pub row_keyframe_codec: String,
    /// Codec of a dense tensor's first keyframe (its first value, read by
    /// each worker before training): `int8`, where the int8 decode is
    /// within the pull bound of the value (else lossless), for requesters
    /// that read it; or `none`. A quarter of the bytes of that first read.
    pub keyframe_codec: String,
    /// A read-only step's pulls (a TF1 evaluation, an unsharded
    /// checkpoint) bring the requester's replica to the model exactly, with
    /// a lossless delta once per value; off, they read the replica, within
    /// the pull bound, like training. An evaluation every few steps pays
    /// that delta each time: turn it off where that costs more than it
    /// buys.
    pub exact_reads: bool,
    /// Frames carry the entropy stage (zstd over the codec's payload, where
    /// it shrinks: about 1.9x more on 3LC at s = 1.0) for requesters that
    /// read it.
    pub entropy: bool,
    /// Codec for gradients.
    pub push: CodecSettings,
    /// Codec for model values.
    pub pull: CodecSettings,
    /// Codec for sparse tensors (gathered rows, sparse gradients), without memory.
    pub sparse: CodecSettings,
    /// Codec for tensors no graph classified, without memory.
    pub unknown: CodecSettings,
    /// Dense tensors cross uncompressed for their first this many steps
    /// (per tensor and requesting task), while training moves fastest.
    pub warmup_steps: u32,
    /// The codec of those first steps: `none` (uncompressed), or `fp16`,
    /// `bf16` or `int8` through the tensor's own memory (error buffer,
    /// replica), which 3LC then carries on.
    pub warmup_codec: String,
    /// How far 3LC's memory may lag (further passes).
    pub refine: RefineSettings,
    /// Whether a tensor is compressed only where that pays on its link.
    pub link: LinkSettings,
    /// Checks an operator turns on (off by default).
    pub check: CheckSettings,
    /// Per-tensor exceptions, first match wins.
    pub overrides: Vec<OverrideSettings>,
}

/// The default codec of sparse tensors: fp16, without memory.
fn memoryless_default() -> CodecSettings {
    CodecSettings {
        codec: "fp16".into(),
        ..CodecSettings::default()
    }
}

/// The default of tensors no graph classified: uncompressed. Such a tensor
/// may be anything (a coordinator's read of the model, a checkpoint's
/// restore assigning it, a loss), and where tlc cannot tell, it does not
/// change a bit; the hop's lossless stage still applies.
fn unknown_default() -> CodecSettings {
    CodecSettings {
        codec: "none".into(),
        ..CodecSettings::default()
    }
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            parameter_jobs: vec!["ps".into()],
            min_bytes: DEFAULT_MIN_BYTES,
            min_vector_bytes: DEFAULT_MIN_VECTOR_BYTES,
            hop_compression: true,
            row_memory: true,
            min_row_bytes: DEFAULT_MIN_ROW_BYTES,
            row_keyframe_codec: "int8-rows".into(),
            keyframe_codec: "int8".into(),
            exact_reads: true,
            entropy: true,
            push: CodecSettings::default(),
            pull: CodecSettings::default(),
            sparse: memoryless_default(),
            unknown: unknown_default(),
            warmup_steps: 0,
            warmup_codec: "none".into(),
            refine: RefineSettings::default(),
            link: LinkSettings::default(),
            check: CheckSettings::default(),
            overrides: Vec::new(),
        }
    }
}

/// Tensors smaller than this pass as they are by default.
pub const DEFAULT_MIN_BYTES: u64 = 1024;

/// Vectors smaller than this pass as they are by default. Through compact
/// envelopes 64 bytes would pay on the hop (a batch-norm ResNet 15.0× →
/// 16.4×), but the harness MLP's 512-value bias then costs it 0.83 points
/// on one seed (`docs/FIDELITY.md`, "Small vectors through compact
/// envelopes"), so biases stay out by default.
pub const DEFAULT_MIN_VECTOR_BYTES: u64 = 4 * 1024;

/// Row-keyed tensors smaller than this pass as they are by default.
pub const DEFAULT_MIN_ROW_BYTES: u64 = 256;

/// What state a compressed tensor is encoded through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treatment {
    /// A dense gradient: the push context's error buffer.
    ErrorFeedback,
    /// A dense variable read: the pull replica and its deltas.
    Replica,
    /// Anything else: encoded on its own, nothing remembered.
    Stateless,
    /// Embedding or gradient rows the graph pairs with their ids: memory
    /// by row id (a stateless tensor the sidecar could key by its ids;
    /// never a policy's decision).
    RowMemory,
}

impl Treatment {
    /// The treatment a tensor of `class` travelling `direction` may get.
    /// Memory only where the graph showed the elements keep their meaning.
    pub fn of(direction: Direction, class: TensorClass) -> Treatment {
        match (direction, class) {
            (Direction::Pull, TensorClass::DenseRead) => Treatment::Replica,
            (Direction::Push, TensorClass::DenseGradient) => Treatment::ErrorFeedback,
            _ => Treatment::Stateless,
        }
    }
}

/// What to do with one tensor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    /// Compress with this codec, through this state.
    Compress(CodecChoice, Treatment),
    /// Leave it as it is.
    Pass(PassReason),
}

struct Override {
    matcher: GlobMatcher,
    direction: Directions,
    choice: Option<CodecChoice>,
}

/// The validated policy, ready to answer per tensor.
pub struct Policy {
    settings: PolicySettings,
    parameter_jobs: Vec<String>,
    min_bytes: u64,
    push: CodecChoice,
    pull: CodecChoice,
    sparse: CodecChoice,
    unknown: CodecChoice,
    row_keyframe: Codec,
    keyframe: Codec,
    warmup_codec: Codec,
    refine: Refine,
    link: Link,
    overrides: Vec<Override>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("parameter_jobs", &self.parameter_jobs)
            .field("min_bytes", &self.min_bytes)
            .field("push", &self.push)
            .field("pull", &self.pull)
            .field("sparse", &self.sparse)
            .field("unknown", &self.unknown)
            .field("refine", &self.refine)
            .field("link", &self.link)
            .field("overrides", &self.overrides.len())
            .finish()
    }
}

impl Default for Policy {
    /// The built-in defaults: 3LC at s = 1.0 both ways from 1 KiB (vectors
    /// from 4 KiB), `ps` holds parameters.
    fn default() -> Self {
        // The built-in settings are constants of this program, tested below.
        Policy::new(&PolicySettings::default()).expect("built-in policy settings are valid")
    }
}

impl Policy {
    /// Validates settings, naming the key of the first bad value.
    pub fn new(settings: &PolicySettings) -> Result<Policy, ConfigError> {
        if settings.parameter_jobs.is_empty() {
            return Err(ConfigError::Invalid {
                key: "policy.parameter_jobs".into(),
                value: "[]".into(),
                allowed: "at least one job name (TensorFlow's default is \"ps\")".into(),
            });
        }
        bounds::MIN_BYTES.check("policy.min_bytes", settings.min_bytes)?;
        bounds::MIN_BYTES.check("policy.min_vector_bytes", settings.min_vector_bytes)?;
        bounds::MIN_BYTES.check("policy.min_row_bytes", settings.min_row_bytes)?;
        bounds::WARMUP_STEPS.check("policy.warmup_steps", u64::from(settings.warmup_steps))?;
        bounds::OVERRIDES.check(
            "policy.overrides",
            u64::try_from(settings.overrides.len()).unwrap_or(u64::MAX),
        )?;
        let push = settings.push.resolve("policy.push")?;
        let pull = settings.pull.resolve("policy.pull")?;
        let sparse = settings.sparse.resolve_memoryless("policy.sparse")?;
        let unknown = settings.unknown.resolve_memoryless("policy.unknown")?;
        let row_keyframe = row_keyframe_codec(&settings.row_keyframe_codec)?;
        let keyframe = keyframe_codec(&settings.keyframe_codec)?;
        let warmup_codec = warmup_codec(&settings.warmup_codec)?;
        let refine = Refine::new(&settings.refine)?;
        let link = Link::new(&settings.link)?;
        let mut overrides = Vec::new();
        for (i, o) in settings.overrides.iter().enumerate() {
            let key = format!("policy.overrides[{i}]");
            let glob = Glob::new(&o.tensor).map_err(|e| ConfigError::Invalid {
                key: format!("{key}.tensor"),
                value: o.tensor.clone(),
                allowed: format!("a glob pattern ({e})"),
            })?;
            let choice = if o.skip {
                None
            } else {
                let base = match o.direction {
                    Directions::Pull => &settings.pull,
                    _ => &settings.push,
                };
                let codec = o.codec.clone().unwrap_or_else(|| base.codec.clone());
                let same_codec = codec == base.codec;
                let settings = CodecSettings {
                    sparsity: o.sparsity.or(if same_codec { base.sparsity } else { None }),
                    k: o.k.or(if same_codec { base.k } else { None }),
                    seed: if same_codec { base.seed } else { None },
                    feedback: base.feedback,
                    codec,
                };
                Some(settings.resolve(&key)?)
            };
            overrides.push(Override {
                matcher: glob.compile_matcher(),
                direction: o.direction,
                choice,
            });
        }
        Ok(Policy {
            settings: settings.clone(),
            parameter_jobs: settings.parameter_jobs.clone(),
            min_bytes: settings.min_bytes,
            push,
            pull,
            sparse,
            unknown,
            row_keyframe,
            keyframe,
            warmup_codec,
            refine,
            link,
            overrides,
        })
    }

    /// The settings this policy was made from.
    pub fn settings(&self) -> &PolicySettings {
        &self.settings
    }

    /// Tensors smaller than this pass uncompressed.
    pub fn min_bytes(&self) -> u64 {
        self.min_bytes
    }

    /// The size from which a tensor of `rank` dimensions is compressed:
    /// vectors and scalars from `min_vector_bytes` too.
    pub fn threshold(&self, rank: usize) -> u64 {
        if rank <= 1 {
            self.min_bytes.max(self.settings.min_vector_bytes)
        } else {
            self.min_bytes
        }
    }

    /// Whether messages that are not envelopes are compressed losslessly
    /// between sidecars.
    pub fn hop_compression(&self) -> bool {
        self.settings.hop_compression
    }

    /// Whether a read-only step's pulls settle the replica to the model.
    pub fn exact_reads(&self) -> bool {
        self.settings.exact_reads
    }

    /// Whether frames may carry the entropy stage.
    pub fn entropy(&self) -> bool {
        self.settings.entropy
    }

    /// Whether row-keyed tensors get memory by row id.
    pub fn row_memory(&self) -> bool {
        self.settings.row_memory
    }

    /// The codec of a row-keyed tensor travelling `direction`: the push
    /// or pull codec, whose memory the rows now have.
    pub fn row_codec(&self, direction: Direction) -> Codec {
        match direction {
            Direction::Push => self.push.codec,
            Direction::Pull => self.pull.codec,
        }
    }

    /// The codec of a row's keyframe (a row new to a requester's mirror);
    /// `int8-rows` takes the table's row length.
    pub fn row_keyframe_codec(&self) -> Codec {
        self.row_keyframe
    }

    /// The codec of a dense tensor's first keyframe, if not lossless.
    pub fn keyframe_codec(&self) -> Option<Codec> {
        (self.keyframe.id() != CodecId::None).then_some(self.keyframe)
    }

    /// Steps a dense tensor crosses with the warm-up codec before 3LC
    /// takes over its context.
    pub fn warmup_steps(&self) -> u32 {
        self.settings.warmup_steps
    }

    /// The codec of the warm-up steps; `Codec::None` passes them as they
    /// are.
    pub fn warmup_codec(&self) -> Codec {
        self.warmup_codec
    }

    /// How far 3LC's memory may lag before another pass is sent.
    pub fn refine(&self) -> &Refine {
        &self.refine
    }

    /// Whether tensors are compressed only where that pays on their link.
    pub fn link(&self) -> &Link {
        &self.link
    }

    /// The operator's checks (`[policy.check]`).
    pub fn check(&self) -> CheckSettings {
        self.settings.check
    }

    /// Number of per-tensor overrides.
    pub fn overrides(&self) -> usize {
        self.overrides.len()
    }

    /// Whether tasks of `job` hold parameters (their tensors are pulls).
    pub fn is_parameter_job(&self, job: &str) -> bool {
        self.parameter_jobs.iter().any(|j| j == job)
    }

    /// The codec for a direction before overrides.
    pub fn codec_for(&self, direction: Direction) -> CodecChoice {
        match direction {
            Direction::Push => self.push,
            Direction::Pull => self.pull,
        }
    }

    /// The codec for a tensor of `class` travelling `direction`, before
    /// overrides: the direction's for dense tensors, the class's otherwise.
    pub fn codec_for_class(&self, direction: Direction, class: TensorClass) -> CodecChoice {
        match (Treatment::of(direction, class), class) {
            (Treatment::ErrorFeedback | Treatment::Replica | Treatment::RowMemory, _) => {
                self.codec_for(direction)
            }
            (Treatment::Stateless, TensorClass::Sparse) => self.sparse,
            (Treatment::Stateless, _) => self.unknown,
        }
    }

    /// Whether no tensor of this name, class and direction would be
    /// compressed, whatever its size: then the response need not be read
    /// before it is forwarded.
    pub fn never_compresses(&self, direction: Direction, class: TensorClass, tensor: &str) -> bool {
        self.decide(direction, class, tensor, u64::MAX, 0) == Decision::Pass(PassReason::Skipped)
    }

    /// What to do with a tensor of `bytes` bytes and `rank` dimensions
    /// named `tensor` of `class` travelling `direction`.
    pub fn decide(
        &self,
        direction: Direction,
        class: TensorClass,
        tensor: &str,
        bytes: u64,
        rank: usize,
    ) -> Decision {
        if bytes < self.threshold(rank) {
            return Decision::Pass(PassReason::Small);
        }
        self.choose(direction, class, tensor)
    }

    /// What to do with a tensor of `bytes` bytes and `rank` dimensions
    /// named `tensor` that the graph pairs with its row ids: with row
    /// memory on, it is compressed from `min_row_bytes`, as a sparse
    /// tensor; otherwise as `decide`.
    pub fn decide_rows(
        &self,
        direction: Direction,
        tensor: &str,
        bytes: u64,
        rank: usize,
    ) -> Decision {
        if !self.settings.row_memory {
            return self.decide(direction, TensorClass::Sparse, tensor, bytes, rank);
        }
        if bytes < self.settings.min_row_bytes {
            return Decision::Pass(PassReason::Small);
        }
        self.choose(direction, TensorClass::Sparse, tensor)
    }

    /// The codec and treatment of a tensor large enough to compress: the
    /// first override that matches, else the class's.
    fn choose(&self, direction: Direction, class: TensorClass, tensor: &str) -> Decision {
        let treatment = Treatment::of(direction, class);
        let choice = match self
            .overrides
            .iter()
            .find(|o| o.direction.include(direction) && o.matcher.is_match(tensor))
        {
            Some(o) => o.choice,
            None => Some(self.codec_for_class(direction, class)),
        };
        match choice {
            Some(choice) if choice.codec != Codec::None => {
                let choice = match treatment {
                    // Nothing is remembered between two stateless tensors.
                    Treatment::Stateless => CodecChoice {
                        feedback: Feedback::Off,
                        ..choice
                    },
                    _ => choice,
                };
                Decision::Compress(choice, treatment)
            }
            _ => Decision::Pass(PassReason::Skipped),
        }
    }
}

#[cfg(test)]
mod tests;
