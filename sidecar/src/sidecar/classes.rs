//! What the holder side decided for each tensor it was asked for: its
//! class, why, and how it was encoded. Dense tensors also have a push
//! context or a pull source; this table is what `tlcctl tensors` shows for
//! every tensor, and the only record of the ones encoded without memory.
//!
//! The classes come from the graphs TensorFlow registers through the
//! sidecar; a graph can also be taught by hand ([`Sidecar::learn_graph`],
//! for tests and tools that do not send it through), and what the graphs
//! said read back ([`Sidecar::graph_class`]).

use std::time::Instant;

use tlc_codec::Codec;

use super::Sidecar;
use crate::graph::index::{GraphError, Learned};
use crate::graph::{Classified, TensorClass};
use crate::policy::Treatment;
use tlc_context::ContextMemory;
use tlc_core::Direction;
use tlc_core::TensorCall;
use tlc_wire::peer;

/// What was decided for one tensor, and what went through it without memory.
#[derive(Debug, Clone)]
pub struct ClassRecord {
    /// Which way it travels.
    pub direction: Direction,
    /// The class and why.
    pub classified: Classified,
    /// How it was last encoded; `None` while it passed as it is.
    pub treatment: Option<Treatment>,
    /// The codec of the last encode.
    pub codec: Codec,
    /// Values per tensor.
    pub elements: u64,
    /// Tensors encoded without memory.
    pub frames: u64,
    /// Their size as f32.
    pub raw_bytes: u64,
    /// Their envelopes' size.
    pub wire_bytes: u64,
}

impl ContextMemory for ClassRecord {
    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<ClassRecord>() + self.classified.reason.len()
    }
}

impl Sidecar {
    /// The class of the tensor a call asks for: from a graph this sidecar
    /// read, else from the one the requesting sidecar read (`hint`), else
    /// unknown.
    pub fn classify(&self, call: &TensorCall, hint: Option<peer::ClassHint>) -> Classified {
        if let Some(mut known) =
            self.graph_class(&call.holder_task, &call.requester_task, &call.tensor_name)
        {
            // The optimizer is on the requester's task: under
            // SyncReplicasOptimizer only the chief's registration shows it,
            // and a worker's sidecar sees only its own.
            if hint.is_some_and(|h| h.adaptive && h.class == known.class) {
                known.mark_adaptive("the requester applies an adaptive optimizer");
            }
            return known;
        }
        match hint {
            Some(hint) => Classified {
                class: hint.class,
                reason: if hint.adaptive {
                    "from the requesting sidecar's graph (an adaptive optimizer)".into()
                } else {
                    "from the requesting sidecar's graph".into()
                },
                output: 0,
                function: hint.function.then(|| "(the requester's)".into()),
                accumulated: hint.accumulated,
                adaptive: hint.adaptive,
                rows: None,
                read_only: false,
            },
            None => Classified::plain(TensorClass::Unknown, "no graph seen for this tensor", 0),
        }
    }

    /// Reads a `RegisterGraphRequest` (`message`, its protobuf bytes) as if
    /// it had passed through the sidecar: the tensors it names get their
    /// classes.
    pub fn learn_graph(&self, message: &[u8]) -> Result<Learned, GraphError> {
        self.graphs.learn_register_graph(message)
    }

    /// What the graphs seen said of the tensor `tensor_name` sent from
    /// `holder_task` to `requester_task`; `None` if they named no such
    /// tensor.
    pub fn graph_class(
        &self,
        holder_task: &str,
        requester_task: &str,
        tensor_name: &str,
    ) -> Option<Classified> {
        self.graphs.lookup(holder_task, requester_task, tensor_name)
    }

    /// Records what was done with a tensor of `elements` values: encoded
    /// with `treatment` (`raw` bytes as `wire`), or passed (`None`).
    pub(crate) fn record_class(
        &self,
        call: &TensorCall,
        classified: &Classified,
        encoded: Option<(Treatment, Codec, usize, usize)>,
        elements: usize,
    ) {
        let record = self
            .holder
            .classes
            .get_or_insert_with(&call.key(), Instant::now(), || ClassRecord {
                direction: call.direction,
                classified: classified.clone(),
                treatment: None,
                codec: Codec::None,
                elements: 0,
                frames: 0,
                raw_bytes: 0,
                wire_bytes: 0,
            });
        let mut record = tlc_context::table::lock(&record);
        if record.classified != *classified {
            record.classified = classified.clone();
        }
        record.elements = elements as u64;
        record.treatment = encoded.map(|(treatment, ..)| treatment);
        if let Some((treatment, codec, raw, wire)) = encoded {
            record.codec = codec;
            if matches!(treatment, Treatment::Stateless | Treatment::RowMemory) {
                record.frames += 1;
                record.raw_bytes += raw as u64;
                record.wire_bytes += wire as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tlc_core::Direction;
    use tlc_wire::graph::build::PartitionBuilder;

    const PS: &str = "/job:ps/replica:0/task:0";
    const W1: &str = "/job:worker/replica:0/task:1";

    fn push_call(tensor_name: &str) -> TensorCall {
        TensorCall {
            tensor: "g".into(),
            tensor_name: tensor_name.into(),
            holder_task: W1.into(),
            holder_incarnation: 1,
            requester_task: PS.into(),
            direction: Direction::Push,
            step_id: 1,
        }
    }

    fn hint(adaptive: bool) -> peer::ClassHint {
        peer::ClassHint {
            class: TensorClass::DenseGradient,
            function: false,
            accumulated: true,
            adaptive,
        }
    }

    /// A worker's sidecar reads its own registration of the ps partition
    /// (the gradient into an accumulator) but not the chief's, where the
    /// optimizer is: the requester's word that it is adaptive counts.
    #[test]
    fn the_requesters_adaptive_optimizer_joins_what_the_holder_knows() {
        let sidecar = Sidecar::default();
        let partition = PartitionBuilder::new(PS).accumulated_gradient("w", "edge_7_g", W1);
        sidecar
            .learn_graph(&partition.register_graph_request())
            .unwrap();
        let call = push_call("edge_7_g");
        let own = sidecar.classify(&call, None);
        assert_eq!(own.class, TensorClass::DenseGradient);
        assert!(own.accumulated && !own.adaptive);
        assert!(!sidecar.classify(&call, Some(hint(false))).adaptive);
        let told = sidecar.classify(&call, Some(hint(true)));
        assert!(told.adaptive && told.accumulated, "{told:?}");
        assert!(told.reason.contains("adaptive optimizer"));
        // A hint of another class changes nothing.
        let other = peer::ClassHint {
            class: TensorClass::Sparse,
            ..hint(true)
        };
        assert!(!sidecar.classify(&call, Some(other)).adaptive);
        // Without a graph of its own, the hint is the class.
        let unknown = push_call("edge_8_h");
        assert!(sidecar.classify(&unknown, Some(hint(true))).adaptive);
        assert!(!sidecar.classify(&unknown, None).adaptive);
    }
}
