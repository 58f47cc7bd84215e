//! The body of every refusal (`4xx`, `5xx`).

use serde::{Deserialize, Serialize};

/// `{"error": "one line that says what is wrong"}`: the whole message,
/// which tlcctl prints as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What is wrong, naming the key and the rule where there is one.
    pub error: String,
}

impl ErrorBody {
    /// A body saying `message`.
    pub fn new(message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: message.into(),
        }
    }
}
