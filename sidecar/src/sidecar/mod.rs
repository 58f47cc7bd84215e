//! What the sidecar does to a call beyond forwarding it. `RecvTensor` is
//! where tensors travel, so it is the one method the sidecar looks inside:
//! [`requester`] next to the task that asks, [`holder`] next to the task
//! that holds the tensor. Every other call is forwarded untouched.
//!
//! [`Sidecar`]'s fields are its own; outsiders (the daemon's endpoints,
//! the demo, tests) go through methods that say what they want. Its
//! `impl` is split by concern, one file each:
//!
//! - this file: construction, the settings operators change live (policy,
//!   table bounds, `[recovery]`), dispatch of each call, eviction;
//! - [`state`]: what outsiders read of the whole: counters, table sizes,
//!   in-flight memory, TLS, training progress;
//! - [`tensors`]: what they read per tensor: the admin API's rows, the
//!   per-tensor metrics, single contexts and replicas;
//! - [`classes`]: each tensor's class, from the graphs seen (and a graph
//!   taught by hand);
//! - [`warmup`]: the steps a tensor crosses uncompressed;
//! - `check`: `[policy.check]`, the call forced exact and the mirror check.

mod acks;
mod boundary;
pub mod call;
pub mod call_state;
pub mod calls;
mod check;
pub mod classes;
mod codec_work;
pub mod fallback;
pub mod holder;
mod ids_again;
pub mod pass;
pub mod record;
mod registrations;
pub mod request_key;
pub mod requester;
pub mod row_ids;
pub mod rows;
pub mod sides;
pub mod state;
pub mod stats;
pub mod tensor_bytes;
pub mod tensors;
pub mod warmup;

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use http::{Request, Response};
use tracing::debug;

use crate::graph::GraphIndex;
use tlc_context::pull::random_seed;
use tlc_context::{ContextLimits, ContextTable, Contexts, TableLimits};
use tlc_core::Role;
use tlc_proxy::limits::budget::MemoryBudget;

use crate::policy::Policy;
use crate::training::recovery::RecoverySettings;
use crate::training::{Moment, StepRead, Verdict};
use fallback::FallbackCache;
use record::Recorder;
use sides::{HolderState, RequesterState};
use stats::Stats;
use tlc_proxy::body::ProxyBody;
use tlc_proxy::connection::ConnectionStats;
use tlc_proxy::tls::TlsContext;
use tlc_proxy::upstream::Upstream;
use tlc_proxy::Handler;

/// The gRPC method TensorFlow moves tensors with.
pub use tlc_wire::tf::RECV_TENSOR_PATH as RECV_TENSOR;

/// Largest request body read (RecvTensor requests are a few hundred bytes).
pub const MAX_REQUEST: usize = 1 << 20;
/// Largest graph registration message read (a `RegisterGraphRequest` or
/// one `EnqueueRequest`); a larger one passes unread and its tensors stay
/// unknown.
pub const MAX_GRAPH_MESSAGE: usize = 256 << 20;
/// Largest response body read: TensorFlow's own 2 GiB message limit plus the gRPC prefix.
pub const MAX_RESPONSE: usize = (2 << 30) + 5;

/// Bytes of contexts an eviction must free before the allocator is asked
/// to hand memory back (a trim walks the heap: not for every small one).
const RELEASE_AFTER: usize = 64 << 20;

/// The call a master makes on every task when it creates a session.
const CREATE_WORKER_SESSION: &str = "/tensorflow.WorkerService/CreateWorkerSession";

/// Most bytes of row ids kept for their rows (a step's ids are a few
/// hundred KB at most; this is the bound, not the use).
const ROW_IDS_BYTES: usize = 64 << 20;

