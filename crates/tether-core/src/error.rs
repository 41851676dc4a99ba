//! Why an endpoint could not be created, or a sample not written.

use bytes::Bytes;

/// Why an endpoint could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateError {
    /// The writer's QoS names a flow controller this participant does not have.
    UnknownFlowController(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateError::UnknownFlowController(n) => {
                write!(f, "unknown flow controller '{n}' (define it first)")
            }
        }
    }
}

impl std::error::Error for CreateError {}

/// Why a write was refused. Every variant hands the payload back.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// No such writer.
    UnknownWriter(Bytes),
    /// A keep-all writer is full of unacknowledged samples (or a local keep-all reader is
    /// full). Retry after [`Event::WriterReady`](crate::Event::WriterReady).
    WouldBlock(Bytes),
    /// The sample is larger than `max_sample_size`.
    TooLarge {
        /// The payload.
        payload: Bytes,
        /// Largest payload accepted.
        max: usize,
    },
}

impl WriteError {
    /// The payload that was not written.
    pub fn into_payload(self) -> Bytes {
        match self {
            WriteError::UnknownWriter(p)
            | WriteError::WouldBlock(p)
            | WriteError::TooLarge { payload: p, .. } => p,
        }
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::UnknownWriter(_) => f.write_str("unknown writer"),
            WriteError::WouldBlock(_) => {
                f.write_str("writer history full of unacknowledged samples")
            }
            WriteError::TooLarge { payload, max } => write!(
                f,
                "sample of {} bytes exceeds max_sample_size ({max} bytes)",
                payload.len()
            ),
        }
    }
}

impl std::error::Error for WriteError {}
