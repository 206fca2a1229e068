//! The async side of the master's admin socket, for salt-api (one connection per call,
//! one JSON line each way; see `halite_master::admin::client` for the protocol).

use std::path::Path;

use serde_json::Value as J;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
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

/// Reads the next answer line (`None` when the master closed the connection).
pub async fn next(conn: &mut BufReader<UnixStream>) -> Result<Option<J>, ApiError> {
    let mut line = String::new();
    let n = conn.read_line(&mut line).await.map_err(|e| ApiError::new(503, format!("admin socket: {e}")))?;
    if n == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line).map(Some).map_err(|e| ApiError::new(500, format!("admin socket: bad answer: {e}")))
}

/// One request, one answer; `{"error": ...}` answers become [`ApiError`]s (400).
pub async fn call(sock_dir: &Path, req: &J) -> Result<J, ApiError> {
    let mut c = open(sock_dir, req).await?;
    let v = next(&mut c).await?.ok_or_else(|| ApiError::new(503, "the master closed the admin connection"))?;
    if let Some(e) = v.get("error").and_then(J::as_str) {
        return Err(ApiError::new(400, e));
    }
    Ok(v)
}
