use super::*;

/// Gives `input` in one read, then stays pending (an idle peer that keeps its
/// connection open).
struct OneBurst {
    input: Option<Vec<u8>>,
}

impl AsyncRead for OneBurst {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buffer: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.input.as_mut() {
            Some(input) if !input.is_empty() => {
                let n = buffer.len().min(input.len());
                buffer[..n].copy_from_slice(&input[..n]);
                input.drain(..n);
                Poll::Ready(Ok(n))
            }
            _ => Poll::Pending,
        }
    }
}

/// Reads a burst of 64 messages of 4 KiB, then polls once more (pending); returns
/// the reader's buffer capacity at that point and the messages.
fn idle_capacity_after_a_burst(release: bool) -> (usize, Vec<Message>) {
    let payload = vec![7_u8; 4096];
    let frames = vec![payload.as_slice(); 64];
    let mut options = SocketOptions::default();
    options.release_idle_buffers(release);
    let source = OneBurst {
        input: Some(encoded_stream(&frames)),
    };
    let mut reader = ZmqFramedRead::new(Box::new(source), Arc::new(options));
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut got = Vec::new();
    loop {
        match Pin::new(&mut reader).poll_next(&mut cx) {
            Poll::Ready(Some(item)) => got.push(item.unwrap()),
            Poll::Ready(None) => panic!("the source does not end"),
            Poll::Pending => break,
        }
    }
    (reader.buffer.capacity(), got)
}

#[test]
fn an_idle_connection_gives_its_read_buffer_back_when_asked() {
    let (kept, got) = idle_capacity_after_a_burst(false);
    assert_eq!(got.len(), 65, "the greeting and every message");
    assert!(kept > 0, "by default the grown buffer is kept: {kept}");
    let (released, got) = idle_capacity_after_a_burst(true);
    assert_eq!(got.len(), 65);
    assert_eq!(released, 0, "nothing is held while idle");
    // The messages read before are intact (they own their share of the storage).
    for m in &got[1..] {
        let Message::Message(m) = m else {
            panic!("a message: {m:?}")
        };
        assert_eq!(m.get(0).unwrap().as_ref(), &[7_u8; 4096][..]);
    }
}

#[test]
fn a_connection_asked_to_release_starts_without_buffers() {
    let mut options = SocketOptions::default();
    options.release_idle_buffers(true);
    let io = FramedIo::new(
        Box::new(Cursor::new(Vec::new())),
        Box::new(Cursor::new(Vec::new())),
        Arc::new(options),
    );
    let (read, write) = io.into_parts();
    assert_eq!(read.buffer.capacity(), 0);
    assert_eq!(write.into_parts().buffer.capacity(), 0);
    let io = FramedIo::new(
        Box::new(Cursor::new(Vec::new())),
        Box::new(Cursor::new(Vec::new())),
        Arc::new(SocketOptions::default()),
    );
    let (read, write) = io.into_parts();
    assert!(read.buffer.capacity() > 0 && write.into_parts().buffer.capacity() > 0, "defaults unchanged");
}
