use crate::codec::{CodecResult, Message, ZmqFramedWrite};

use bytes::BytesMut;
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const WRITE_BATCH_LIMIT: usize = 128;

/// Writes queued socket messages into the underlying framed sink in small batches.
/// With `release_idle` (`SocketOptions::release_idle_buffers`), the write buffer is
/// given back to the allocator after each flush that emptied it. With `queued`, the
/// count of bytes in the queue (`SocketOptions::send_queue_bytes`), each message's
/// bytes are taken off it as the message leaves the queue.
#[inline]
pub(crate) async fn write_message_queue(
    mut queue_receiver: mpsc::Receiver<Message>,
    mut send_queue: ZmqFramedWrite,
    release_idle: bool,
    queued: Option<Arc<AtomicUsize>>,
) -> CodecResult<()> {
    let dequeued = |message: &Message| {
        if let Some(queued) = &queued {
            queued.fetch_sub(message_bytes(message), Ordering::AcqRel);
        }
    };
    while let Some(message) = queue_receiver.next().await {
        dequeued(&message);
        // When backlog already exists, feed a batch before flushing once to avoid per-message flush cost during bursts.
        send_queue.feed(message).await?;

        for _ in 1..WRITE_BATCH_LIMIT {
            let message = match queue_receiver.try_recv() {
                Ok(message) => message,
                Err(_) => break,
            };
            dequeued(&message);
            send_queue.feed(message).await?;
        }

        send_queue.flush().await?;
        if release_idle {
            send_queue = release_write_buffer(send_queue);
        }
    }

    Ok(())
}

/// A peer's message queue that holds at most `capacity` messages (at least one), for
/// a socket that sends on the one sender it keeps for the peer: a bounded futures
/// channel holds its buffer and one more message for each sender, so the buffer is one
/// less.
pub(crate) fn message_queue(capacity: usize) -> (mpsc::Sender<Message>, mpsc::Receiver<Message>) {
    mpsc::channel(capacity.saturating_sub(1))
}

/// A queued message's bytes, as `SocketOptions::send_queue_bytes` counts them: the sum
/// of its frames' lengths (0 for a command or greeting).
pub(crate) fn message_bytes(message: &Message) -> usize {
    match message {
        Message::Message(m) => m.iter().map(|frame| frame.len()).sum(),
        _ => 0,
    }
}

/// `send_queue` with its write buffer released if it holds nothing.
fn release_write_buffer(send_queue: ZmqFramedWrite) -> ZmqFramedWrite {
    let mut parts = send_queue.into_parts();
    if parts.buffer.is_empty() {
        parts.buffer = BytesMut::new();
    }
    ZmqFramedWrite::from_parts(parts)
}

#[cfg(test)]
mod tests {
    mod batch_boundaries;

    use super::*;
    use crate::codec::{CodecError, ZmqCodec};
    use crate::ZmqMessage;

    use bytes::Bytes;
    use futures::{AsyncWrite, SinkExt};
    use parking_lot::Mutex;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    #[derive(Default)]
    struct WriteStats {
        bytes: Vec<u8>,
        flushes: usize,
    }

    struct RecordingWrite {
        stats: Arc<Mutex<WriteStats>>,
    }

    impl AsyncWrite for RecordingWrite {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let mut stats = self.stats.lock();
            stats.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.stats.lock().flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    struct FailingWrite;

    impl AsyncWrite for FailingWrite {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            _buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "writer failed",
            )))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[crate::async_rt::test]
    async fn test_write_message_queue_batches_ready_messages_into_one_flush() {
        let (mut sender, receiver) = mpsc::channel(8);
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"a"))))
            .await
            .expect("send first message");
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"b"))))
            .await
            .expect("send second message");
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"c"))))
            .await
            .expect("send third message");
        drop(sender);

        let stats = Arc::new(Mutex::new(WriteStats::default()));
        let writer = RecordingWrite {
            stats: Arc::clone(&stats),
        };
        let send_queue = ZmqFramedWrite::new(Box::new(writer), ZmqCodec::new());

        write_message_queue(receiver, send_queue, false, None)
            .await
            .expect("write queued messages");

        let stats = stats.lock();
        assert_eq!(1, stats.flushes);
        assert_eq!(
            stats.bytes,
            vec![0x00, 0x01, b'a', 0x00, 0x01, b'b', 0x00, 0x01, b'c']
        );
    }

    #[crate::async_rt::test]
    async fn test_write_message_queue_releasing_idle_buffers_writes_everything() {
        let (mut sender, receiver) = mpsc::channel(8);
        let big = Bytes::from(vec![9_u8; 20_000]);
        for m in [Bytes::from_static(b"a"), big.clone(), Bytes::from_static(b"c")] {
            sender
                .send(Message::Message(ZmqMessage::from(m)))
                .await
                .expect("queue a message");
        }
        drop(sender);
        let stats = Arc::new(Mutex::new(WriteStats::default()));
        let writer = RecordingWrite {
            stats: Arc::clone(&stats),
        };
        let send_queue = ZmqFramedWrite::new(Box::new(writer), ZmqCodec::new());
        write_message_queue(receiver, send_queue, true, None)
            .await
            .expect("write queued messages");
        let stats = stats.lock();
        assert_eq!(stats.bytes.len(), 3 + 9 + 20_000 + 3);
        assert_eq!(&stats.bytes[stats.bytes.len() - 3..], &[0x00, 0x01, b'c']);
    }

    #[test]
    fn test_an_emptied_write_buffer_is_released_and_a_full_one_kept() {
        let writer = RecordingWrite {
            stats: Arc::new(Mutex::new(WriteStats::default())),
        };
        let send_queue = ZmqFramedWrite::new(Box::new(writer), ZmqCodec::new());
        let mut parts = release_write_buffer(send_queue).into_parts();
        assert_eq!(parts.buffer.capacity(), 0);
        parts.buffer.extend_from_slice(b"unsent");
        let parts = release_write_buffer(ZmqFramedWrite::from_parts(parts)).into_parts();
        assert_eq!(&parts.buffer[..], b"unsent", "bytes not yet written are kept");
    }

    #[crate::async_rt::test]
    async fn test_write_message_queue_returns_writer_errors() {
        let (mut sender, receiver) = mpsc::channel(1);
        sender
            .send(Message::Message(ZmqMessage::from(Bytes::from_static(b"a"))))
            .await
            .expect("send message");
        drop(sender);

        let send_queue = ZmqFramedWrite::new(Box::new(FailingWrite), ZmqCodec::new());
        let error = write_message_queue(receiver, send_queue, false, None)
            .await
            .expect_err("write error");

        let CodecError::Io(error) = error else {
            panic!("unexpected error type");
        };
        assert_eq!(io::ErrorKind::BrokenPipe, error.kind());
    }
}
