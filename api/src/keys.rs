//! `/keys`: rest_cherrypy's `Keys`, over the wheel client ([`crate::clients::wheel`],
//! so `@wheel` rules apply).
//!
//! - `GET /keys`: `key.list_all`'s return; `GET /keys/<id>`: `key.finger`'s
//!   (`{"minions": {id: finger}}`).
//! - `POST /keys` with `mid` (and `keysize`, `force`) and the caller's credentials
//!   (`username`/`password`/`eauth`, or `token`) in the body, no session: `key.gen_accept`
//!   (a key pair made here, its public key accepted for `mid` through the log), answered
//!   as a tar archive of `minion.pub` and `minion.pem` (`saltkeys-<mid>.tar`), as
//!   rest_cherrypy answers it; an id whose key is accepted already gives empty files
//!   unless `force` (Salt's `{}`).

use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use hyper::Response;
use serde_json::{json, Map, Value as J};

use crate::clients::{wheel, Session, Special};
use crate::config::ApiConfig;
use crate::reply::{self, ApiError, Body, Format};
use crate::session;

/// `GET /keys` and `GET /keys/<id>`.
pub async fn get(cfg: &ApiConfig, s: &Session, fmt: Format, id: Option<&str>) -> Result<Response<Body>, ApiError> {
    let c = match id {
        None => Special::call("key.list_all", Map::new()),
        Some(id) => Special::call("key.finger", Map::from_iter([("match".to_string(), J::String(id.to_string()))])),
    };
    let w = wheel::wheel(cfg, s, &c).await?;
    let ret = w.get("data").and_then(|d| d.get("return")).cloned().unwrap_or(json!({}));
    Ok(reply::data(200, fmt, &json!({ "return": ret })))
}

/// `POST /keys`.
pub async fn post(cfg: &ApiConfig, body: J) -> Result<Response<Body>, ApiError> {
    let mut chunk = match body {
        J::Object(m) => m,
        J::Array(a) => a.into_iter().next().and_then(|c| c.as_object().cloned()).ok_or_else(|| ApiError::new(400, "Lowstates must be a list of maps"))?,
        _ => return Err(ApiError::new(400, "POST /keys takes mid and the caller's credentials")),
    };
    let s = session::of_chunk(cfg, &chunk).await?;
    let mid = match chunk.remove("mid").or_else(|| chunk.remove("id_")) {
        Some(J::String(m)) => m,
        _ => return Err(ApiError::new(400, "POST /keys needs mid, the minion id to make a key pair for")),
    };
    let mut kwarg = Map::new();
    for (k, v) in chunk {
        match k.as_str() {
            "username" | "password" | "eauth" | "token" | "client" | "fun" => {}
            "keysize" | "force" => {
                kwarg.insert(k, v);
            }
            other => tracing::warn!(field = other, "salt-api: POST /keys: field not read (mid, keysize, force are)"),
        }
    }
    kwarg.insert("id_".into(), J::String(mid.clone()));
    let w = wheel::wheel(cfg, &s, &Special::call("key.gen_accept", kwarg)).await?;
    let ret = w.get("data").and_then(|d| d.get("return")).cloned().unwrap_or(J::Null);
    let text = |k: &str| ret.get(k).and_then(J::as_str).unwrap_or("").as_bytes().to_vec();
    let tar = tarball(&[("minion.pub", &text("pub")), ("minion.pem", &text("priv"))]);
    let mut r = Response::new(reply::full(tar.clone()).boxed());
    let h = r.headers_mut();
    // `mid` is a checked minion id (the master refuses others before any key is kept).
    h.insert("Content-Disposition", HeaderValue::from_str(&format!("attachment; filename=\"saltkeys-{mid}.tar\"")).map_err(|_| ApiError::new(400, "mid is not a minion id"))?);
    h.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    h.insert(hyper::header::CONTENT_LENGTH, HeaderValue::from(tar.len()));
    h.insert("Cache-Control", HeaderValue::from_static("no-cache"));
    Ok(r)
}

/// Bytes of a tar block.
const BLOCK: usize = 512;
/// A tar archive is padded to a whole record of 20 blocks (as Python's `tarfile` pads).
const RECORD: usize = 20 * BLOCK;

/// A ustar archive of regular files (mode 0644, owner 0, time 0), as Python's
/// `tarfile` writes `TarInfo`s it is given only a name and a size.
pub fn tarball(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in files {
        let mut h = [0u8; BLOCK];
        let put = |h: &mut [u8; BLOCK], at: usize, b: &[u8]| h[at..at + b.len()].copy_from_slice(b);
        put(&mut h, 0, &name.as_bytes()[..name.len().min(100)]);
        put(&mut h, 100, b"0000644\0");
        put(&mut h, 108, b"0000000\0");
        put(&mut h, 116, b"0000000\0");
        put(&mut h, 124, format!("{:011o}\0", data.len()).as_bytes());
        put(&mut h, 136, b"00000000000\0");
        put(&mut h, 148, b"        ");
        h[156] = b'0';
        put(&mut h, 257, b"ustar\0");
        put(&mut h, 263, b"00");
        put(&mut h, 329, b"0000000\0");
        put(&mut h, 337, b"0000000\0");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    out.resize(out.len() + 2 * BLOCK, 0);
    out.resize(out.len().div_ceil(RECORD) * RECORD, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive reads back with GNU tar: names, sizes, contents.
    #[test]
    fn the_tarball_reads_back_with_tar() {
        let d = tempfile::tempdir().unwrap();
        let tar = tarball(&[("minion.pub", b"-----BEGIN PUBLIC KEY-----\nabc\n"), ("minion.pem", &[b'k'; 1000])]);
        assert_eq!(tar.len(), RECORD);
        std::fs::write(d.path().join("k.tar"), &tar).unwrap();
        let o = std::process::Command::new("tar").arg("-xf").arg(d.path().join("k.tar")).arg("-C").arg(d.path()).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(std::fs::read(d.path().join("minion.pub")).unwrap(), b"-----BEGIN PUBLIC KEY-----\nabc\n");
        assert_eq!(std::fs::read(d.path().join("minion.pem")).unwrap(), vec![b'k'; 1000]);
        assert_eq!(tarball(&[("e", b"")]).len(), RECORD, "empty files too");
    }
}