/// How long an unused context lives by default.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// Bounds and sizes of the sidecar's state.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Push contexts (error buffers), by memory and idle time.
    pub push_limits: TableLimits,
    /// Pull sources (the holder's replicas and delta caches).
    pub pull_limits: TableLimits,
    /// Replicas kept by the requester side.
    pub replica_limits: TableLimits,
    /// Deltas each pull source keeps for workers that fall behind.
    pub pull_cache_len: usize,
    /// Bytes of original responses kept for fallbacks.
    pub fallback_bytes: usize,
    /// Bytes calls in flight may hold (see [`tlc_proxy::limits::budget`]).
    pub in_flight_bytes: u64,
    /// Largest tensor content, in bytes, read whole or decoded.
    pub max_tensor_bytes: u64,
    /// How long a decode waits for in-flight memory.
    pub memory_wait: Duration,
    /// How long a body read whole (a hop-compressed request, a graph
    /// registration) has to arrive.
    pub gather: Duration,
    /// Bytes of earlier requests kept for hop references.
    pub hop_references_bytes: usize,
    /// The memory total the defaults above are shares of (for
    /// `tlc_memory_limit_bytes`; bounds set one by one do not change it).
    pub memory: tlc_proxy::limits::memory::Total,
}

impl Options {
    /// The default bounds within `limits`: each table, the fallback cache
    /// and calls in flight get their share of the memory.
    pub fn within(limits: &tlc_proxy::limits::settings::Limits) -> Options {
        let table = TableLimits {
            max_bytes: usize::try_from(limits.shares.table_bytes).unwrap_or(usize::MAX),
            max_age: DEFAULT_IDLE,
        };
        Options {
            push_limits: table,
            pull_limits: table,
            replica_limits: table,
            pull_cache_len: tlc_context::pull::DEFAULT_CACHE_LEN,
            fallback_bytes: usize::try_from(limits.shares.fallback_bytes).unwrap_or(usize::MAX),
            in_flight_bytes: limits.shares.in_flight_bytes,
            max_tensor_bytes: limits.max_tensor_bytes,
            memory_wait: limits.memory_wait,
            gather: limits.gather,
            hop_references_bytes: usize::try_from(limits.hop_references_bytes)
                .unwrap_or(usize::MAX),
            memory: limits.memory,
        }
    }
}

impl Default for Options {
    /// The bounds of the default `[limits]` (the container's memory).
    fn default() -> Self {
        let limits = tlc_proxy::limits::settings::LimitSettings::default().limits();
        // The default settings are within their ranges by construction.
        let limits = limits.unwrap_or_else(|err| unreachable!("default limits: {err}"));
        Options::within(&limits)
    }
}

/// The bounds of the bookkeeping tables (classes, warm-up counts): the age
/// of the contexts', and a sixteenth of their memory.
fn small_table(limits: TableLimits) -> TableLimits {
    TableLimits {
        max_bytes: limits.max_bytes / 16,
        ..limits
    }
}

/// State shared by every call through this sidecar.
pub struct Sidecar {
    /// Swapped whole when an operator retunes; each call reads it once.
    policy: RwLock<Arc<Policy>>,
    options: Options,
    /// Every tensor context: the holder's error buffers and pull sources,
    /// the requester's replicas.
    contexts: Contexts,
    /// What the graphs that passed through said each tensor is.
    graphs: Arc<GraphIndex>,
    /// What the holder's side keeps for itself.
    holder: HolderState,
    /// What the requester's side keeps for itself.
    requester: RequesterState,
    /// What happened so far.
    stats: Stats,
    /// Every read of the step counter seen: training progress, and a
    /// model that went back (see [`crate::training`]).
    steps: crate::training::StepWatch,
    /// Set when the job is found stuck: every call waiting for an answer
    /// fails with this message.
    stuck: tokio::sync::watch::Sender<Option<Arc<str>>>,
    /// Calls waiting for their response head.
    waiting: std::sync::atomic::AtomicU64,
    /// Bytes calls in flight hold: collected responses, envelopes, decoded
    /// tensors.
    budget: MemoryBudget,
    /// Mutual TLS between sidecars, once the proxy has loaded it: for
    /// metrics (certificate expiry, reloads).
    tls: std::sync::OnceLock<Arc<tlc_proxy::tls::TlsContext>>,
    recorder: Option<Arc<Recorder>>,
    /// Both sides: what hop compression keeps (the peers that answered as
    /// sidecars, the references).
    hop: crate::hop::Hop,
    /// Both sides: row ids that crossed, for the rows of their step.
    row_ids: row_ids::RowIds,
    /// Requester side: how fast each holder's answers arrive, and the
    /// decode cost (sent to holders in `tlc-link`).
    link_meter: Arc<crate::link::LinkMeter>,
}

