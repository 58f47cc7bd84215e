//! What a tensor is, as far as compression cares. The graph reader
//! decides it; policy, contexts, peers and metrics use it.

/// What a tensor is, as far as compression cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorClass {
    /// A variable's value, read on its task and sent to another.
    DenseRead,
    /// A dense gradient on its way to a dense apply or accumulate op.
    DenseGradient,
    /// Gathered rows, sparse gradient values or indices.
    Sparse,
    /// Not known: no graph seen, or a graph that does not say.
    Unknown,
}

impl TensorClass {
    /// `dense_read`, `dense_gradient`, `sparse`, `unknown`: metric labels.
    pub fn name(self) -> &'static str {
        match self {
            TensorClass::DenseRead => "dense_read",
            TensorClass::DenseGradient => "dense_gradient",
            TensorClass::Sparse => "sparse",
            TensorClass::Unknown => "unknown",
        }
    }

    /// Every class, in label order.
    pub const ALL: [TensorClass; 4] = [
        TensorClass::DenseRead,
        TensorClass::DenseGradient,
        TensorClass::Sparse,
        TensorClass::Unknown,
    ];
}
