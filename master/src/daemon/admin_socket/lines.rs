//! The admin socket's line protocol: one JSON request per line in, one JSON answer or
//! event per line out. Reading is bounded as the bytes arrive (a line longer than the
//! caller's bound is never buffered whole); writing is bounded in time, so a client that
//! stops reading cannot hold a master task. Used by the request loop (`admin.rs`) and the
//! job-follow stream (`follow.rs`).

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};

/// How long writing one answer or event line may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// What reading one request line gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Request(Vec<u8>),
    /// The peer closed the connection (a partial last line is dropped).
    Closed,
    /// The line passed `max` bytes without ending; the connection is closed.
    TooLong,
}

/// Reads one line of at most `max` bytes (without its newline). The buffer grows with
/// what arrives, never past `max` + 1 bytes, whatever the peer sends.
pub async fn read_line<R: AsyncRead + Unpin>(rd: &mut BufReader<R>, max: usize) -> std::io::Result<Line> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let n = (&mut *rd).take(max as u64 + 1).read_until(b'\n', &mut buf).await?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok(Line::Request(buf));
    }
    if n > max {
        return Ok(Line::TooLong);
    }
    Ok(Line::Closed)
}

/// Writes one line (a newline is added) within [`WRITE_TIMEOUT`].
pub(in crate::daemon) async fn write_line(wr: &mut tokio::net::unix::OwnedWriteHalf, line: String) -> bool {
    let mut out = line;
    out.push('\n');
    write_bounded(wr, out.as_bytes()).await
}

/// Writes `bytes` whole within [`WRITE_TIMEOUT`]; false once the client cannot take them.
pub(in crate::daemon) async fn write_bounded(wr: &mut (impl tokio::io::AsyncWrite + Unpin), bytes: &[u8]) -> bool {
    matches!(tokio::time::timeout(WRITE_TIMEOUT, wr.write_all(bytes)).await, Ok(Ok(())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_while_they_are_read() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        let writer = tokio::spawn(async move {
            a.write_all(b"{\"cmd\":\"key.list\"}\n").await.unwrap();
            // A line that never ends: 1 MiB without a newline.
            for _ in 0..16 {
                if a.write_all(&[b'x'; 1 << 16]).await.is_err() {
                    return; // the reader gave up, as it should
                }
            }
        });
        let mut rd = BufReader::new(b);
        assert_eq!(read_line(&mut rd, 1024).await.unwrap(), Line::Request(b"{\"cmd\":\"key.list\"}".to_vec()));
        assert_eq!(read_line(&mut rd, 1024).await.unwrap(), Line::TooLong);
        drop(rd);
        let _ = writer.await;
        let (mut a, b) = tokio::io::duplex(64);
        a.write_all(b"partial").await.unwrap();
        drop(a);
        assert_eq!(read_line(&mut BufReader::new(b), 1024).await.unwrap(), Line::Closed);
    }
}