impl Default for Sidecar {
    /// The default policy and bounds, nothing recorded.
    fn default() -> Self {
        Sidecar::new(Policy::default(), Options::default(), None)
    }
}

impl Sidecar {
    /// A sidecar with empty contexts.
    pub fn new(policy: Policy, options: Options, recorder: Option<Recorder>) -> Sidecar {
        let seed = random_seed();
        let budget = MemoryBudget::new(options.in_flight_bytes);
        let hop = crate::hop::Hop::new(crate::hop::HopLimits {
            budget: budget.clone(),
            gather: options.gather,
            max_answer_bytes: options.max_tensor_bytes,
            references_bytes: options.hop_references_bytes,
        });
        Sidecar {
            policy: RwLock::new(Arc::new(policy)),
            options,
            contexts: Contexts::new(
                ContextLimits {
                    push: options.push_limits,
                    pull: options.pull_limits,
                    replicas: options.replica_limits,
                    pull_cache_len: options.pull_cache_len,
                },
                seed,
            ),
            graphs: Arc::new(GraphIndex::default()),
            holder: HolderState {
                fallbacks: FallbackCache::new(options.fallback_bytes),
                classes: ContextTable::new(small_table(options.push_limits)),
                warmup: ContextTable::new(small_table(options.push_limits)),
                calls: ContextTable::new(small_table(options.push_limits)),
                payoffs: crate::link::Payoffs::default(),
            },
            requester: RequesterState::default(),
            stats: Stats::default(),
            steps: crate::training::StepWatch::default(),
            stuck: tokio::sync::watch::Sender::new(None),
            waiting: Default::default(),
            budget,
            tls: std::sync::OnceLock::new(),
            recorder: recorder.map(Arc::new),
            hop,
            row_ids: row_ids::RowIds::new(options.fallback_bytes.clamp(1 << 20, ROW_IDS_BYTES)),
            link_meter: Arc::default(),
        }
    }

    /// The compression policy in force now. Callers hold on to the `Arc`
    /// for one tensor, so a change applies from the next tensor on and
    /// never halfway through one.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `policy` in force for every tensor from now on.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }

    /// Changes how long idle contexts live and how much memory each table
    /// may use; applied at the next eviction.
    pub fn set_table_limits(&self, limits: TableLimits) {
        self.contexts.set_limits(limits);
        self.holder.classes.set_limits(small_table(limits));
        self.holder.warmup.set_limits(small_table(limits));
        self.holder.calls.set_limits(small_table(limits));
    }

    /// How long idle contexts live and how much memory each context table
    /// may use, as last set (the bookkeeping tables get a share of it).
    pub fn table_limits(&self) -> TableLimits {
        self.contexts.push().limits()
    }

    /// The `[recovery]` settings in force.
    pub fn recovery(&self) -> RecoverySettings {
        self.steps.settings()
    }

    /// Puts `settings` in force from the next read of a step counter on.
    pub fn set_recovery(&self, settings: RecoverySettings) {
        self.steps.configure(settings);
    }

    /// Takes one read of a step counter, `value`, as the data path does
    /// for each one that crosses the sidecar (for replaying reads): what
    /// to answer, a counter that went back logged and counted.
    pub fn observe_step_read(&self, read: StepRead<'_>, value: i64, at: Moment) -> Verdict {
        self.steps.observe(read, value, at)
    }

