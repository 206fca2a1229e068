//! The async side of the master's admin socket, for salt-api (one connection per call,
//! one JSON line each way; see `halite_master::admin::client` for the protocol).

use std::path::Path;

use serde_json::Value as J;
use halite_master::admin::client::MAX_ANSWER_BYTES;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::reply::ApiError;

/// Opens a connection and sends `req`.
pub async fn open(sock_dir: &Path, req: &J) -> Result<BufReader<UnixStream>, ApiError> {
    let path = halite_master::admin::client::socket_path(sock_dir);
    let mut s = UnixStream::connect(&path).await.map_err(|e| ApiError::new(503, format!("the master is not running ({}: {e})", path.display())))?;
    let mut line = req.to_string();
    line.push('\n');
    s.write_all(line.as_bytes()).await.map_err(|e| ApiError::new(503, format!("admin socket: {e}")))?;
    Ok(BufReader::new(s))
}

/// Reads the next answer line (`None` when the master closed the connection), at most
/// [`MAX_ANSWER_BYTES`] of it, as the tools' client does.
pub async fn next(conn: &mut BufReader<UnixStream>) -> Result<Option<J>, ApiError> {
    next_bounded(conn, MAX_ANSWER_BYTES).await
}

async fn next_bounded(conn: &mut BufReader<UnixStream>, max: usize) -> Result<Option<J>, ApiError> {
    let mut line = Vec::new();
    let n = (&mut *conn)
        .take(max as u64 + 1)
        .read_until(b'\n', &mut line)
        .await
        .map_err(|e| ApiError::new(503, format!("admin socket: {e}")))?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > max {
        return Err(ApiError::new(502, format!("admin socket: an answer longer than {max} bytes")));
    }
    serde_json::from_slice(&line).map(Some).map_err(|e| ApiError::new(500, format!("admin socket: bad answer: {e}")))
}

/// One request, one answer; `{"error": ...}` answers become [`ApiError`]s (400) that
/// carry the refusal's kind.
pub async fn call(sock_dir: &Path, req: &J) -> Result<J, ApiError> {
    let mut c = open(sock_dir, req).await?;
    let v = next(&mut c).await?.ok_or_else(|| ApiError::new(503, "the master closed the admin connection"))?;
    if let Some(e) = v.get("error").and_then(J::as_str) {
        let kind = halite_master::Error::from_answer(e, v.get("kind").and_then(J::as_str)).kind();
        return Err(ApiError { kind, ..ApiError::new(400, e) });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer line past the bound is an error, not a buffer that grows with it; the
    /// lines before it are read as they are.
    #[tokio::test]
    async fn answer_lines_are_bounded() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let writer = tokio::spawn(async move {
            b.write_all(b"{\"ok\":1}\n").await.unwrap();
            while b.write_all(&[b'x'; 4096]).await.is_ok() {}
        });
        let mut conn = BufReader::new(a);
        assert_eq!(next_bounded(&mut conn, 64 << 10).await.unwrap(), Some(serde_json::json!({"ok": 1})));
        let e = next_bounded(&mut conn, 64 << 10).await.unwrap_err();
        assert!(format!("{e:?}").contains("longer than 65536 bytes"), "{e:?}");
        drop(conn);
        writer.await.unwrap();
    }
}
