use thiserror::Error;

/// Represents an error when encoding/decoding raw byte buffers and frames
#[non_exhaustive]
#[derive(Error, Debug)]
pub enum CodecError {
    #[error("{0}")]
    Command(&'static str),
    #[error("{0}")]
    Greeting(&'static str),
    #[error("{0}")]
    Mechanism(&'static str),
    #[error("{0}")]
    Decode(&'static str),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(&'static str),
    /// A peer declared a frame that would take its message past
    /// [`SocketOptions::max_message_size`](crate::SocketOptions::max_message_size);
    /// refused from the frame header, before anything is reserved for the frame.
    /// `size` counts what the message would then hold (see that option).
    #[error("message of {size} bytes exceeds the maximum message size of {max} bytes")]
    MessageTooLarge { size: u64, max: usize },
}

pub(crate) type CodecResult<T> = Result<T, CodecError>;