    /// Sends `request` on to `upstream`: from the requester's side through
    /// hop compression (marked, compressed when the policy says so, the
    /// answer restored); from the holder's side to TensorFlow as it is,
    /// but for sidecar headers (`boundary`).
    pub(crate) async fn forward(
        &self,
        role: Role,
        upstream: &Upstream,
        request: Request<ProxyBody>,
    ) -> Response<ProxyBody> {
        match role {
            Role::Outbound => {
                let compress = self.policy().hop_compression();
                crate::hop::forward(&self.hop, self.stats.hop(), compress, upstream, request).await
            }
            Role::Inbound => boundary::forward(upstream, request).await,
        }
    }

    /// Remembers the row ids in `response`, the answer to `call`, if the
    /// graph said `call` carries ids ([`RowRole::Ids`]): both sidecars
    /// keep them for the rows of the same step.
    ///
    /// [`RowRole::Ids`]: crate::graph::RowRole::Ids
    pub(crate) fn keep_row_ids(
        &self,
        call: &tlc_core::TensorCall,
        classified: Option<&crate::graph::Classified>,
        response: &tlc_wire::tf::proto::RecvTensorResponse,
    ) -> Option<Arc<[i64]>> {
        let is_ids = classified
            .and_then(|c| c.rows.as_ref())
            .is_some_and(|r| r.role == crate::graph::RowRole::Ids);
        if !is_ids {
            return None;
        }
        let max = usize::try_from(self.options.max_tensor_bytes / 8).unwrap_or(usize::MAX);
        match tlc_wire::tf::ids::read_ids(response, max) {
            Ok(ids) => {
                let key = row_ids::IdsKey {
                    src_task: call.holder_task.clone(),
                    dst_task: call.requester_task.clone(),
                    tensor_name: call.tensor_name.clone(),
                    step_id: call.step_id,
                };
                let ids: Arc<[i64]> = ids.into();
                self.row_ids.keep(key, Arc::clone(&ids), Instant::now());
                Some(ids)
            }
            Err(err) => {
                debug!(tensor = %call.tensor_name, error = %err, "row ids not kept");
                None
            }
        }
    }

    /// The bounds this sidecar was made with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Drops contexts idle too long or beyond the memory budgets, and
    /// warns if training stopped making progress. Called every few seconds.
    pub fn evict(&self) {
        let now = Instant::now();
        // A job that ended closed its connections: no progress is expected.
        if self.stats.connections().open_now() > 0 {
            self.steps.check_stall(now);
            // Stuck means calls waiting for answers that never come.
            let waiting = self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0;
            if let Some(message) = waiting
                .then(|| self.steps.stuck_after_rebuild(now))
                .flatten()
            {
                tracing::error!("{message}");
                self.stuck.send_replace(Some(message.into()));
            }
        }
        let [push, pull, replicas] = self.contexts.evict(now);
        let classes = self.holder.classes.evict(now);
        let warmup = self.holder.warmup.evict(now);
        let calls = self.holder.calls.evict(now);
        debug!(
            ?push,
            ?pull,
            ?replicas,
            ?classes,
            ?warmup,
            ?calls,
            "evicted contexts"
        );
        let freed =
            push.bytes + pull.bytes + replicas.bytes + classes.bytes + warmup.bytes + calls.bytes;
        if freed >= RELEASE_AFTER {
            tlc_proxy::limits::memory::release_freed_memory();
        }
    }
}

impl Handler for Sidecar {
    /// Every call the proxy accepts comes here, and goes through the
    /// stages of [`call`] in their order.
    async fn handle(
        self: Arc<Self>,
        role: Role,
        upstream: &Upstream,
        request: Request<ProxyBody>,
    ) -> Response<ProxyBody> {
        call::handle(self, role, upstream, request).await
    }

    fn connections(&self) -> &ConnectionStats {
        self.stats.connections()
    }

    fn tls_loaded(&self, tls: &Arc<TlsContext>) {
        // A sidecar started by two proxies keeps the first one's.
        let _ = self.tls.set(Arc::clone(tls));
    }
}
